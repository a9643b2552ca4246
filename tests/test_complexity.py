"""scripts/complexity.py, the lint step that keeps every function at cyclomatic complexity 25 or
less: it finds a function, a method, a closure and a nested class's method past the limit, and
passes one at it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "complexity.py"


def branches(name: str, count: int, indent: str = "    ") -> str:
    """A function of complexity 1 + count: one `if` per branch."""
    body = "".join(f"{indent}    if x == {n}:\n{indent}        return {n}\n" for n in range(count))
    return f"{indent}def {name}(x):\n{body}{indent}    return -1\n"


def check(*paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_each_function_past_the_limit_is_named_and_one_at_it_passes(tmp_path: Path) -> None:
    package = tmp_path / "package"
    package.mkdir()
    (package / "fine.py").write_text(branches("at_the_limit", 24, indent=""), encoding="utf-8")
    done = check(package)
    assert (done.returncode, done.stdout) == (0, ""), done.stderr

    nested = "\n".join(
        [
            branches("too_complex", 25, indent=""),
            "def outer():",
            branches("closure", 30),
            "    return closure",
            "",
            "class Outer:",
            branches("method", 26),
            "    class Inner:",
            branches("inner_method", 27, indent="        "),
        ]
    )
    (package / "busy.py").write_text(nested, encoding="utf-8")
    done = check(package)
    lines = nested.splitlines()

    def where(name: str) -> str:
        return f"{package / 'busy.py'}:{lines.index(next(x for x in lines if f'def {name}(' in x)) + 1}"

    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        f"{where('closure')} closure (31)",
        f"{where('inner_method')} Inner.inner_method (28)",
        f"{where('method')} Outer.method (27)",
        f"{where('too_complex')} too_complex (26)",
    ]
    assert "4 function(s) above cyclomatic complexity 25" in done.stderr


def test_a_path_that_is_not_there_is_refused_by_name(tmp_path: Path) -> None:
    done = check(tmp_path / "gone")
    assert done.returncode != 0
    assert f"{str(tmp_path / 'gone')!r} is neither a file nor a folder" in done.stderr
