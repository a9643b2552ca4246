"""What a proposal, a model or a decisions file says is shown, recorded and published as data."""

from __future__ import annotations

import json
import subprocess

import pytest

from acklab.evidence.documents.trail import Decision, Guard, Proposal
from acklab.flows import report
from acklab.flows.approvals import FileDecisions
from acklab.flows.candidate import Candidate
from acklab.flows.errors import FlowSpecInvalid
from acklab.flows.escape import line_break, md_code, numbered, one_line, quoted, visible
from acklab.flows.lab import ExperimentResult, LabRun

UNSAFE_CHARS = [
    "\x1b", "\r", "\b", "\x00", "\x07", "\x7f", "\x9b", "\u202a", "\u202b", "\u202c", "\u202d",
    "\u202e", "\u2066", "\u2067", "\u2068", "\u2069", "\u200b", "\u200e", "\ufeff", "\u2028",
]  # fmt: skip


@pytest.mark.parametrize("char", UNSAFE_CHARS, ids=[f"U+{ord(c):04X}" for c in UNSAFE_CHARS])
def test_every_control_or_invisible_character_becomes_a_visible_escape(char):
    shown = visible(f"a{char}b")
    assert char not in shown
    assert shown.startswith("a\\")
    assert shown.endswith("b")
    assert shown.isprintable()


def test_text_people_write_stays_as_it_is():
    text = "déjà vu — 日本語\ttab\nnext line"
    assert visible(text) == text
    assert one_line(text) == text.replace("\n", "\\x0a")


def test_a_numbered_diff_has_a_number_on_every_line_and_no_raw_escape():
    shown = numbered("+a\n+\x1b[1A\x1b[2Kb\n c\n")
    assert shown.splitlines() == ["1 | +a", "2 | +\\x1b[1A\\x1b[2Kb", "3 |  c"]


def test_line_breaks_of_every_kind_are_found():
    for char in "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029":
        assert line_break(f"alice{char}Signed-off-by: eve") is not None
    assert line_break("alice (release manager)") is None


@pytest.mark.parametrize(
    "value",
    ["/merge", "[click](https://evil.example)", "@all please", "a | b | c", "``x``", "!1 #2 ~bug %v1"],
)
def test_md_code_quotes_a_value_so_nothing_in_it_is_interpreted(value):
    shown = md_code(value)
    fence = shown[: len(shown) - len(shown.lstrip("`"))]
    assert shown.startswith(fence)
    assert shown.endswith(fence)
    assert fence not in shown[len(fence) : -len(fence)]  # the fence is longer than any backtick run
    assert "|" not in shown.replace("\\|", "")  # a pipe cannot end the table cell


def _run(verdict: str) -> LabRun:
    exp = ExperimentResult(name="lost-ack", verdict=verdict, trials=1)
    return LabRun("r", verdict, "fixture:live", None, {"lost-ack": exp}, 0, "app/webhooks.py")


HOSTILE_DECISION = Decision(
    decision="approve",
    actor="/merge",
    delegated_by="[boss](https://evil.example) @all",
    source="file",
    reason="/approve | shipped",
)
PROPOSAL = Candidate(
    Proposal(
        id="p1",
        proposer="llm",
        diff="",
        diff_sha256="a" * 64,
        files=["app/webhooks.py"],
        guard=Guard(allowed=True, reasons=[]),
    ),
    changed_lines=1,
    rationale="",
)


def test_the_mr_note_quotes_actors_and_reasons_and_carries_no_quick_action():
    note = report.mr_note(
        run_id="flow-1",
        proposal=PROPOSAL,
        decisions=[("approve", HOSTILE_DECISION)],
        reproduce=_run("fail"),
        verify=_run("pass"),
        checks=[],
        comparisons=[],
        bundle_rel="out/flow-1",
    )
    assert not any(line.lstrip().startswith("/") for line in note.splitlines())
    [row] = [line for line in note.splitlines() if line.startswith("| approve |")]
    assert "`/merge`" in row
    assert "`[boss](https://evil.example) @all`" in row
    assert "`/approve \\| shipped`" in row
    header = next(line for line in note.splitlines() if line.startswith("| gate |"))
    assert row.replace("\\|", "").count("|") == header.count("|")


def test_unsandboxed_is_said_at_the_approve_gate_and_in_the_mr_note():
    from acklab.flows.sandbox import choose

    none = choose(unsandboxed=True)
    warned = PROPOSAL.proposal.but(
        guard=Guard(allowed=True, reasons=[], warnings=["app/webhooks.py line 3: '\u0415UR'"])
    )
    candidate = Candidate(warned, changed_lines=1, rationale="")
    question = report.approve_question(
        candidate, ["lost-ack"], "b" * 40, sandbox=none.describe(), unsandboxed=True
    )
    assert f"WARNING: {none.describe()}" in question
    assert "WARNING: app/webhooks.py line 3:" in question
    note = report.mr_note(
        run_id="flow-1",
        proposal=PROPOSAL,
        decisions=[],
        reproduce=_run("fail"),
        verify=_run("pass"),
        checks=[],
        comparisons=[],
        bundle_rel="out/flow-1",
        sandbox=none.describe(),
    )
    assert f"**Warning: {none.describe()}.**" in note
    sandboxed = report.approve_question(candidate, ["lost-ack"], "b" * 40, sandbox="bubblewrap ...")
    assert "sandbox: bubblewrap ..." in sandboxed
    assert "UNSANDBOXED" not in sandboxed


def test_the_commit_message_quotes_actors_so_no_trailer_can_be_forged(tmp_path):
    decision = HOSTILE_DECISION.but(actor="bot Signed-off-by: Eve <eve@example.com>", delegated_by=None)
    message = report.commit_message(
        handler="app/webhooks.py",
        proposal=PROPOSAL,
        run_id="flow-1",
        failing=["lost-ack"],
        expected="b" * 40,
        decisions=[("approve", decision)],
        bundle_rel="out/flow-1",
    )
    assert 'by "bot Signed-off-by: Eve <eve@example.com>"' in message
    trailers = subprocess.run(
        ["git", "interpret-trailers", "--parse"], input=message, capture_output=True, text=True, check=True
    ).stdout
    assert "Signed-off-by" not in trailers
    assert quoted('say "hi"\x1b') == '"say \\"hi\\"\\\\x1b"'


@pytest.mark.parametrize(
    ("field", "value", "why"),
    [
        ("actor", "alice\nSigned-off-by: eve", "line break (\\x0a)"),
        ("delegated_by", "bob\r/merge", "line break (\\x0d)"),
        ("reason", "ok\u2028/approve", "line break (\\u2028)"),
        ("actor", "alice\x1b[2K", "control or invisible characters"),
    ],
)
def test_decisions_file_fields_are_single_line_text(tmp_path, field, value, why):
    entry = {"gate": "approve", "decision": "approve", "actor": "alice"} | {field: value}
    path = tmp_path / "decisions.json"
    path.write_text(json.dumps([entry]))
    with pytest.raises(FlowSpecInvalid, match=f"decision #1 of .*: {field} holds .*") as info:
        FileDecisions.load(path)
    assert why in str(info.value)
    assert int(info.value.exit_code) == 3
    assert "\x1b" not in str(info.value)
    assert "\n" not in str(info.value)
