"""Find the oldest version of each core dependency with which the plugin tests pass.

    python scripts/lower_bounds.py [--workdir DIR] [--only NAME ...]

For each core dependency (pyproject's ``dependencies``), in a virtualenv of its own holding
the core and the plugin tests' own packages at their newest, the versions PyPI lists are
bisected: a version passes when, installed alone in place of the newest (``pip install
NAME==V`` with the test packages unpinned, so pip may move them and what NAME requires),
``pip check`` is clean and the smoke suite passes
(``tests/pytest_plugin``'s user suites and README examples: an app of each kind attacked
through the plugin). The result is printed as constraints lines; ci/constraints-lower.txt
keeps them, and the CI job ``core:lower-bounds`` (and tests/test_core_install.py) installs the
core at exactly those versions and runs the plugin tests. Bisecting assumes that what passes
at one version passes at every later one; the final all-at-once run is what proves the file.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import tomllib
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEST_PACKAGES = ["pytest", "pytest-timeout", "pytest-xdist", "fastapi", "flask", "django", "standardwebhooks"]
# The plugin's deterministic tests (the README's examples as pasted, the options, the marker,
# the evidence directory): their assertions hold at any load. tests/pytest_plugin's user
# suites assert which experiments a racy handler fails, which depends on timing; the CI job
# runs them at the bounds too.
SMOKE = [
    "tests/pytest_plugin/test_readme_examples.py",
    "tests/pytest_plugin/test_plugin_options.py",
    "tests/pytest_plugin/test_evidence_stays.py",
    "-k",
    "not explore",
]
# Versions older than these are not tried (no wheels for Python 3.11, or APIs the code
# relies on are missing for certain); the search shows where in between the bound lies.
FLOORS = {
    "click": "8.0.0",
    "rich": "12.0.0",
    "pyyaml": "6.0",
    "jsonschema": "4.18.0",
    "pydantic": "2.0",
    "httpx": "0.24.0",
    "h11": "0.13.0",
    "sniffio": "1.2.0",
    "sqlalchemy": "2.0.0",
    "uvicorn": "0.20.0",
    "a2wsgi": "1.7.0",
}


def core_requirements() -> dict[str, str]:
    """name -> requirement, from pyproject's dependencies."""
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return {re.split(r"[<>=\[ ;]", d, maxsplit=1)[0].lower(): d for d in deps}


def key(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", version)[:4])


def stable(version: str) -> bool:
    return re.fullmatch(r"\d+(\.\d+)*", version) is not None


def versions(python: Path, name: str) -> list[str]:
    done = subprocess.run(
        [str(python), "-m", "pip", "index", "versions", name, "--disable-pip-version-check"],
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    listed = re.search(r"Available versions: (.*)", done.stdout)
    found = [v.strip() for v in (listed.group(1) if listed else "").split(",") if stable(v.strip())]
    floor = key(FLOORS.get(name, "0"))
    ordered = sorted((v for v in found if key(v) >= floor), key=key)
    # The first release of each minor series (and the newest): a bound is where a series starts.
    firsts: dict[tuple[int, ...], str] = {}
    for version in ordered:
        firsts.setdefault(key(version)[:2], version)
    return sorted({*firsts.values(), ordered[-1]}, key=key) if ordered else []


def pip(python: Path, *args: str) -> bool:
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *args],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    return done.returncode == 0


def passes(python: Path, name: str, version: str) -> bool:
    # The test packages come along unpinned: pip picks versions of them that go with this one
    # (an old click gets a Flask that accepts it), so only acklab's own needs decide.
    if not pip(python, f"{name}=={version}", *TEST_PACKAGES):
        return False
    if subprocess.run([str(python), "-m", "pip", "check"], capture_output=True, check=False).returncode:
        return False
    for _ in range(2):  # a failure is tried once more before it counts: the machine may be busy
        done = subprocess.run(
            [str(python), "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *SMOKE],
            cwd=ROOT, capture_output=True, text=True, timeout=900, check=False,
        )  # fmt: skip
        if done.returncode == 0:
            return True
    print("    " + "\n    ".join(done.stdout.splitlines()[-6:]), flush=True)
    return False


def oldest(python: Path, name: str, newest: str) -> str:
    candidates = versions(python, name)
    low, high = 0, len(candidates) - 1  # candidates[high] (the newest) passes
    while low < high:
        middle = (low + high) // 2
        ok = passes(python, name, candidates[middle])
        print(f"  {name}=={candidates[middle]}: {'pass' if ok else 'fail'}", flush=True)
        if ok:
            high = middle
        else:
            low = middle + 1
    pip(python, f"{name}=={newest}")  # back to the newest, for the next dependency's search
    return candidates[high]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--only", nargs="*", default=None)
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="acklab-lower-"))
    env_dir = workdir / "venv"
    if not env_dir.exists():
        venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    if not pip(python, str(ROOT), *TEST_PACKAGES):
        print("could not install the core and the test packages", file=sys.stderr)
        return 1
    frozen = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=json"], capture_output=True, text=True, check=True
    )
    newest = {p["name"].lower(): p["version"] for p in json.loads(frozen.stdout)}
    found = {}
    for name in core_requirements():
        if args.only and name not in args.only:
            continue
        print(f"{name} (newest {newest[name]}):", flush=True)
        found[name] = oldest(python, name, newest[name])
        print(f"{name}=={found[name]}", flush=True)
    print("\n".join(f"{name}=={version}" for name, version in found.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
