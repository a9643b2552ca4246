import copy

import pytest

from acklab.evidence.errors import EvidenceInvalid
from acklab.evidence.validate import validate

SHA = "a" * 64


def checkpoint(name, status="ok", decision=None):
    return {
        "name": name,
        "started_at": "2026-01-01T00:00:00Z",
        "ended_at": "2026-01-01T00:00:01Z",
        "duration_ms": 1000,
        "status": status,
        "input_hashes": {"app/webhooks.py": SHA},
        "outputs": {},
        "decision": decision,
        "error": None,
    }


def trail():
    return {
        "schema": "acklab/trail/v1",
        "flow": "repair-lost-ack",
        "run_id": "flow-1",
        "started_at": "2026-01-01T00:00:00Z",
        "ended_at": "2026-01-01T00:01:00Z",
        "scope": {"allow": ["app/webhooks.py"], "deny": ["tests/**"]},
        "expected_head_sha": "0123456789abcdef0123456789abcdef01234567",
        "checkpoints": [
            checkpoint("reproduce"),
            checkpoint("propose"),
            checkpoint(
                "approve",
                decision={
                    "decision": "approve",
                    "actor": "alice",
                    "delegated_by": None,
                    "source": "tty",
                    "reason": "bounded patch",
                },
            ),
            checkpoint("apply"),
            checkpoint("verify"),
            checkpoint("strike-again"),
            checkpoint("publish", status="refused"),
        ],
        "proposals": [
            {
                "id": "p1",
                "proposer": "llm",
                "diff": "--- a/app/webhooks.py\n+++ b/app/webhooks.py\n",
                "guard": {"allowed": True, "reasons": ["only app/webhooks.py touched"]},
                "llm_calls": [
                    {"model": "m", "prompt_tokens": 10, "completion_tokens": 5, "latency_ms": 12.5}
                ],
            }
        ],
        "outcome": "refused",
        "exit_code": 5,
    }


def test_a_full_trail_validates():
    validate("trail", trail())


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (("checkpoints", 0, "name"), "deploy", "checkpoints/0/name"),
        (("checkpoints", 0, "status"), "passed", "checkpoints/0/status"),
        (("checkpoints", 2, "decision", "source"), "email", "checkpoints/2/decision/source"),
        (("checkpoints", 0, "input_hashes", "app/webhooks.py"), "abc", "checkpoints/0/input_hashes"),
        (("proposals", 0, "proposer"), "human", "proposals/0/proposer"),
        (("outcome",), "ok", "outcome"),
        (("exit_code",), 9, "exit_code"),
        (("expected_head_sha",), "HEAD", "expected_head_sha"),
    ],
)
def test_a_wrong_field_is_named(path, value, field):
    doc = copy.deepcopy(trail())
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(EvidenceInvalid, match=f"at {field}"):
        validate("trail", doc)


def test_a_decision_needs_actor_and_delegation():
    doc = trail()
    del doc["checkpoints"][2]["decision"]["delegated_by"]
    with pytest.raises(EvidenceInvalid, match="delegated_by"):
        validate("trail", doc)
