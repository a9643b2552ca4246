"""A trial is validated once a process: in its own file, not again inside the incident that embeds it
(`acklab.evidence.validate.ONCE_REFS`) — and only an identical, valid trial is ever passed that way."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from acklab.evidence import validate as v
from acklab.evidence.errors import EvidenceInvalid
from tests.evidence.factories import incident, trial

TRIAL_REF = "common.schema.json#/$defs/trial"


@pytest.fixture
def descents(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every trial the validators checked in full (the memo starts empty)."""
    seen: list[Any] = []
    full = v._full_ref

    def counting(checker: Any, ref: str, instance: Any, subschema: Any) -> Any:
        if ref == TRIAL_REF:
            seen.append(instance)
        return full(checker, ref, instance, subschema)

    monkeypatch.setattr(v, "_full_ref", counting)
    monkeypatch.setattr(v, "_valid_once", type(v._valid_once)())
    return seen


def test_an_incident_does_not_check_its_trials_again(descents: list[Any]) -> None:
    trials = [trial("run-1", "lost-ack", k, verdict="fail") for k in range(3)]
    for t in trials:
        v.validate("trial", t)
    assert len(descents) == 3
    v.validate("incident", incident("run-1", "lost-ack", copy.deepcopy(trials)))
    assert len(descents) == 3, "the incident's trials were the ones just checked"
    # A trial the memo never saw is checked in full, inside the incident too.
    other = trial("run-1", "lost-ack", 9, verdict="fail")
    v.validate("incident", incident("run-1", "lost-ack", [*trials, other]))
    assert descents[3:] == [other]


def test_an_embedded_trial_that_differs_in_one_field_is_refused(descents: list[Any]) -> None:
    good = trial("run-1", "replay", 0, verdict="fail")
    v.validate("trial", good)
    bad = copy.deepcopy(good)
    bad["deliveries"][0]["status"] = "two hundred"
    with pytest.raises(EvidenceInvalid, match=r"at trials/0/deliveries/0/status: 'two hundred'"):
        v.validate("incident", incident("run-1", "replay", [bad]))


def test_an_invalid_trial_is_never_remembered(descents: list[Any]) -> None:
    bad = trial("run-1", "replay", 0)
    bad["verdict"] = "maybe"
    for _ in range(2):
        before = len(descents)
        with pytest.raises(EvidenceInvalid, match="verdict"):
            v.validate("trial", bad)
        assert len(descents) > before, "checked in full again"
    before = len(descents)
    with pytest.raises(EvidenceInvalid, match=r"at trials/0/verdict"):
        v.validate("incident", incident("run-1", "replay", [bad]))
    assert len(descents) > before
    assert not v._valid_once


def test_a_trial_with_a_value_json_cannot_hold_is_checked_every_time(descents: list[Any]) -> None:
    odd = trial("run-1", "replay", 0)
    odd["deliveries"][0]["latency_ms"] = float("nan")  # no canonical JSON: never remembered
    for _ in range(2):
        v.problems("trial", odd)
    assert len(descents) == 2
    assert not v._valid_once


def test_the_memory_is_bounded_and_forgets_the_oldest(
    descents: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(v, "_ONCE_KEPT", 2)
    first, second, third = (trial("run-1", "replay", k) for k in range(3))
    for t in (first, second, third):
        v.validate("trial", t)
    assert len(v._valid_once) == 2
    v.validate("trial", third)
    assert len(descents) == 3, "the newest is still remembered"
    v.validate("trial", first)
    assert descents[3:] == [first], "the oldest was forgotten and checked again"
