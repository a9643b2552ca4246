"""A tool the flow needs and cannot find is named before anything is reproduced or proposed.

The interpreters are real: the lab's own (with ruff, pytest, bandit), and the system's
``/usr/bin/python3`` (with none of them), as a CI image without the project's dev tools has it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from acklab.flows import guard, tools
from acklab.flows.diffs import make_diff
from acklab.flows.errors import FlowError
from acklab.flows.spec import load_spec
from acklab.flows.worktree import head_sha, repo_snapshot
from tests.doubles.openai_api import openai_double
from tests.flows import patches
from tests.flows.conftest import LIVE, ROOT, UNSAFE, fast_spec, load_trail, use_model

SPEC = load_spec(ROOT / "flows" / "repair.yaml")


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An interpreter with no ruff, no pytest, no bandit: a virtualenv of this Python without pip."""
    where = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True, timeout=120)
    python = where / "bin" / "python"
    assert tools.missing_modules(str(python), ["ruff"]) == {"ruff"}
    return python


def test_the_labs_interpreter_has_every_tool_the_projects_flow_runs():
    assert tools.missing(SPEC) == []


def test_an_interpreter_without_the_tools_is_told_what_to_install(bare):
    found = tools.missing(SPEC, python=str(bare))
    guard_line, *verify = found
    assert "the scope guard runs 'python -m ruff'" in guard_line
    assert f"not installed for the lab's interpreter ({bare})" in guard_line
    assert "pip install ruff" in guard_line
    assert sorted(v.split("'")[1] for v in verify) == ["bandit", "pytest", "ruff"]
    assert all("flows/repair.yaml" in v for v in verify)
    # Without verify (--propose-only) only what the guard runs counts.
    assert tools.missing(SPEC, python=str(bare), verifying=False) == [guard_line]


def test_the_guard_says_ruff_could_not_run_instead_of_an_empty_refusal(small_repo, monkeypatch, bare):
    monkeypatch.setattr(sys, "executable", str(bare))
    with pytest.raises(
        FlowError, match=r"ruff could not run on app/webhooks\.py \(exit 1\): .*No module named ruff"
    ):
        guard.check(
            make_diff("app/webhooks.py", UNSAFE, LIVE),
            spec=SPEC,
            repo=small_repo,
            commit=head_sha(small_repo),
        )


@pytest.mark.slow
def test_a_verify_tool_missing_ends_the_flow_before_the_model_is_asked(
    sandbox, tmp_path, acklab, monkeypatch
):
    doc = yaml.safe_load(fast_spec(tmp_path, strike_again=()).read_text())
    doc["verify"]["commands"].append({"name": "lint", "argv": ["python", "-m", "pylint", "app/webhooks.py"]})
    doc["verify"]["commands"].append({"name": "types", "argv": ["pyright-not-installed", "app/webhooks.py"]})
    spec = tmp_path / "tools.yaml"
    spec.write_text(yaml.safe_dump(doc))
    assert shutil.which("pyright-not-installed") is None
    before = repo_snapshot(sandbox)
    with openai_double([patches.reply(patches.GOOD)], api_key="sk-double-tools") as llm:
        use_model(monkeypatch, llm, "sk-double-tools")
        code, out, err = acklab(
            sandbox, "flow", "run", spec, "--proposer", "llm", "--local", "--auto-approve",
            "--out", tmp_path / "out", "--json",
        )  # fmt: skip
        calls = llm.calls
    assert code == 4, err
    assert calls == 0  # no model call was spent
    trail = load_trail(out)
    assert trail["outcome"] == "error"
    assert (
        "verify command 'lint' runs 'python -m pylint', and pylint is not installed"
        in trail["outcome_detail"]
    )
    assert (
        "verify command 'types' runs 'pyright-not-installed', which is not on PATH" in trail["outcome_detail"]
    )
    assert [c["name"] for c in trail["checkpoints"]] == []  # nothing was reproduced
    assert repo_snapshot(sandbox) == before
