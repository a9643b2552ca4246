"""The final re-read: every judged event's effects, once more, at the end of the run.

A trial is judged once its effects settled (`TrialContext.settle`). A consumer that works
in the background may still add an effect after that — a second row from a duplicate
that its queue processed late. So when the last experiment is done, and before any service
of the run is stopped, the lab reads every event of every finished trial again (and its
state, where probed), records that as an observation with note ``late`` and judges the
trial again (`harness.engine.execute.rejudge`): a count that grew turns a pass into a fail naming
the invariant the late count breaks. A re-read that fails is recorded (``late_read.error``)
and makes a trial without a proven violation an error — never a silent pass; so does a
message or call the sinks could not keep whole after the trial was judged.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from datetime import datetime

from acklab.evidence.clock import utcnow
from acklab.evidence.documents.records import SINK_SOURCES, LateRead, Observation
from acklab.evidence.documents.trial import Trial
from acklab.harness.core.trial import with_sinks
from acklab.harness.engine.execute import rejudge
from acklab.harness.errors import HarnessError
from acklab.harness.specs.credentials import redact
from acklab.harness.targets import Endpoint, Needs, Target
from acklab.harness.targets.state import read_together

CONCURRENT_READS = 8
# The last trial was judged moments ago: give a straggler of its background work a moment
# before the one read that could still catch it.
LATE_GRACE_S = 0.25


async def _reread_one(endpoint: Endpoint, record: Trial, gate: asyncio.Semaphore) -> Trial:
    delivered = {d.event_id for d in record.deliveries}
    last = record.deliveries[-1].seq if record.deliveries else None
    finals = {o.event_id: o for o in record.observations if o.note == "final"}
    objects = {o.event_id: o.object_id for o in record.observations if o.object_id is not None}
    # Beyond one event: every event of an object the trial played, read or not, is that object's.
    objects.update({e.event_id: case.object_id for case in record.objects or () for e in case.events})
    grew: list[str] = []
    error: str | None = None
    late: list[Observation] = []
    for event_id in record.event_ids:
        if event_id not in delivered:
            continue
        try:
            async with gate:
                object_id = objects.get(event_id)
                effects, state = await read_together(endpoint.probe, endpoint.state, event_id, object_id)
                total = (
                    await endpoint.totals.read(event_id, object_id) if endpoint.totals is not None else None
                )
        except HarnessError as exc:
            error = redact(str(exc))
            break
        seen = with_sinks(
            Observation(
                at=utcnow(),
                event_id=event_id,
                effects=effects,
                source=endpoint.probe.source,
                after_seq=last,
                note="late",
                state=state,
                object_id=object_id,
            ),
            endpoint.sinks,
        )
        if endpoint.totals is not None:  # expect.totals: the consumer's running total, read again
            seen = seen.but(total=total)
        late.append(seen)
        final = finals.get(event_id)
        if final is not None and (effects > final.effects or _sinks_grew(final, seen)):
            grew.append(event_id)
    unread = (
        endpoint.sinks.unread_since(datetime.fromisoformat(record.ended_at), "after this trial was judged")
        if endpoint.sinks is not None
        else None
    )
    return rejudge(
        record.but(
            observations=[*record.observations, *late],
            late_read=LateRead(at=utcnow(), error=error, grew=grew or None),
            lab_errors=[*record.lab_errors, unread] if unread else record.lab_errors,
        )
    )


def _sinks_grew(final: Observation, late: Observation) -> bool:
    """Whether an email or a call arrived for the event after its trial was judged."""
    grew = any((late.count_of(source) or 0) > (final.count_of(source) or 0) for source in SINK_SOURCES)
    return grew or (late.sent_before_commit or 0) > (final.sent_before_commit or 0)


async def reread(target: Target, records: Iterable[Trial]) -> list[Trial]:
    """The records `records` re-read and re-judged (each to be written again); those without a
    delivery are not read."""
    records = [r for r in records if r.deliveries]
    if not records:
        return []
    await asyncio.sleep(LATE_GRACE_S)
    gate = asyncio.Semaphore(CONCURRENT_READS)
    read: list[Trial] | None = None
    try:
        async with target.serve(Needs()) as endpoint:
            read = list(await asyncio.gather(*(_reread_one(endpoint, r, gate) for r in records)))
            recheck = getattr(endpoint.probe, "recheck", None)
            if recheck is not None:  # a pinned schema: checked once more, after every read
                with contextlib.suppress(HarnessError):  # a change is remembered by the pin
                    await asyncio.to_thread(recheck)
    except HarnessError as exc:
        if read is None:
            why = redact(f"the effects could not be read: {exc}")
            read = [rejudge(r.but(late_read=LateRead(at=utcnow(), error=why))) for r in records]
        # else: every event was read; only letting go of the target failed
    return _with_schema_change(target, read)


# Why a trial an interrupted process finished cannot be read again by the resumed one.
LOST_STORE = (
    "finished before the run was interrupted, against a store made for that process (a temporary "
    "database, {{scratch}} or {{database_url}}) that ended with it: the end-of-run re-read cannot read "
    "its events, so no late effect could be ruled out; run again without --resume, or give the target a "
    "store that outlives the process (--db, a database the spec names)"
)


def unreadable(record: Trial) -> Trial:
    """A trial of an interrupted process whose effects store is gone: its re-read failed."""
    return rejudge(record.but(late_read=LateRead(at=utcnow(), error=LOST_STORE)))


def _with_schema_change(target: Target, records: list[Trial]) -> list[Trial]:
    """Every record judged again with the pinned schema's change, once one was seen: no count of
    the run can be trusted after the handler could redefine it."""
    change = target.schema_change()
    if change is None:
        return records
    return [rejudge(r.but(schema_change=r.schema_change or change)) for r in records]
