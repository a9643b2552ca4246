"""Fixtures of the repair flow's tests: small git repositories, the project's own handlers."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UNSAFE = (ROOT / "app" / "unsafe.py").read_text(encoding="utf-8")
LIVE = (ROOT / "app" / "webhooks.py").read_text(encoding="utf-8")
IDENTITY = {
    "GIT_AUTHOR_NAME": "test",
    "GIT_AUTHOR_EMAIL": "test@localhost",
    "GIT_COMMITTER_NAME": "test",
    "GIT_COMMITTER_EMAIL": "test@localhost",
}


def run_git(repo: Path, *args: str, input_text: str | None = None) -> str:
    import os

    done = subprocess.run(
        ["git", "-C", str(repo), *args],
        input=input_text,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **IDENTITY},
    )
    return done.stdout


def make_repo(root: Path, files: dict[str, str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    run_git(root, "init", "--quiet", "--initial-branch=main")
    run_git(root, "add", "--all")
    run_git(root, "commit", "--quiet", "-m", "initial")
    return root


@pytest.fixture
def small_repo(tmp_path: Path) -> Path:
    """A tiny repository shaped like the project: the unsafe handler is live."""
    return make_repo(
        tmp_path / "repo",
        {
            "app/__init__.py": "",
            "app/webhooks.py": UNSAFE,
            "tests/test_app.py": "def test_ok():\n    assert True\n",
            ".gitlab-ci.yml": "test:\n  script: [make test]\n",
            "pyproject.toml": "[tool.ruff]\nline-length = 110\n",
            "README.md": "hello\n",
        },
    )
