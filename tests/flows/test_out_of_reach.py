"""A self-certifying patch, fed through the OpenAI-compatible double, is never published.

The patches (`tests.flows.hostile`) keep the sandbox's unsafe logic and add import-time code
that silences the lab's verdicts through ``sys.modules``, or exits 0 under pytest, or both
behind escape sequences. The scope guard's capability rule refuses each (exit 5). With that
rule switched off, each still fails verify (exit 1): the lab that judges never imports the
patched code, and pytest is judged by its report. Either way the repository, its branches
and the merge request stay exactly as they were.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from acklab.flows import capabilities
from acklab.flows.worktree import repo_snapshot
from acklab.harness.core.verdicts import Judgement
from tests.doubles.openai_api import openai_double
from tests.flows import hostile, patches
from tests.flows.conftest import ROOT, checkout_modules, fast_spec, load_trail, run_git, write_decisions
from tests.flows.unguarded import no_capability_rule

pytestmark = pytest.mark.slow
KEY = "sk-double-0123456789abcdef"
APPROVE = {"gate": "approve", "decision": "approve", "actor": "carol"}
RATIONALE = "Formatting only.\x1b[2J\x1b[H Nothing to see: \u202eesrever"


@pytest.fixture
def llm_env(monkeypatch):
    def use(script, model="double-gpt"):
        monkeypatch.setenv("ACKLAB_LLM_BASE_URL", script.base_url)
        monkeypatch.setenv("ACKLAB_LLM_MODEL", model)
        monkeypatch.setenv("ACKLAB_LLM_API_KEY", KEY)

    return use


def no_branch(repo: Path) -> None:
    assert "acklab/repair" not in run_git(repo, "branch", "--list", "--all")


@pytest.mark.parametrize("name", hostile.PATCHES)
def test_the_scope_guard_refuses_a_self_certifying_patch(name, sandbox, tmp_path, acklab, llm_env):
    before = repo_snapshot(sandbox)
    reply = patches.reply(hostile.PATCHES[name], prose=RATIONALE)
    with openai_double([reply, reply], api_key=KEY) as llm:
        llm_env(llm)
        code, stdout, stderr = acklab(
            sandbox, "flow", "run", fast_spec(tmp_path, strike_again=(), checks=("ruff",)),
            "--proposer", "llm", "--local", "--decisions", write_decisions(tmp_path, [APPROVE]),
            "--out", tmp_path / "out", "--json",
        )  # fmt: skip
        retry_prompt = llm.prompt(1)
    assert code == 5, stderr
    trail = load_trail(stdout)
    assert trail["outcome"] == "refused"
    reasons = trail["proposals"][0]["guard"]["reasons"]
    assert any(
        re.search(r"app/webhooks\.py line \d+: capability rule 'machinery-module': sys", r) for r in reasons
    )
    assert any("capability rule" in r for r in reasons)
    assert all(r in retry_prompt for r in reasons)  # the one retry carries the reasons
    assert "\x1b" not in stderr + stdout + retry_prompt
    assert repo_snapshot(sandbox) == before
    no_branch(sandbox)


@pytest.mark.parametrize(
    ("name", "checks"),
    [
        ("verdicts-through-sys-modules", ("ruff",)),
        ("exit-0-under-pytest", ("ruff", "pytest-handler")),
    ],
)
def test_without_the_capability_rule_verify_still_fails(
    name, checks, sandbox, tmp_path, acklab, llm_env, monkeypatch
):
    monkeypatch.setattr(capabilities, "check", no_capability_rule)
    violate = Judgement.violate
    before = repo_snapshot(sandbox)
    with openai_double([patches.reply(hostile.PATCHES[name])], api_key=KEY) as llm:
        llm_env(llm)
        code, stdout, stderr = acklab(
            sandbox, "flow", "run", fast_spec(tmp_path, strike_again=(), checks=checks),
            "--proposer", "llm", "--local", "--decisions", write_decisions(tmp_path, [APPROVE]),
            "--out", tmp_path / "out", "--json",
        )  # fmt: skip
    assert code == 1, stderr
    trail = load_trail(stdout)
    assert trail["proposals"][0]["guard"]["allowed"]  # only the capability rule would have refused it
    assert trail["outcome"] == "failed"
    verify = next(c for c in trail["checkpoints"] if c["name"] == "verify")
    assert [(e["name"], e["verdict"]) for e in verify["outputs"]["experiments"]] == [("lost-ack", "fail")]
    assert "still failing: lost-ack" in verify["error"]
    if "pytest-handler" in checks:
        pytest_check = next(c for c in verify["outputs"]["checks"] if c["name"] == "pytest-handler")
        assert pytest_check["exit_code"] == 0  # what the patch made pytest say
        assert pytest_check["status"] == "failed"  # what its report says
        assert any("failure(s) in the report" in r for r in pytest_check["reasons"])
    # the lab never imported the patched handler, and its verdict code is its own
    assert checkout_modules(sandbox) == []
    assert Judgement.violate is violate
    assert repo_snapshot(sandbox) == before
    no_branch(sandbox)


def test_without_the_capability_rule_nothing_reaches_the_merge_request(
    gitlab_mr, sandbox, tmp_path, acklab, llm_env, monkeypatch
):
    monkeypatch.setattr(capabilities, "check", no_capability_rule)
    for var, value in (
        ("GITLAB_URL", gitlab_mr.url),
        ("GITLAB_TOKEN", gitlab_mr.token),
        ("CI_PROJECT_ID", "42"),
    ):
        monkeypatch.setenv(var, value)
    for var in ("CI_SERVER_URL", "CI_JOB_TOKEN", "CI_JOB_URL", "CI_MERGE_REQUEST_IID"):
        monkeypatch.delenv(var, raising=False)
    checkout = gitlab_mr.clone(tmp_path / "ci-checkout")
    old_head = gitlab_mr.head()
    before = repo_snapshot(checkout)
    with openai_double([patches.reply(hostile.PATCHES["hidden-behind-escapes"])], api_key=KEY) as llm:
        llm_env(llm)
        code, stdout, stderr = acklab(
            checkout, "flow", "run", fast_spec(tmp_path, strike_again=(), checks=("ruff", "pytest-handler")),
            "--proposer", "llm", "--mr", "1", "--decisions", write_decisions(tmp_path, [APPROVE]),
            "--out", tmp_path / "out", "--json",
        )  # fmt: skip
    assert code == 1, stderr
    assert load_trail(stdout)["outcome"] == "failed"
    assert gitlab_mr.head() == old_head
    assert gitlab_mr.mr.notes == []
    assert not [r for r in gitlab_mr.state.requests if r.method != "GET"]
    assert repo_snapshot(checkout) == before
    assert "\x1b" not in stderr


def test_propose_only_shows_the_hidden_line_and_no_raw_escape(
    sandbox, tmp_path, acklab, llm_env, monkeypatch
):
    monkeypatch.setattr(capabilities, "check", no_capability_rule)
    with openai_double(
        [patches.reply(hostile.PATCHES["hidden-behind-escapes"], prose=RATIONALE)], api_key=KEY
    ) as llm:
        llm_env(llm, model="double\x1b]0;owned\x07-gpt")
        code, stdout, stderr = acklab(
            sandbox, "flow", "run", fast_spec(tmp_path, strike_again=(), checks=("ruff",)),
            "--proposer", "llm", "--propose-only", "--out", tmp_path / "out",
        )  # fmt: skip
    assert code == 0, stderr
    for text in (stdout, stderr):
        assert not {"\x1b", "\u202e", "\x07"} & set(text)
    assert re.search(r"^\s*\d+ \| \+    atexit\.register\(os\._exit, 0\)$", stdout, re.MULTILINE), stdout
    assert "\\x1b[6A\\x1b[J+# (formatting only)" in stdout
    assert "WARNING: the diff holds 3 control or invisible character(s)" in stdout
    assert "double\\x1b]0;owned\\x07-gpt answered" in stderr  # the model's name, escaped


def _answer_prompts(master: int, answers: list[bytes], deadline_s: float = 120) -> bytes:
    """Read a pty until the process ends, answering each prompt (output waiting after ': ') in turn."""
    output = b""
    answered = 0
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if not ready:
            continue
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the other side closed: the process ended
            break
        if not chunk:
            break
        output += chunk
        if answered < len(answers) and output.endswith(b": "):
            os.write(master, answers[answered])
            answered += 1
    return output


def test_the_approve_gate_on_a_terminal_shows_the_hidden_line_and_no_raw_escape(sandbox, tmp_path, llm_env):
    reply = patches.reply(hostile.PATCHES["hidden-behind-escapes"], prose=RATIONALE)
    with openai_double([reply], api_key=KEY) as llm:
        llm_env(llm)
        launcher = (
            f"import sys; sys.path.insert(0, {str(ROOT)!r}); from tests.flows.unguarded import main; main()"
        )
        argv = [
            sys.executable,
            "-I",
            "-c",
            launcher,
            "flow",
            "run",
            str(fast_spec(tmp_path, strike_again=())),
        ]
        argv += ["--proposer", "llm", "--local", "--out", str(tmp_path / "out"), "--json"]
        master, slave = pty.openpty()
        with subprocess.Popen(
            argv, cwd=sandbox, stdin=slave, stdout=slave, stderr=slave, env=os.environ.copy()
        ) as proc:
            os.close(slave)
            # decision, actor (default), delegated by (empty), reason
            output = _answer_prompts(master, [b"reject\n", b"\n", b"\n", b"not this one\n"])
            code = proc.wait(60)
        os.close(master)
    text = output.decode("utf-8", "replace")
    assert code == 5, text[-2000:]
    assert b"\x1b" not in output
    assert "\u202e" not in text
    assert "[approve] decision" in text
    assert re.search(r"\d+ \| \+    atexit\.register\(os\._exit, 0\)", text)
    assert "\\x1b[6A\\x1b[J+# (formatting only)" in text
    assert "WARNING: the proposal holds" in text
    assert "why: Formatting only.\\x1b[2J\\x1b[H Nothing to see: \\u202eesrever" in text
    trail = json.loads(next((tmp_path / "out").glob("flow-*/trail.json")).read_text())
    assert trail["outcome"] == "rejected"
    assert "\x1b" not in trail["proposals"][0]["diff"]  # the trail shows it escaped too
    assert "\x1b" in (next((tmp_path / "out").glob("flow-*/proposals/p1.diff"))).read_text()  # the exact diff
