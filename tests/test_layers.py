"""The layer rules of ARCHITECTURE.md, checked on every module's imports."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OURS = {"app", "harness", "evidence", "console", "flows", "acklab", "tests"}
ALLOWED: dict[str, set[str]] = {
    "app": set(),
    "evidence": set(),
    "harness": {"evidence", "app"},
    "console": {"evidence"},
    "flows": {"harness", "evidence"},
    "acklab": OURS - {"tests"},
}
# harness may build the built-in fixture target, and only there.
APP_IMPORT_ALLOWED_IN = {Path("harness/targets/fixture.py")}


def imports_of(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name.split(".")[0]) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module.split(".")[0]))
    return found


def violations(root: Path = ROOT) -> list[str]:
    bad = []
    for package, allowed in ALLOWED.items():
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root)
            for lineno, top in imports_of(path):
                if top not in OURS or top == package:
                    continue
                if top not in allowed:
                    bad.append(f"{rel}:{lineno} imports {top} (allowed: {sorted(allowed) or 'none'})")
                elif package == "harness" and top == "app" and rel not in APP_IMPORT_ALLOWED_IN:
                    bad.append(
                        f"{rel}:{lineno} imports app outside {sorted(map(str, APP_IMPORT_ALLOWED_IN))}"
                    )
    return bad


def test_no_import_crosses_a_layer():
    assert violations() == []


def test_the_checker_catches_a_crossing(tmp_path):
    for package in ALLOWED:
        (tmp_path / package).mkdir()
    (tmp_path / "evidence" / "leaky.py").write_text("from harness import experiments\n")
    (tmp_path / "harness" / "engine.py").write_text("import app.webhooks\n")
    assert violations(tmp_path) == [
        "evidence/leaky.py:1 imports harness (allowed: none)",
        "harness/engine.py:1 imports app outside ['harness/targets/fixture.py']",
    ]


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_every_layer_is_a_package(package):
    assert (ROOT / package / "__init__.py").exists()
