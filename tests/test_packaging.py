"""One import name (ARCHITECTURE.md, "Layers"): the wheel installs `acklab` and nothing beside it.

The folders stay at the repository's top level; pyproject's package-dir maps them beneath
`acklab`. These tests build the real wheel and install it next to a user's package that
ships its own `app/` and `console/`, as a service repository would.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"app": "acklab.app", "harness": "acklab.harness", "evidence": "acklab.evidence"}
FOLDERS |= {"console": "acklab.console", "flows": "acklab.flows", "acklab": "acklab"}


def _declared() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def _tracked_folders(folder: str) -> set[Path]:
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "--", folder], check=True, capture_output=True
    ).stdout.decode()
    return {(ROOT / rel).parent for rel in filter(None, listed.split("\0"))}


def test_every_package_folder_is_declared_under_acklab():
    """Code folders and data folders alike: setuptools counts a folder of data files inside a
    package as a package, and warns at every install about one the list leaves out."""
    declared = _declared()
    found, data = set(), set()
    for folder, name in FOLDERS.items():
        for where in _tracked_folders(folder):
            package = ".".join([name, *where.relative_to(ROOT / folder).parts])
            found.add(package)
            if not (where / "__init__.py").is_file():
                data.add(package)
    assert set(declared["packages"]) == found
    assert data, "the data folders (schemas, templates...) are among the packages"
    assert data <= set(declared["package-data"]), "a data folder with no files declared is left out"
    assert declared["package-dir"] == {v: k for k, v in FOLDERS.items()}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # Built from a copy of the checkout's files (tracked and new, not ignored): setuptools
    # writes build/ and *.egg-info beside the sources, and the checkout must stay clean.
    source = tmp_path_factory.mktemp("source")
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        check=True,
        capture_output=True,
    ).stdout.decode()
    for rel in filter(None, listed.split("\0")):
        if (ROOT / rel).is_file():
            (source / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, source / rel)
    pip_wheel = ["pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), str(source)]
    subprocess.run(
        [sys.executable, "-m", *pip_wheel],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (built,) = out.glob("acklab-*.whl")
    return built


@pytest.mark.slow
def test_the_wheel_has_one_top_level_name_and_its_data(wheel: Path):
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (top_level,) = [n for n in names if n.endswith(".dist-info/top_level.txt")]
        assert archive.read(top_level).decode().split() == ["acklab"]
        assert {n.split("/")[0] for n in names if ".dist-info/" not in n} == {"acklab"}
    for needed in (
        "acklab/py.typed",
        "acklab/app/webhooks.py",
        "acklab/harness/experiments/__init__.py",
        "acklab/evidence/schemas/run.schema.json",
        "acklab/evidence/schemas/vendor/SOURCES.md",
        "acklab/console/templates/base.html",
        "acklab/console/static/console.css",
        "acklab/flows/repair.yaml",
        "acklab/flows/recipes/receipt_handler.py.txt",
        "acklab/pytest_plugin.py",
        "acklab/harness/init/payloads/stripe.payment_intent.succeeded.json",
        "acklab/harness/wire/providers/stripe.py",
        "acklab/evidence/extras.py",
    ):
        assert needed in names, needed
    # pytest finds the plugin (the webhook_lab fixture) through the wheel's entry point.
    with zipfile.ZipFile(wheel) as archive:
        (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        assert "[pytest11]\nacklab = acklab.pytest_plugin" in archive.read(entry_points).decode()


USER_FILES = {
    "pyproject.toml": (
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n\n'
        '[project]\nname = "shop-service"\nversion = "1.0"\n\n'
        '[tool.setuptools]\npackages = ["app", "console"]\n'
    ),
    "app/__init__.py": "SHOP = 'the shop service'\n",
    "app/main.py": "def main() -> str:\n    return 'shop'\n",
    "console/__init__.py": "CONSOLE = 'the shop console'\n",
}


@pytest.mark.slow
def test_installed_beside_a_service_with_its_own_app_nothing_of_theirs_changes(wheel: Path, tmp_path: Path):
    service = tmp_path / "shop"
    for rel, text in USER_FILES.items():
        (service / rel).parent.mkdir(parents=True, exist_ok=True)
        (service / rel).write_text(text)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    # acklab's dependencies come from this interpreter's environment (no download); a path
    # line in a .pth file adds the folder without running the .pth files inside it, so the
    # development checkout's editable finder stays out of the fresh environment.
    Path(site, "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    pip = [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation"]
    # Nothing of the caller's PYTHONPATH: a checkout on it (with its acklab.egg-info) would tell
    # pip that acklab is installed already, and pip would install no `acklab` command.
    clean = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"}}
    subprocess.run([*pip, str(service)], check=True, timeout=300, capture_output=True, env=clean)
    subprocess.run([*pip, str(wheel)], check=True, timeout=300, capture_output=True, env=clean)
    installed = {rel: (Path(site) / rel).read_text() for rel in USER_FILES if rel != "pyproject.toml"}
    assert installed == {rel: text for rel, text in USER_FILES.items() if rel != "pyproject.toml"}

    env = {k: v for k, v in os.environ.items() if k not in {"VIRTUAL_ENV", "PYTHONHOME"}}
    env["PYTHONPATH"] = "."  # as CI jobs often do: the service's own checkout first on sys.path
    argv = ["run", "--target", "fixture:live", "--experiment", "lost-ack", "--trials", "1", "--json"]
    done = subprocess.run(
        [str(venv / "bin" / "acklab"), *argv, "--out", str(tmp_path / "out")],
        cwd=service,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    probe = "import app, console, acklab.app.webhooks as w; print(app.SHOP, console.CONSOLE, w.__file__)"
    seen = subprocess.run(
        [str(python), "-c", probe], cwd=service, env=env, capture_output=True, text=True, check=True
    ).stdout
    assert seen.startswith("the shop service the shop console ")
    assert Path(seen.split()[-1]).is_relative_to(site)

    # The sandbox copies acklab's source checkout; an installed wheel has none and says so.
    sandbox = tmp_path / "sandbox"
    refused = subprocess.run(
        [str(venv / "bin" / "acklab"), "flow", "sandbox", str(sandbox)],
        cwd=service,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert refused.returncode == 4, refused.stderr[-2000:]
    assert "runs from an installed package" in refused.stderr
    assert "Clone the acklab repository" in refused.stderr
    assert not sandbox.exists()

    uninstall = [str(python), "-m", "pip", "uninstall", "-q", "-y", "acklab"]
    subprocess.run(uninstall, check=True, timeout=120, env=clean)
    assert not (Path(site) / "acklab").exists()
    assert {rel: (Path(site) / rel).read_text() for rel in installed} == installed
