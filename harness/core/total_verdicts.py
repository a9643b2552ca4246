"""``totals-match``, from a trial's records alone (`harness.core.verdicts` calls `judge_totals`).

Where the target keeps a running total (``expect.totals``) a trial records, per object, the
total the provider's newest event carries (``parameters.totals``: object id -> total); the
settled observation (and the end-of-run re-read) read the consumer's sum. They must be equal:
a consumer that added each partial refund's cumulative amount, or added one twice under a
duplicate, or let an older event's total win, keeps a sum the provider never had.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from acklab.evidence.documents.records import Delivery, EffectSource, Observation
from acklab.evidence.documents.trial import Trial
from acklab.evidence.documents.verdicts import Invariant


class Judged(Protocol):
    errors: list[str]

    def violate(self, invariant: Invariant, event_id: str, observed: int | str | None, expected: str,
                detail: str, *, delivery: Delivery | None = None,
                source: EffectSource | None = None) -> None: ...  # fmt: skip


def _last(observations: list[Observation], note: str, object_id: str) -> Observation | None:
    found = [
        o
        for o in observations
        if o.note == note and o.object_id == object_id and "total" in o.model_fields_set
    ]
    return found[-1] if found else None


def _shown(value: float | int | None) -> str:
    return "nothing (the sum query returned no number)" if value is None else f"{value:g}"


def judge_totals(result: Judged, trial: Trial) -> None:
    """totals-match for every object whose expected total the trial recorded."""
    wanted: Mapping[str, Any] = trial.parameters.get("totals") or {}
    for object_id, total in wanted.items():
        if not isinstance(total, int | float) or isinstance(total, bool):
            result.errors.append(
                f"object {object_id}: its newest event carries no number at expect.totals.field, so there is no "
                "provider's total to compare the consumer's with; check the field's path in the event"
            )
            continue
        final = _last(trial.observations, "final", object_id)
        if final is None:
            result.errors.append(
                f"object {object_id}: the consumer's total (expect.totals.sum) was never read"
            )
            continue
        late = _last(trial.observations, "late", object_id)
        mine = [d for d in trial.deliveries if d.event_id in {o.event_id for o in trial.observations
                                                              if o.object_id == object_id}]  # fmt: skip
        for seen, when in ((final, "once settled"), *(((late, "at the end of the run"),) if late else ())):
            if seen.total == total:
                continue
            result.violate(
                "totals-match",
                seen.event_id,
                _shown(seen.total),
                f"== {total:g}",
                f"object {object_id}: {when} the consumer's total (expect.totals.sum) is {_shown(seen.total)}, but "
                f"the provider's running total is {total:g} (the newest event's expect.totals.field) after "
                f"{len(mine)} deliveries; a consumer that adds each event's cumulative amount, or one amount twice, "
                "keeps a total the provider never had (store the total, or the difference to the last one applied)",
                delivery=mine[-1] if mine else None,
            )
            break
