"""How a conflicting payload is judged: the body that came second under one event id must be
refused (``expect.conflict: reject``) or leave effects — and the probed state — exactly as the
first body left them (``ignore``); a state that still shows the original's values names the
original's late effect. Split from `verdicts`, which calls `judge_conflict`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

from acklab.evidence.documents.records import Delivery
from acklab.evidence.documents.trial import Trial
from acklab.harness.targets import Expect

if TYPE_CHECKING:
    from acklab.harness.core.verdicts import Counts, Judgement


def judge_conflict(
    result: Judgement,
    event_id: str,
    *,
    trial: Trial,
    mine: Sequence[Delivery],
    counts: Counts,
    expect: Expect,
) -> None:
    mid = trial.observation(event_id, "before-conflict")
    if mid is None:
        result.errors.append(f"{event_id}: no 'before-conflict' effects observation was recorded")
        return
    conflicts = [d for d in mine if d.kind == "conflict"]
    ignore = expect.conflict == "ignore"
    wanted = "a 2xx (expect.conflict: ignore)" if ignore else " or ".join(map(str, expect.conflict_status))
    for delivery in conflicts:
        status = delivery.status
        if status is None:
            result.errors.append(
                f"{event_id}: the conflicting delivery seq {delivery.seq} got no answer ({delivery.error})"
            )
        elif ignore and not delivery.acknowledged:
            result.violate(
                "conflict-rejected",
                event_id,
                status,
                wanted,
                f"a conflicting body under a used event id was answered {status}; with expect.conflict: "
                "ignore the consumer acknowledges it (2xx) and changes nothing, or the provider retries it",
                delivery=delivery,
            )
        elif not ignore and status not in expect.conflict_status:
            detail = f"a conflicting body under a used event id was answered {status}"
            if delivery.acknowledged:
                detail += (
                    " (a 2xx accepts a body that differs from the one processed; if this consumer dedupes "
                    "by event id and ignores the new body, set expect.conflict: ignore)"
                )
            result.violate("conflict-rejected", event_id, status, wanted, detail, delivery=delivery)
    culprit = conflicts[-1] if conflicts else None
    late = trial.observation(event_id, "late")
    final = trial.observation(event_id, "final")
    last_state = next((o.state for o in (late, final) if o is not None and o.state is not None), None)
    original_late = _originals_late_effect(trial, last_state, expect)
    if counts.last != mid.effects:
        result.violate(
            "conflict-rejected",
            event_id,
            counts.last,
            f"== {mid.effects}",
            f"the conflicting body changed the effect count from {mid.effects} to {counts.last}{counts.note()}"
            + original_late,
            delivery=culprit,
        )
    before_state = mid.state
    if before_state is None:
        return
    for seen in (final, late):
        if seen is not None and seen.state is not None and seen.state != before_state:
            when = "by the end of the run" if seen is late else "once settled"
            result.violate(
                "conflict-rejected",
                event_id,
                seen.state,
                f"== {before_state}",
                f"the conflicting body changed the committed state {when}: {before_state} before it, "
                f"{seen.state} after (effects.sql.state / effects.http.state_path)" + original_late,
                delivery=culprit,
            )
            return


def _state_values(state: str) -> list[object]:
    """Every scalar of a recorded state (canonical JSON; a state cut at its length limit: none)."""
    try:
        doc = json.loads(state)
    except ValueError:
        return []
    found: list[object] = []
    stack = [doc]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
        else:
            found.append(node)
    return found


def _same(a: object, b: object) -> bool:
    numbers = (int, float)
    if (
        isinstance(a, numbers)
        and isinstance(b, numbers)
        and not isinstance(a, bool)
        and not isinstance(b, bool)
    ):
        return float(a) == float(b)
    return a == b


def _originals_late_effect(trial: Trial, state: str | None, expect: Expect) -> str:
    """When the state read last still shows the original body's values (and none the conflicting
    body changed them to), the effect that came is the original's, late: say so, and what to set."""
    if state is None:
        return ""
    fields = [
        f
        for t in (trial.fault.tries if trial.fault is not None else [])
        for f in ((t.facts or {}).get("conflict_fields") or [])
        if isinstance(f, dict) and "missing" not in f
    ]
    values = _state_values(state)
    original = [f for f in fields if any(_same(v, f.get("original")) for v in values)]
    conflicting = [f for f in fields if any(_same(v, f.get("conflicting")) for v in values)]
    if not original or conflicting:
        return ""
    shown = ", ".join(
        f"{f['path']} {f['original']} (the conflict sets {f['conflicting']})" for f in original[:3]
    )
    wait = (
        f"raise expect.effects_within_s (now {expect.effects_within_s:g} s)"
        if expect.effects_within_s
        else "set expect.effects_within_s to how long its work may take"
    )
    return (
        f"; but the state still shows the original body ({shown}): this is the original's effect, arriving "
        f"after the trial read it — if this consumer acknowledges first and works afterwards, {wait}"
    )
