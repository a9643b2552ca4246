"""Round two of the self-certification attacks (docs/sandbox.md), replayed through the OpenAI-compatible
double: none is published, each ends with its documented exit code and the repository exactly as
it was — with the guard's rules on, and with them switched off (then the sandbox, the pinned
schema, the varied trial data and publishing from the approved diff decide).

These tests run the sandboxed path: as root with bubblewrap (CI), the code under repair runs in
a PID namespace as ``acklab-sandbox``; `test_the_flow_runs_sandboxed_here` says which mode ran.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest

from acklab.flows import guard
from acklab.flows.worktree import repo_snapshot
from tests.doubles.openai_api import openai_double
from tests.flows import hostile_ground, hostile_two, patches
from tests.flows.conftest import ROOT, fast_spec, load_trail, run_git, write_decisions
from tests.flows.unguarded import no_python_rules

pytestmark = pytest.mark.slow
KEY = "sk-double-0123456789abcdef"
APPROVE = {"gate": "approve", "decision": "approve", "actor": "carol"}


def marker(tmp_path: Path) -> str:
    """Digits unique to this test (a daemon's `sleep 300.<marker>` is found by them)."""
    return str(int(hashlib.sha256(str(tmp_path).encode()).hexdigest()[:12], 16))


@pytest.fixture
def llm_env(monkeypatch):
    def use(script):
        monkeypatch.setenv("ACKLAB_LLM_BASE_URL", script.base_url)
        monkeypatch.setenv("ACKLAB_LLM_MODEL", "double-gpt")
        monkeypatch.setenv("ACKLAB_LLM_API_KEY", KEY)

    return use


def run_flow(acklab, llm_env, repo: Path, tmp_path: Path, diff: str, *, checks=("ruff",), more=()):
    reply = patches.reply(diff)
    with openai_double([reply, reply], api_key=KEY) as llm:
        llm_env(llm)
        code, stdout, stderr = acklab(
            repo, "flow", "run", fast_spec(tmp_path, strike_again=(), checks=checks),
            "--proposer", "llm", "--local", "--decisions", write_decisions(tmp_path, [APPROVE]),
            "--out", tmp_path / "out", "--json", *more,
        )  # fmt: skip
    return code, load_trail(stdout), stderr


def unpublished(repo: Path, before: dict[str, str]) -> None:
    assert repo_snapshot(repo) == before
    assert "acklab/repair" not in run_git(repo, "branch", "--list", "--all")


def experiments(trail, checkpoint="verify"):
    cp = next(c for c in trail["checkpoints"] if c["name"] == checkpoint)
    return {e["name"]: e["verdict"] for e in cp["outputs"]["experiments"]}, cp


def violations_of(trail, tmp_path: Path) -> list[dict]:
    """Every violation the verify run's incidents hold."""
    _, cp = experiments(trail)
    found = []
    for entry in cp["outputs"]["experiments"]:
        if entry.get("incident"):
            incident = json.loads((tmp_path / "out" / entry["incident"]).read_text())
            found += [v for t in incident["trials"] for v in t["violations"]]
    return found


# -- the guard's rules on: refused before anyone is asked (exit 5) ------------------------------


def attack_source(name: str, mark: str, tmp_path: Path, repo: Path) -> str:
    return {
        "bypass": lambda: hostile_two.bypass_source(mark),
        "loot": lambda: hostile_two.loot_source(mark, str(tmp_path / "out"), str(repo)),
        "rewrite": lambda: hostile_two.rewrite_source(mark, own_file=True),
        "noqa": lambda: hostile_two.NOQA_SOURCE,
        "homoglyph": lambda: hostile_two.HOMOGLYPH_SOURCE,
    }[name]()


@pytest.mark.parametrize(
    ("name", "rule"),
    [
        ("bypass", "capability rule 'import': from enum import bltns"),
        ("loot", "capability rule 'import': from enum import bltns"),
        ("rewrite", "capability rule 'import': from enum import bltns"),
        # its f-string SQL is refused before ruff runs (test_the_guards_ruff_ignores_a_noqa_comment)
        ("noqa", "capability rule 'dynamic-sql': text() is given SQL built at run time"),
        ("homoglyph", "confusable-identifier"),
    ],
)
def test_the_guard_refuses_each_attack_naming_its_rule(name, rule, sandbox, tmp_path):
    from acklab.flows.spec import load_spec

    before = repo_snapshot(sandbox)
    source = attack_source(name, marker(tmp_path), tmp_path, sandbox)
    spec = load_spec(fast_spec(tmp_path, strike_again=()))
    head = run_git(sandbox, "rev-parse", "HEAD").strip()
    result = guard.check(hostile_two.diff(source), spec=spec, repo=sandbox, commit=head)
    assert not result.allowed
    assert rule in " ".join(result.reasons)
    assert repo_snapshot(sandbox) == before


def test_the_guards_ruff_ignores_a_noqa_comment(sandbox, tmp_path, monkeypatch):
    from acklab.flows import capabilities
    from acklab.flows.spec import load_spec
    from tests.flows.unguarded import no_capability_rule

    monkeypatch.setattr(capabilities, "check", no_capability_rule)
    spec = load_spec(fast_spec(tmp_path, strike_again=()))
    head = run_git(sandbox, "rev-parse", "HEAD").strip()
    result = guard.check(hostile_two.diff(hostile_two.NOQA_SOURCE), spec=spec, repo=sandbox, commit=head)
    assert not result.allowed
    assert any("ruff check is not clean" in r and "S608" in r for r in result.reasons), result.reasons


def test_a_flow_refuses_a_guarded_attack_before_anyone_is_asked(sandbox, tmp_path, acklab, llm_env):
    # The flow end to end for one of them (the guard's verdict for each is the test above).
    before = repo_snapshot(sandbox)
    source = attack_source("loot", marker(tmp_path), tmp_path, sandbox)
    code, trail, stderr = run_flow(acklab, llm_env, sandbox, tmp_path, hostile_two.diff(source))
    assert code == 5, stderr
    assert trail["outcome"] == "refused"
    reasons = " ".join(trail["proposals"][0]["guard"]["reasons"])
    assert "capability rule 'import': from enum import bltns" in reasons
    unpublished(sandbox, before)


# -- the guard's rules off: the sandbox, the pin, the data and the publish decide -------------


@pytest.fixture
def unguarded(monkeypatch):
    monkeypatch.setattr(guard, "_python_rules", no_python_rules)


def test_a_renamed_table_behind_a_view_fails_schema_unchanged(unguarded, sandbox, tmp_path, acklab, llm_env):
    before = repo_snapshot(sandbox)
    code, trail, stderr = run_flow(
        acklab, llm_env, sandbox, tmp_path, hostile_two.diff(hostile_two.VIEW_SOURCE)
    )
    assert code == 1, stderr
    assert trail["outcome"] == "failed"
    assert experiments(trail)[0] == {"lost-ack": "fail"}
    changed = [v for v in violations_of(trail, tmp_path) if v["invariant"] == "schema-unchanged"]
    assert changed, violations_of(trail, tmp_path)
    assert "view fulfillments: new" in changed[0]["observed"]
    assert "table fulfillment_log: new" in changed[0]["observed"]
    unpublished(sandbox, before)


def test_a_trigger_that_hides_duplicates_fails_schema_unchanged(
    unguarded, sandbox, tmp_path, acklab, llm_env
):
    before = repo_snapshot(sandbox)
    code, trail, stderr = run_flow(
        acklab, llm_env, sandbox, tmp_path, hostile_two.diff(hostile_two.TRIGGER_SOURCE)
    )
    assert code == 1, stderr
    changed = [v for v in violations_of(trail, tmp_path) if v["invariant"] == "schema-unchanged"]
    assert changed
    assert "trigger fulfillments_once: new" in changed[0]["observed"]
    unpublished(sandbox, before)


def test_an_index_that_misses_rows_fails_schema_unchanged(unguarded, sandbox, tmp_path, acklab, llm_env):
    # writable_schema: sqlite_master reads as pinned, the index the count went through misses
    # every duplicate. With the guard's rules off, the count's integrity check decides.
    before = repo_snapshot(sandbox)
    code, trail, stderr = run_flow(
        acklab, llm_env, sandbox, tmp_path, hostile_two.diff(hostile_ground.INDEX_SOURCE)
    )
    assert code == 1, stderr
    assert experiments(trail)[0] == {"lost-ack": "fail"}
    changed = [v for v in violations_of(trail, tmp_path) if v["invariant"] == "schema-unchanged"]
    assert changed, violations_of(trail, tmp_path)
    assert "missing from index ix_fulfillments_order_id" in changed[0]["observed"]
    unpublished(sandbox, before)


def _processes_with(needle: bytes) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if needle in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
            except OSError:
                continue
    return found


def test_an_escape_through_bltns_and_inspect_stays_in_the_sandbox(
    unguarded, sandbox, tmp_path, acklab, llm_env
):
    mark = marker(tmp_path)
    before = repo_snapshot(sandbox)
    pth = Path(sysconfig.get_paths()["purelib"]) / f"acklab_pwned_{mark}.pth"
    code, trail, stderr = run_flow(
        acklab, llm_env, sandbox, tmp_path, hostile_two.diff(hostile_two.bypass_source(mark)),
        checks=("pytest-handler",),
    )  # fmt: skip
    assert code == 1, stderr  # the unsafe logic is still there: lost-ack fails
    assert experiments(trail)[0] == {"lost-ack": "fail"}
    # Nothing it wrote outside its copy is left on the lab's machine; the .pth never landed.
    assert not pth.exists()
    assert not Path(f"/tmp/acklab-pwned-{mark}").exists()
    assert not Path(f"/tmp/acklab-pth-ran-{mark}").exists()
    # The daemon it forked (setsid, then exec sleep 300.<mark>) died with the sandbox's PID namespace.
    assert _processes_with(f"300.{mark}".encode()) == []
    unpublished(sandbox, before)


def test_a_homoglyph_repair_beside_the_unsafe_handler_fails_verify(
    unguarded, sandbox, tmp_path, acklab, llm_env
):
    before = repo_snapshot(sandbox)
    code, trail, stderr = run_flow(
        acklab, llm_env, sandbox, tmp_path, hostile_two.diff(hostile_two.HOMOGLYPH_SOURCE)
    )
    assert code == 1, stderr
    assert experiments(trail)[0] == {"lost-ack": "fail"}
    unpublished(sandbox, before)


def test_a_noqa_comment_does_not_silence_verifys_ruff(unguarded, sandbox, tmp_path, acklab, llm_env):
    before = repo_snapshot(sandbox)
    code, trail, stderr = run_flow(
        acklab, llm_env, sandbox, tmp_path, hostile_two.diff(hostile_two.NOQA_SOURCE)
    )
    assert code == 1, stderr
    _, verify = experiments(trail)
    [ruff] = [c for c in verify["outputs"]["checks"] if c["name"] == "ruff"]
    assert ruff["status"] == "failed"
    assert (
        "--ignore-noqa" in ruff["argv"]
        or "S608" in (tmp_path / "out").joinpath(Path(trail["run_id"]), ruff["log"]).read_text()
    )
    unpublished(sandbox, before)


def test_a_repair_for_eur_1200_only_fails_on_what_the_lab_sends(sandbox, tmp_path, acklab, llm_env):
    before = repo_snapshot(sandbox)
    code, trail, stderr = run_flow(
        acklab, llm_env, sandbox, tmp_path, hostile_two.diff(hostile_two.CURRENCY_SOURCE),
        checks=("pytest-handler",),
    )  # fmt: skip
    assert trail["proposals"][0]["guard"]["allowed"]  # no rule refuses it: the data decides
    assert code == 1, stderr
    verdicts, verify = experiments(trail)
    assert verdicts == {"lost-ack": "fail"}
    [tests] = [c for c in verify["outputs"]["checks"] if c["name"] == "pytest-handler"]
    assert tests["status"] == "failed"  # the fixture's own tests draw from the same generator
    unpublished(sandbox, before)


def test_a_patch_that_rewrites_itself_while_served_is_refused(unguarded, sandbox, tmp_path, acklab, llm_env):
    before = repo_snapshot(sandbox)
    source = hostile_two.rewrite_source(marker(tmp_path), own_file=True)
    code, trail, stderr = run_flow(acklab, llm_env, sandbox, tmp_path, hostile_two.diff(source))
    assert code == 5, stderr
    assert trail["outcome"] == "refused"
    assert "rewrote its own files" in trail["outcome_detail"]
    unpublished(sandbox, before)


def test_unsandboxed_a_verified_worktree_that_changed_is_not_published(
    unguarded, sandbox, tmp_path, acklab, llm_env, monkeypatch
):
    # Without the sandbox the served code can reach the flow's own worktree (shared /tmp, same
    # user): publishing compares it with the approved diff applied anew, and refuses.
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private_tmp))
    source = hostile_two.rewrite_source(marker(tmp_path), own_file=False, pattern=str(private_tmp))
    before = repo_snapshot(sandbox)
    code, trail, stderr = run_flow(
        acklab, llm_env, sandbox, tmp_path, hostile_two.diff(source), more=("--unsandboxed",)
    )
    assert code == 5, stderr
    assert trail["sandbox"]["mode"] == "none"
    assert "not what the approved diff makes" in trail["outcome_detail"]
    unpublished(sandbox, before)


# -- secrets: canaries in the lab's environment, grepped wherever the patch could write ---------


def canaries(mark: str) -> dict[str, str]:
    """The lab's secrets for one test: made here, so no file of the project (copied into the
    scratch repository) can hold them."""
    return {
        "GITLAB_TOKEN": f"glpat-canary-{mark}",
        "CI_JOB_TOKEN": f"canary-job-{mark}",
        "ACKLAB_MANIFEST_KEY": f"canary-manifest-{mark}",
    }


def test_no_secret_reaches_what_the_patch_can_read(sandbox, tmp_path):
    mark = marker(tmp_path)
    key = f"sk-canary-{mark}"
    CANARIES = canaries(mark)
    out = tmp_path / "out"
    source = hostile_two.loot_source(mark, str(out), str(sandbox))
    reply = patches.reply(hostile_two.diff(source))
    with openai_double([reply, reply], api_key=key) as llm:
        env = {**os.environ, **CANARIES, "ACKLAB_LLM_API_KEY": key}
        env.update(ACKLAB_LLM_BASE_URL=llm.base_url, ACKLAB_LLM_MODEL="double-gpt")
        launcher = f"import sys; sys.path.insert(0, {str(ROOT)!r}); from tests.flows.unguarded import main_without_rules; main_without_rules()"
        argv = [sys.executable, "-I", "-c", launcher, "flow", "run"]
        argv += [str(fast_spec(tmp_path, strike_again=(), checks=("pytest-handler",)))]
        argv += ["--proposer", "llm", "--local", "--decisions", str(write_decisions(tmp_path, [APPROVE]))]
        argv += ["--out", str(out), "--json"]
        done = subprocess.run(
            argv, cwd=sandbox, env=env, capture_output=True, text=True, timeout=600, check=False
        )
    assert done.returncode == 1, done.stderr[-3000:]
    written = [
        p
        for p in [*out.rglob("*"), *sandbox.rglob("*"), *Path("/tmp").glob(f"acklab-loot-{mark}*")]
        if p.is_file()
    ]
    blob = b"".join(p.read_bytes() for p in written) + (done.stdout + done.stderr).encode()
    # The patch ran (its loot, printed, is in the check's log) and found no secret anywhere.
    assert f"acklab-loot-{mark}".encode() in blob
    for name, value in {**CANARIES, "ACKLAB_LLM_API_KEY": key}.items():
        assert value.encode() not in blob, f"{name} reached something the patch wrote"
    assert not list(Path("/tmp").glob(f"acklab-loot-{mark}*"))  # /tmp of the sandbox is its own


# -- the recipe still publishes, exactly the approved diff, from the sandbox ---------------------


def test_the_recipe_publishes_exactly_the_approved_diff(sandbox, tmp_path, acklab):
    code, stdout, stderr = acklab(
        sandbox, "flow", "run", fast_spec(tmp_path, strike_again=()), "--local", "--auto-approve",
        "--out", tmp_path / "out", "--json",
    )  # fmt: skip
    assert code == 0, stderr
    result = json.loads(stdout)
    trail = load_trail(stdout)
    published = result["published"]
    diff = (
        tmp_path / "out" / trail["run_id"] / "proposals" / f"{trail['proposals'][0]['id']}.diff"
    ).read_text()
    # The approved diff applied anew at the head, in a clone of the repository, gives those bytes.
    clone = tmp_path / "clone"
    run_git(tmp_path, "clone", "--quiet", str(sandbox), str(clone))
    run_git(clone, "apply", "-", input_text=diff)
    expected = hashlib.sha256((clone / "app" / "webhooks.py").read_bytes()).hexdigest()
    assert published["sha256"] == {"app/webhooks.py": expected}
    committed = run_git(sandbox, "show", f"{published['commit']}:app/webhooks.py").encode()
    assert hashlib.sha256(committed).hexdigest() == expected
    assert trail["sandbox"]["mode"] in ("bubblewrap+user", "bubblewrap", "user")


def test_the_flow_runs_sandboxed_here():
    from acklab.flows.sandbox import choose

    mode = choose().name
    if os.geteuid() == 0:  # CI: root, with bubblewrap from scripts/ensure-system-deps.sh
        assert mode == "bubblewrap+user"
    else:
        assert mode == "bubblewrap"
