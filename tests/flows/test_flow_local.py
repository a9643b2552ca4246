"""The whole loop on a sandbox, through the real `acklab flow run`, publishing to a local branch."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from acklab.evidence.bundle import verify as verify_bundle
from acklab.evidence.journal import Journal
from acklab.flows.lab import run_lab
from acklab.flows.sandbox import choose
from acklab.flows.worktree import repo_snapshot, worktree
from tests.flows.conftest import LIVE, checkout_modules, fast_spec, load_trail, run_git, write_decisions

pytestmark = pytest.mark.slow
APPROVE = {
    "gate": "approve",
    "decision": "approve",
    "actor": "release-bot",
    "delegated_by": "alice",
    "reason": "recipe repairs are delegated",
}


def test_a_recipe_repair_with_a_delegated_approval_lands_on_a_new_local_branch(
    sandbox, tmp_path, acklab, capsys
):
    before = repo_snapshot(sandbox)
    head = before["head"].strip()
    decisions = write_decisions(tmp_path, [APPROVE])
    out = tmp_path / "out"
    code, stdout, _ = acklab(
        sandbox,
        "flow",
        "run",
        fast_spec(tmp_path),
        "--local",
        "--decisions",
        decisions,
        "--out",
        out,
        "--json",
    )
    assert code == 0, stdout
    result = json.loads(stdout)
    assert result["outcome"] == "published"
    branch = result["published"]["branch"]
    assert branch == f"acklab/repair-{result['run_id']}"

    # the checkout is exactly as it was, plus one branch
    after = repo_snapshot(sandbox)
    assert {k: v for k, v in after.items() if k != "refs"} == {k: v for k, v in before.items() if k != "refs"}
    assert set(after["refs"].splitlines()) - set(before["refs"].splitlines()) == {
        f"refs/heads/{branch} {result['published']['commit']}"
    }
    # the commit changes app/webhooks.py only, into the receipt handler, on top of the expected head
    assert run_git(sandbox, "diff", "--name-only", head, branch).split() == ["app/webhooks.py"]
    assert run_git(sandbox, "show", f"{branch}:app/webhooks.py") == LIVE
    assert run_git(sandbox, "rev-parse", f"{branch}^").strip() == head

    trail = load_trail(stdout)
    names = [c["name"] for c in trail["checkpoints"]]
    assert names == ["reproduce", "propose", "approve", "apply", "verify", "strike-again", "publish"]
    assert all(c["status"] == "ok" for c in trail["checkpoints"])
    assert all(c["ended_at"] and c["duration_ms"] is not None for c in trail["checkpoints"])
    assert trail["expected_head_sha"] == head
    assert (trail["outcome"], trail["exit_code"]) == ("published", 0)
    by_name = {c["name"]: c for c in trail["checkpoints"]}
    decision = by_name["approve"]["decision"]
    assert (decision["actor"], decision["delegated_by"], decision["source"]) == (
        "release-bot",
        "alice",
        "file",
    )
    [proposal] = trail["proposals"]
    assert (proposal["proposer"], proposal["recipe"], proposal["llm_calls"]) == (
        "recipe",
        "receipt-handler",
        [],
    )
    assert proposal["guard"]["allowed"]
    # the lab attacked the head and the patched copy in their own worktrees, never the install,
    # each served by a process of its own: this process (the lab's) never imported either
    for name in ("reproduce", "verify"):
        module = by_name[name]["outputs"]["handler_module"]
        assert "/acklab-" in module
        assert module.endswith("/checkout/app/webhooks.py")
    assert checkout_modules(sandbox) == []
    assert by_name["reproduce"]["outputs"]["failing"] == ["lost-ack"]
    assert [e["verdict"] for e in by_name["verify"]["outputs"]["experiments"]] == ["pass"]
    assert [c["status"] for c in by_name["verify"]["outputs"]["checks"]] == ["ok", "ok"]
    [held] = by_name["strike-again"]["outputs"]["experiments"]
    assert (held["experiment"], held["status"], held["before"], held["after"]) == (
        "conflicting-payload",
        "held",
        "fail",
        "pass",
    )
    assert held["latency_before"]["p95_ms"] > 0
    assert held["latency_after"]["p95_ms"] > 0
    assert by_name["approve"]["input_hashes"]["diff"] == proposal["diff_sha256"]

    bundle = Path(result["bundle"])
    assert verify_bundle(bundle).ok
    assert json.loads((bundle / "manifest.json").read_text())["kind"] == "flow"
    with Journal(out / "journal.sqlite") as journal:
        rows = journal.history(result["run_id"])
    kinds = {(r.kind, r.name, r.status) for r in rows}
    assert ("checkpoint", "publish", "ok") in kinds
    assert ("decision", "approve", "approve") in kinds
    assert ("run", "repair-webhook-handler", "published") in kinds

    # the demo's before/after table reads the same trail
    from acklab.flows.demo import show_before_after

    show_before_after(bundle / "trail.json")
    table = capsys.readouterr().err
    assert re.search(r"lost-ack\s+fail\s+pass\s+p50", table)
    assert re.search(r"conflicting-payload\s+fail\s+pass\s+p50", table)

    # the harness passes on the new branch
    with worktree(sandbox, branch) as patched:
        run = run_lab(
            patched.path,
            target="fixture:live",
            experiments=["lost-ack", "conflicting-payload"],
            trials=1,
            seed=3,
            out=out,
            sandbox=choose(),
        )
    assert run.verdict == "pass"


def test_nothing_to_repair_stops_after_reproduce(sandbox, tmp_path, acklab):
    (sandbox / "app/webhooks.py").write_text(LIVE)
    run_git(sandbox, "commit", "--quiet", "-am", "the safe handler")
    code, stdout, _ = acklab(
        sandbox, "flow", "run", fast_spec(tmp_path), "--local", "--out", tmp_path / "out", "--json"
    )
    assert code == 0
    trail = load_trail(stdout)
    assert trail["outcome"] == "not-needed"
    assert "nothing to repair" in trail["outcome_detail"]
    assert [(c["name"], c["status"]) for c in trail["checkpoints"]] == [
        ("reproduce", "ok"),
        *[(n, "skipped") for n in ["propose", "approve", "apply", "verify", "strike-again", "publish"]],
    ]
    assert "acklab/repair" not in run_git(sandbox, "branch", "--list")


def test_no_decision_no_progress(sandbox, tmp_path, acklab):
    before = repo_snapshot(sandbox)
    code, stdout, _ = acklab(
        sandbox, "flow", "run", fast_spec(tmp_path), "--local", "--out", tmp_path / "out", "--json"
    )
    assert code == 5
    trail = load_trail(stdout)
    assert trail["outcome"] == "refused"
    assert "pass --decisions FILE, or --auto-approve, or run on a terminal" in trail["outcome_detail"]
    assert [(c["name"], c["status"]) for c in trail["checkpoints"]][-1] == ("approve", "refused")
    assert repo_snapshot(sandbox) == before


def test_a_rejection_stops_the_flow(sandbox, tmp_path, acklab):
    before = repo_snapshot(sandbox)
    decisions = write_decisions(
        tmp_path, [{"gate": "approve", "decision": "reject", "actor": "bob", "reason": "not today"}]
    )
    code, stdout, _ = acklab(
        sandbox,
        "flow",
        "run",
        fast_spec(tmp_path),
        "--local",
        "--decisions",
        decisions,
        "--out",
        tmp_path / "out",
        "--json",
    )
    assert code == 5
    trail = load_trail(stdout)
    assert trail["outcome"] == "rejected"
    assert "bob rejected p1 at the approve gate: not today" in trail["outcome_detail"]
    assert trail["checkpoints"][-1]["decision"]["decision"] == "reject"
    assert repo_snapshot(sandbox) == before


def test_propose_only_prints_the_proposal_and_changes_nothing(sandbox, tmp_path, acklab):
    before = repo_snapshot(sandbox)
    code, stdout, _ = acklab(
        sandbox, "flow", "run", fast_spec(tmp_path), "--propose-only", "--out", tmp_path / "out"
    )
    assert code == 0
    assert "proposed" in stdout
    assert "+++ b/app/webhooks.py" in stdout
    assert repo_snapshot(sandbox) == before
