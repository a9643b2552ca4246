"""Fixtures of the repair flow's tests: small git repositories, the project's own handlers."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
            "pyproject.toml": '[tool.ruff]\nline-length = 110\n\n[tool.ruff.lint.isort]\nknown-first-party = ["acklab"]\n',
            "README.md": "hello\n",
        },
    )


@pytest.fixture
def gitlab_mr(tmp_path: Path):
    """A GitLab double with a project backed by a real bare repository (also served over git's
    HTTP, `git_url`) and MR !1; it takes a private, a job and an OAuth token.

    The bare repository holds a sandbox of this project (unsafe handler) on main, and the
    MR's source branch adds one more commit that does not touch app/webhooks.py.
    """
    from acklab.flows.scratch_repo import make_scratch_repo
    from tests.doubles.gitlab import merge_requests
    from tests.doubles.gitlab.fixtures import JOB_TOKEN, OAUTH_TOKEN, PRIVATE_TOKEN
    from tests.doubles.gitlab.server import create_app, serve
    from tests.doubles.gitlab.state import GitLabDouble

    seed = tmp_path / "seed"
    make_scratch_repo(seed)
    run_git(seed, "checkout", "--quiet", "-b", "feature/orders")
    (seed / "README.md").write_text((seed / "README.md").read_text() + "\nOrders ship on payment.\n")
    run_git(seed, "commit", "--quiet", "-am", "Document shipping")
    # Served over git's smart HTTP too (http://HOST/shop/orders.git), as a flow's runner clones it.
    bare = tmp_path / "git" / "shop" / "orders.git"
    bare.parent.mkdir(parents=True)
    run_git(tmp_path, "clone", "--quiet", "--bare", str(seed), str(bare))
    state = GitLabDouble(private_tokens={PRIVATE_TOKEN}, job_tokens={JOB_TOKEN}, oauth_tokens={OAUTH_TOKEN})
    state.git_root = str(tmp_path / "git")
    project = state.add_project("shop/orders", id=42)
    merge_requests.add_repository(project, bare)
    mr = merge_requests.add_merge_request(
        state, project, iid=1, source_branch="feature/orders", title="Ship orders"
    )
    with serve(create_app(state, routers=[merge_requests.router])) as url:
        yield GitLabMR(state=state, url=url, token=PRIVATE_TOKEN, project=project, mr=mr, bare=bare)


@dataclass
class GitLabMR:
    state: object
    url: str
    token: str
    project: object
    mr: object
    bare: Path

    @property
    def git_url(self) -> str:
        return f"{self.url}/shop/orders.git"

    def head(self, branch: str = "feature/orders") -> str:
        return run_git(self.bare, "rev-parse", f"refs/heads/{branch}").strip()

    def clone(self, where: Path, branch: str = "feature/orders") -> Path:
        """A pipeline's checkout of the MR's source branch."""
        run_git(where.parent, "clone", "--quiet", "--branch", branch, str(self.bare), str(where))
        return where

    def push_commit(self, path: str, text: str, message: str, branch: str = "feature/orders") -> str:
        """Someone else pushes to the MR's branch (plumbing straight into the bare repo)."""
        import tempfile

        head = self.head(branch)
        with tempfile.TemporaryDirectory() as tmp:
            env_index = {"GIT_INDEX_FILE": f"{tmp}/index"}
            import os

            def g(*args, input_text=None):
                return subprocess.run(
                    ["git", "--git-dir", str(self.bare), *args],
                    input=input_text,
                    capture_output=True,
                    text=True,
                    check=True,
                    env={**os.environ, **IDENTITY, **env_index},
                ).stdout.strip()

            g("read-tree", head)
            blob = g("hash-object", "-w", "--stdin", input_text=text)
            g("update-index", "--add", "--cacheinfo", f"100644,{blob},{path}")
            commit = g("commit-tree", g("write-tree"), "-p", head, "-m", message)
            g("update-ref", f"refs/heads/{branch}", commit, head)
        return commit


FAST_CHECKS = {
    "ruff": ["python", "-m", "ruff", "check", "--no-cache", "app/webhooks.py"],
    "bandit": ["python", "-m", "bandit", "-q", "app/webhooks.py"],
    "pytest": ["python", "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "tests/app/test_seam.py"],
    # fails on the unsafe handler (an identical retry is fulfilled twice); SQLite only: the
    # PostgreSQL half would start a server inside the sandbox for every check
    "pytest-handler": [
        "python",
        "-m",
        "pytest",
        "-q",
        "-x",
        "-p",
        "no:cacheprovider",
        "-k",
        "not postgresql",
        "tests/app/test_handler.py",
    ],
}


def checkout_modules(*roots: Path) -> list[str]:
    """Modules of this process loaded from a flow worktree (acklab-*/checkout) or from `roots`."""
    found = []
    for name, module in list(sys.modules.items()):
        where = getattr(module, "__file__", None)
        if not where:
            continue
        path = Path(where).resolve()
        in_worktree = any(p.name == "checkout" and p.parent.name.startswith("acklab-") for p in path.parents)
        if in_worktree or any(path.is_relative_to(root.resolve()) for root in roots):
            found.append(name)
    return found


def fast_spec(
    where: Path,
    *,
    reproduce: tuple[str, ...] = ("lost-ack",),
    strike_again: tuple[str, ...] = ("conflicting-payload",),
    checks: tuple[str, ...] = ("ruff", "bandit"),
) -> Path:
    """flows/repair.yaml with one trial and the quickest experiments and checks (kept outside the repo)."""
    import yaml

    doc = yaml.safe_load((ROOT / "flows" / "repair.yaml").read_text())
    doc["experiments"].update(reproduce=list(reproduce), strike_again=list(strike_again), trials=1)
    doc["verify"]["commands"] = [{"name": name, "argv": FAST_CHECKS[name]} for name in checks]
    path = where / "fast-repair.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture(scope="session")
def sandbox_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One sandbox (unsafe handler committed) per test session; tests clone it."""
    from acklab.flows.scratch_repo import make_scratch_repo

    template = tmp_path_factory.mktemp("template") / "sandbox"
    make_scratch_repo(template)
    return template


@pytest.fixture
def sandbox(sandbox_template: Path, tmp_path: Path) -> Path:
    """A fresh clone of the sandbox: a repository whose app/webhooks.py is the unsafe handler."""
    target = tmp_path / "sandbox"
    run_git(tmp_path, "clone", "--quiet", str(sandbox_template), str(target))
    return target


class Acklab:
    """Runs the real `acklab` entry point in-process in a directory; returns (exit code, stdout, stderr)."""

    def __init__(self, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
        self.capsys = capsys
        self.monkeypatch = monkeypatch

    def __call__(self, cwd: Path, *argv: str | Path) -> tuple[int, str, str]:
        from acklab.cli import main

        self.monkeypatch.chdir(cwd)
        self.capsys.readouterr()
        with pytest.raises(SystemExit) as info:
            main([str(a) for a in argv])
        out, err = self.capsys.readouterr()
        return int(info.value.code or 0), out, err


@pytest.fixture
def acklab(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Acklab:
    return Acklab(capsys, monkeypatch)


def write_decisions(where: Path, decisions: Sequence[Mapping[str, object]]) -> Path:
    import json

    path = where / "decisions.json"
    path.write_text(json.dumps(decisions))
    return path


def load_trail(result_json: str) -> dict[str, Any]:
    import json

    return json.loads(Path(json.loads(result_json)["trail"]).read_text())


def use_model(monkeypatch: pytest.MonkeyPatch, script: object, key: str, model: str = "double-gpt") -> None:
    """Point the llm proposer at the OpenAI-compatible double `script`: its base URL, a model, the key."""
    monkeypatch.setenv("ACKLAB_LLM_BASE_URL", script.base_url)  # type: ignore[attr-defined]
    monkeypatch.setenv("ACKLAB_LLM_MODEL", model)
    monkeypatch.setenv("ACKLAB_LLM_API_KEY", key)


def user_repo_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """A user's repository served as its spec says: this interpreter's `python` first on PATH (the spec
    says `python`), and no GitLab or merge-request variable of the machine running the tests."""
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:{Path('/usr/bin')}:{Path('/bin')}")
    for var in ("GITLAB_URL", "GITLAB_TOKEN", "CI_SERVER_URL", "CI_JOB_TOKEN", "CI_MERGE_REQUEST_IID"):
        monkeypatch.delenv(var, raising=False)
