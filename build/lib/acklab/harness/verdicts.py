"""Verdicts, computed from a trial's records alone (so a bundle can be re-judged later).

Invariants:

* ``at-most-once-effect``: after quiescence, no event has more than ``max_effects`` effects.
* ``acked-exactly-once``: an event the *handler* answered 2xx (whatever the sender saw)
  has at least one effect (more is already an at-most-once violation).
* ``conflict-rejected``: a conflicting body under a used event id gets one of
  ``conflict_status`` and changes no effect count — a 2xx is a violation even when the
  count stays put.
* ``replay-rejected``: a stale, tampered or foreign-signed delivery gets no 2xx and
  leaves no effect.
* ``no-2xx-without-commit`` (database-link faults): a delivery answered 2xx before the
  ``after-fault`` observation must have committed — that observation may not read 0.

A missing observation, or a target that never accepted a valid delivery, is a lab error
(verdict ``error``), never a pass.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from acklab.harness.targets import Expect

INVARIANTS = (
    "at-most-once-effect",
    "acked-exactly-once",
    "conflict-rejected",
    "replay-rejected",
    "no-2xx-without-commit",
)
DELIVERED_KINDS = frozenset({"original", "retry", "duplicate"})


@dataclass
class Judgement:
    """A trial's verdict with its violations and the lab errors that prevent one."""

    trial_id: str
    violations: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        if self.errors:
            return "error"
        return "fail" if self.violations else "pass"

    def violate(
        self, invariant: str, event_id: str, observed: int | str | None, expected: str, detail: str
    ) -> None:
        self.violations.append(
            {
                "invariant": invariant,
                "event_id": event_id,
                "observed": observed,
                "expected": expected,
                "detail": detail,
                "trial": self.trial_id,
            }
        )


def _ok(status: int | None) -> bool:
    return status is not None and 200 <= status < 300


def _observation(
    observations: Sequence[Mapping[str, Any]], event_id: str, note: str
) -> Mapping[str, Any] | None:
    found = [o for o in observations if o["event_id"] == event_id and o.get("note") == note]
    return found[-1] if found else None


def judge(trial: Mapping[str, Any], expect: Expect) -> Judgement:
    """The judgement of one trial record (its deliveries and observations)."""
    result = Judgement(str(trial["trial_id"]))
    deliveries: Sequence[Mapping[str, Any]] = trial["deliveries"]
    observations: Sequence[Mapping[str, Any]] = trial["observations"]
    for event_id in trial["event_ids"]:
        mine = [d for d in deliveries if d["event_id"] == event_id]
        before = _observation(observations, event_id, "before")
        final = _observation(observations, event_id, "final")
        if not mine:
            result.errors.append(f"{event_id}: no delivery was recorded")
        elif before is None or final is None:
            missing = "before" if before is None else "final"
            result.errors.append(f"{event_id}: no {missing!r} effects observation was recorded")
        elif before["effects"] != 0:
            result.errors.append(
                f"{event_id}: already had {before['effects']} effect(s) before the trial; the event id was "
                "used before against this database (reused --seed?); run with another seed"
            )
        elif any(d["kind"].startswith("replay-") for d in mine):
            _judge_replay(result, event_id, mine, int(final["effects"]))
        else:
            mid = _observation(observations, event_id, "before-conflict")
            _judge_delivered(
                result, event_id, mine=mine, effects=int(final["effects"]), expect=expect, mid=mid
            )
            _judge_fault_window(result, event_id, mine, _observation(observations, event_id, "after-fault"))
    return result


def _judge_fault_window(
    result: Judgement, event_id: str, mine: Sequence[Mapping[str, Any]], after: Mapping[str, Any] | None
) -> None:
    """no-2xx-without-commit: a 2xx answered while the database link was broken needs its commit."""
    if after is None or int(after["effects"]) != 0 or after["after_seq"] is None:
        return
    for delivery in mine:
        if (
            delivery["kind"] in DELIVERED_KINDS
            and _ok(delivery["status"])
            and delivery["seq"] <= after["after_seq"]
        ):
            result.violate(
                "no-2xx-without-commit",
                event_id,
                delivery["status"],
                "a 5xx",
                f"the handler answered {delivery['status']} to delivery seq {delivery['seq']} during a fault on "
                "its database link, and nothing was committed once the fault was lifted",
            )
            return


def _judge_delivered(
    result: Judgement,
    event_id: str,
    *,
    mine: Sequence[Mapping[str, Any]],
    effects: int,
    expect: Expect,
    mid: Mapping[str, Any] | None,
) -> None:
    delivered = [d for d in mine if d["kind"] in DELIVERED_KINDS]
    acked = [d for d in delivered if _ok(d["status"])]
    if not acked and effects == 0:
        statuses = ", ".join(str(d["status"]) for d in delivered) or "none"
        result.errors.append(
            f"{event_id}: the target accepted no valid delivery (handler statuses: {statuses}); "
            "nothing was tested — check the endpoint, signing.scheme and signing.secret"
        )
        return
    if effects > expect.max_effects:
        statuses = ", ".join(str(d["status"]) for d in mine)
        result.violate(
            "at-most-once-effect",
            event_id,
            effects,
            f"<= {expect.max_effects}",
            f"{len(mine)} deliveries of one event left {effects} side effects (handler statuses: {statuses})",
        )
    if acked and effects == 0:
        first = acked[0]
        result.violate(
            "acked-exactly-once",
            event_id,
            effects,
            "== 1",
            f"the handler answered {first['status']} to delivery seq {first['seq']} but no side effect exists",
        )
    conflicts = [d for d in mine if d["kind"] == "conflict"]
    if conflicts:
        _judge_conflict(result, event_id, conflicts=conflicts, effects=effects, expect=expect, mid=mid)


def _judge_conflict(
    result: Judgement,
    event_id: str,
    *,
    conflicts: Sequence[Mapping[str, Any]],
    effects: int,
    expect: Expect,
    mid: Mapping[str, Any] | None,
) -> None:
    if mid is None:
        result.errors.append(f"{event_id}: no 'before-conflict' effects observation was recorded")
        return
    wanted = " or ".join(map(str, expect.conflict_status))
    for delivery in conflicts:
        status = delivery["status"]
        if status is None:
            result.errors.append(
                f"{event_id}: the conflicting delivery seq {delivery['seq']} got no answer ({delivery['error']})"
            )
        elif status not in expect.conflict_status:
            detail = f"a conflicting body under a used event id was answered {status}"
            if _ok(status):
                detail += " (a 2xx accepts a body that differs from the one processed)"
            result.violate("conflict-rejected", event_id, status, wanted, detail)
    if effects != mid["effects"]:
        result.violate(
            "conflict-rejected",
            event_id,
            effects,
            f"== {mid['effects']}",
            f"the conflicting body changed the effect count from {mid['effects']} to {effects}",
        )


def _judge_replay(result: Judgement, event_id: str, mine: Sequence[Mapping[str, Any]], effects: int) -> None:
    for delivery in mine:
        variant = delivery["kind"].removeprefix("replay-")
        if delivery["status"] is None:
            result.errors.append(f"{event_id}: the {variant} delivery got no answer ({delivery['error']})")
        elif _ok(delivery["status"]):
            result.violate(
                "replay-rejected",
                event_id,
                delivery["status"],
                "a 4xx",
                f"a {variant} delivery was accepted with {delivery['status']}",
            )
    if effects:
        variant = mine[0]["kind"].removeprefix("replay-")
        result.violate(
            "replay-rejected",
            event_id,
            effects,
            "== 0",
            f"a {variant} delivery left {effects} side effect(s)",
        )


def combine(verdicts: Sequence[str]) -> str:
    """error dominates fail dominates pass (an empty list is an error: nothing was judged)."""
    if not verdicts or "error" in verdicts:
        return "error"
    return "fail" if "fail" in verdicts else "pass"
