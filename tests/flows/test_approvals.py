"""Approval gates: decisions from a file, --auto-approve, or nowhere (no decision, no progress)."""

from __future__ import annotations

import json

import click
import pytest

from acklab.flows.approvals import AutoApprove, FileDecisions, NoSource, Question, choose_source
from acklab.flows.errors import FlowSpecInvalid, GateRefused, NoDecision

SHA = "a" * 64
Q = Question(gate="approve", proposal_id="p1", proposal_sha256=SHA, summary="a diff")
GAP = Question(gate="approve-gap", proposal_id="p1", proposal_sha256=SHA, summary="a gap")


def write(tmp_path, doc, name="decisions.yaml"):
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def test_file_decisions_are_consumed_in_order_per_gate(tmp_path):
    path = write(
        tmp_path,
        [
            {"gate": "approve", "decision": "modify", "actor": "bob", "feedback": "smaller"},
            {
                "gate": "approve-gap",
                "decision": "approve",
                "actor": "bot",
                "delegated_by": "alice",
                "reason": "known",
            },
            {"gate": "approve", "decision": "approve", "actor": "bob"},
        ],
    )
    source = FileDecisions.load(path)
    first = source.decide(Q)
    assert (first.decision, first.actor, first.source, first.feedback) == ("modify", "bob", "file", "smaller")
    assert "feedback: smaller" in first.as_trail().reason
    gap = source.decide(GAP)
    assert (gap.decision, gap.actor, gap.delegated_by) == ("approve", "bot", "alice")
    assert source.decide(Q).decision == "approve"
    with pytest.raises(NoDecision, match="no \\(further\\) decision for the 'approve' gate"):
        source.decide(Q)


def test_a_decision_bound_to_another_proposal_decides_nothing(tmp_path):
    path = write(
        tmp_path, [{"gate": "approve", "decision": "approve", "actor": "bob", "proposal_sha256": "b" * 64}]
    )
    with pytest.raises(GateRefused, match="bound to proposal sha256 bbbbbbbbbbbb"):
        FileDecisions.load(path).decide(Q)


@pytest.mark.parametrize(
    ("doc", "where"),
    [
        ([{"gate": "approve", "decision": "yes", "actor": "bob"}], "0/decision"),
        ([{"gate": "approve", "decision": "approve"}], "actor"),
        ([{"gate": "merge", "decision": "approve", "actor": "bob"}], "0/gate"),
        ({"gate": "approve"}, "(document)"),
    ],
)
def test_invalid_decision_files_are_refused_with_exit_3(tmp_path, doc, where):
    with pytest.raises(FlowSpecInvalid) as info:
        FileDecisions.load(write(tmp_path, doc, "d.json"))
    assert where in str(info.value)
    assert int(info.value.exit_code) == 3


def test_auto_approve_is_recorded_as_such_and_never_approves_a_gap(monkeypatch):
    monkeypatch.setenv("GITLAB_USER_LOGIN", "carol")
    decision = AutoApprove().decide(Q)
    assert decision.as_trail().dump() | {"decided_at": None} == {
        "decision": "approve",
        "actor": "auto",
        "delegated_by": "carol",
        "source": "auto",
        "reason": "--auto-approve",
        "proposal": "p1",
        "decided_at": None,
    }
    with pytest.raises(NoDecision, match="taken knowing it"):
        AutoApprove().decide(GAP)


def test_no_source_means_no_progress():
    source = choose_source(decisions=None, auto_approve=False, interactive=False)
    assert isinstance(source, NoSource)
    with pytest.raises(NoDecision) as info:
        source.decide(Q)
    assert int(info.value.exit_code) == 5
    assert "--decisions FILE, or --auto-approve, or run on a terminal" in str(info.value)


def test_file_and_auto_exclude_each_other(tmp_path):
    with pytest.raises(click.UsageError):
        choose_source(decisions=tmp_path / "d.yaml", auto_approve=True, interactive=False)


def test_the_terminal_asks_for_decision_actor_delegation_reason_and_feedback():
    from click.testing import CliRunner

    from acklab.flows.approvals import TerminalDecisions

    runner = CliRunner()
    answers = "modify\nbob\nalice\nnot yet\nreject conflicts with 409\n"
    with runner.isolation(input=answers) as (_, err, _output):
        decision = TerminalDecisions().decide(Q)
        shown = err.getvalue().decode()
    assert (decision.decision, decision.actor, decision.delegated_by, decision.source) == (
        "modify",
        "bob",
        "alice",
        "tty",
    )
    assert (decision.reason, decision.feedback) == ("not yet", "reject conflicts with 409")
    assert "a diff" in shown  # the question's summary is shown before the prompt
