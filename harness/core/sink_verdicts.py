"""Effects outside the database, judged per event from its observations (`harness.sinks`).

* ``at-most-once-effect`` per source, for each sink the target runs (`harness.sinks.SINKS`): at
  most ``expect.max_<source>`` — ``max_emails`` emails, ``max_calls`` downstream effects (calls
  with one idempotency key are one effect; a call without a key is one of its own; a change the
  provider's API executed is one). The violation's ``source`` says which: ``emails`` or ``calls``
  (``rows`` for the database's own count, `harness.core.verdicts`).
* ``idempotent-outbound`` (``effects.outbound.idempotency_header`` set): every effect call for
  one event carries the header, and all carry one key. A call without it, or two keys for one
  event, is two refunds once anything retries.
* ``no-effect-without-commit``: an email or call for an event whose database effect never
  committed. Each message and call is stamped with the event's rows the moment it arrived
  (``sent_before_commit`` counts those that arrived at 0 rows); a committed row accounts for
  at most one of them. More sends before a commit than commits — or any send with no row at
  all once settled — means a transaction that rolled back, or a process that died, after it
  had told the world.

The sinks' counts only grow, so the last observation (``late`` when the end-of-run re-read
ran, else ``final``) is the one judged; one that grew after the trial was judged says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from acklab.evidence.documents.records import Delivery, EffectSource, Observation
from acklab.evidence.documents.verdicts import Invariant
from acklab.harness.sinks import SINKS, SinkKind
from acklab.harness.targets import Expect


class Judged(Protocol):
    def violate(self, invariant: Invariant, event_id: str, observed: int | str | None, expected: str,
                detail: str, *, delivery: Delivery | None = None,
                source: EffectSource | None = None) -> None: ...  # fmt: skip


def _grew(final: Observation, last: Observation, source: str) -> str:
    before, after = final.count_of(source) or 0, last.count_of(source) or 0
    if last is final or after <= before:
        return ""
    return f" (read {before} when the trial was judged, {after} at the end of the run: they arrived later)"


def _by_source() -> dict[str, SinkKind]:
    """The first sink of each source (its words speak for the source)."""
    found: dict[str, SinkKind] = {}
    for kind in SINKS.values():
        found.setdefault(kind.source, kind)
    return found


def _judge_failed(
    result: Judged, event_id: str, *, mine: Sequence[Delivery], last: Observation, failed: Sequence[str]
) -> None:
    """acked-exactly-once per failed source: an acknowledged event has its email (its call) in the end.

    The sink refused the event's first attempt; a handler that answered 2xx anyway told the provider
    the work was done, and the provider never sends it again."""
    acked = [d for d in mine if d.acknowledged]
    if not acked:
        return
    kinds = _by_source()
    for name in failed:
        kind = kinds.get(name)
        if kind is None or last.count_of(kind.source):
            continue
        source = kind.source
        result.violate(
            "acked-exactly-once",
            event_id,
            0,
            f"{source} >= 1",
            f"{source}: the sink {kind.refusal} during the first attempt, yet the handler answered {acked[0].status} "
            f"to delivery seq {acked[0].seq} and no {source[:-1]} was ever sent: an acknowledged event with no "
            "effect, which the provider never retries (answer 5xx when the effect failed, or retry it yourself "
            "from an outbox)",
            delivery=acked[0],
            source=source,
        )


def _judge_keys(result: Judged, event_id: str, keys: Sequence[str | None], cause: Delivery | None) -> None:
    """idempotent-outbound: every effect call for the event carries the key, and all carry one."""
    distinct = sorted({k for k in keys if k is not None})
    if None in keys:
        result.violate(
            "idempotent-outbound",
            event_id,
            f"{keys.count(None)} call(s) without a key",
            "one idempotency key per event",
            f"{keys.count(None)} of {len(keys)} downstream call(s) for the event carried no idempotency "
            "key: a retry of such a call is a second effect downstream (send the event's id as the key)",
            delivery=cause,
        )
    elif len(distinct) > 1:
        result.violate(
            "idempotent-outbound",
            event_id,
            f"{len(distinct)} keys",
            "one idempotency key per event",
            f"{len(keys)} downstream calls for one event carried {len(distinct)} different idempotency "
            f"keys {distinct[:5]}: the downstream dedupes by key, so it made {len(distinct)} effects (derive "
            "the key from the event's id, not a fresh one per delivery)",
            delivery=cause,
        )


def judge_sinks(
    result: Judged,
    event_id: str,
    *,
    mine: Sequence[Delivery],
    final: Observation,
    late: Observation | None,
    rows: int,
    expect: Expect,
    failed: Sequence[str] = (),
) -> None:
    """The sinks' invariants for one event; nothing when the target runs no sinks. `failed`: the
    sources whose sink refused the event's first attempt (effect-failure)."""
    if not final.sinks_seen:
        return
    last = late if late is not None else final
    _judge_failed(result, event_id, mine=mine, last=last, failed=failed)
    cause = next((d for d in mine if d.kind in ("retry", "duplicate")), None)
    keys = last.call_keys
    for source, kind in _by_source().items():
        count = last.count_of(source)
        if count is None or count <= expect.max_of(source):
            continue
        shown = f" with idempotency keys {keys}" if kind.carries_keys and keys is not None else ""
        result.violate(
            "at-most-once-effect",
            event_id,
            count,
            f"<= {expect.max_of(source)}",
            f"{source}: {len(mine)} deliveries of one event {kind.verb} {count} {kind.what}{shown} (the "
            f"database kept {rows} effect(s)){kind.cost}{_grew(final, last, source)}",
            delivery=cause,
            source=kind.source,
        )
    if keys:
        _judge_keys(result, event_id, keys, cause)
    # Every message and effect call: a keyed sink's calls by their keys (each call one), the rest by count.
    counts = {source: last.count_of(source) or 0 for source in _by_source()}
    keyed = next((kind.source for kind in SINKS.values() if kind.carries_keys), None)
    if keys is not None and keyed is not None:
        counts[keyed] = len(keys)
    sent = sum(counts.values())
    before = last.sent_before_commit or 0
    if sent and rows == 0:
        result.violate(
            "no-effect-without-commit",
            event_id,
            sent,
            "== 0 without a committed effect",
            f"{sent} email(s)/call(s) went out for an event whose database effect never committed once "
            "settled: the transaction rolled back or the process died after the consumer told the world",
        )
    elif before > rows:
        result.violate(
            "no-effect-without-commit",
            event_id,
            before,
            f"<= {rows} (one per committed effect)",
            f"{before} email(s)/call(s) arrived while the event had no committed effect, but only {rows} "
            f"committed: {before - rows} belonged to a transaction that rolled back or a process that died "
            "(send after the commit, or from an outbox)",
            delivery=cause,
        )
