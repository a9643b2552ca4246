"""``eventually-acknowledged``, for an event the sender never received a 2xx for.

Each attempt is classified once by what it says of the handler (`role_of`, from the recorded
outcomes, never from error text), then two tables decide: why the invariant is violated
(`WHY`, the first row that holds), or, when it is not, what the lab could not judge
(`UNJUDGED`). See `harness.core.verdicts` for the invariant itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from acklab.evidence.documents.records import Delivery
from acklab.harness.wire.providers import PROFILES

if TYPE_CHECKING:
    from acklab.harness.core.verdicts import Judgement

BOOTING_STATUSES = frozenset({502, 503, 504})  # what a booting service or its proxy answers
Role = Literal["booting", "unreachable", "failure", "lab"]


def hung(delivery: Delivery) -> bool:
    """The handler never answered within the lab's per-delivery bound: its failure, whatever
    fault the lab meant to apply to its answer (there was none to lose, reset or cut short)."""
    return delivery.status is None and delivery.handler_gave == "timed-out"


def unreachable(delivery: Delivery) -> bool:
    """The lab could not open a connection to the endpoint at all (its problem, not the handler's)."""
    return delivery.status is None and "refused" in (delivery.sender_saw, delivery.handler_gave)


def role_of(delivery: Delivery) -> Role:
    """What one attempt says of the handler.

    ``booting``: answered (or not) while the lab's own service booted or restarted; ``unreachable``:
    no connection could be opened — both the lab's problem. ``failure``: the handler's own failure
    reached the sender (its non-2xx, its silence past the sender's timeout, a hang past the lab's
    bound). ``lab``: the lab's fault decided what the sender saw, which says nothing of the handler."""
    if delivery.service_ready is False and (delivery.status is None or delivery.status in BOOTING_STATUSES):
        return "booting"
    if unreachable(delivery):
        return "unreachable"
    own_answer = delivery.sender_status is not None and delivery.sender_status == delivery.status
    # No answer where nothing stood between: the handler's failure (an attempt with nothing recorded
    # on either side, which only an older record can hold, is no evidence).
    recorded = (delivery.sender_saw, delivery.handler_gave) != ("no-answer", "no-answer")
    silent = delivery.status is None and recorded
    unfaulted_silence = not delivery.faulted and (delivery.sender_timed_out or silent)
    return "failure" if own_answer or unfaulted_silence or hung(delivery) else "lab"


@dataclass(frozen=True)
class Unacknowledged:
    """An event the sender never received a 2xx for: its attempts by role, and what they add up to."""

    event_id: str
    delivered: tuple[Delivery, ...]
    effects: int | None  # its count (None: the probe could not read it)
    timeout_s: float | None
    role: str  # how the event's violation names it ('' or 'the first event: ')
    # How the event was sent when its trial proved the handler accepts the provider's plain deliveries
    # (a control was acknowledged): refusing it then is losing it, whatever the status.
    genuine: str | None = None

    def of_role(self, role: Role) -> tuple[Delivery, ...]:
        return tuple(d for d in self.delivered if role_of(d) == role)

    @property
    def failures(self) -> tuple[Delivery, ...]:
        return self.of_role("failure")

    @property
    def processed(self) -> bool:
        return bool(self.effects) or any(d.acknowledged for d in self.delivered)

    @property
    def severe(self) -> bool:
        """No failure reached the sender as anything but a 5xx (or as nothing); any refusal of a genuine event."""
        return self.genuine is not None or all(
            d.sender_status is None or d.sender_status >= 500 for d in self.failures
        )

    @property
    def timed_out(self) -> tuple[Delivery, ...]:
        return tuple(d for d in self.failures if d.sender_timed_out)

    @property
    def lost(self) -> tuple[Delivery, ...]:
        """Acknowledgements the handler gave and the sender never got, outside its own failures."""
        failures = self.failures
        return tuple(d for d in self.delivered if d.acknowledged and not d.received and d not in failures)

    @property
    def statuses(self) -> str:
        return ", ".join(str(d.status) for d in self.delivered) or "none"

    def within(self) -> str:
        return f" of {self.timeout_s:g} s" if self.timeout_s is not None else ""

    def answers(self) -> str:
        return ", ".join(
            str(d.sender_status) if d.sender_status is not None else "no answer" for d in self.failures
        )


def _hangs(u: Unacknowledged) -> str:
    return (
        f"the handler did not answer within the sender's timeout{u.within()} on any of its "
        f"{len(u.timed_out)} attempt(s) (a handler that hangs)"
    )


def _lost(u: Unacknowledged) -> str:
    return (
        f"the handler acknowledged seq {u.lost[0].seq} but the sender never received it, and its "
        f"duplicates were answered {u.answers()}: a duplicate of a processed event must be answered 2xx"
    )


def _refused_genuine(u: Unacknowledged) -> str:
    answers = ", ".join(str(d.sender_status) for d in u.failures)
    return (
        f"every attempt was refused ({answers}) although the event was genuine — {u.genuine} — and a plain "
        "delivery of this trial was acknowledged: the provider sends it this way every time, so it is lost"
    )


def _all_5xx(u: Unacknowledged) -> str:
    return f"every one of its {len(u.failures)} answers was a 5xx"


def _processed(u: Unacknowledged) -> str:
    done = u.effects if u.effects else "an acknowledged"
    return f"it processed the event ({done} effect(s)) but the sender never received a 2xx"


# Why eventually-acknowledged is violated: the first row whose test holds words it.
WHY: tuple[tuple[Callable[[Unacknowledged], bool], Callable[[Unacknowledged], str]], ...] = (
    (lambda u: bool(u.timed_out) and len(u.timed_out) == len(u.failures), _hangs),
    (lambda u: bool(u.lost), _lost),
    (lambda u: u.genuine is not None and not u.processed, _refused_genuine),
    (
        lambda u: u.severe and all(d.status is not None and d.sender_status is not None for d in u.failures),
        _all_5xx,
    ),
    (lambda u: u.processed, _processed),
    (lambda u: True, lambda u: "no attempt was answered 2xx in time"),
)


def _booting(u: Unacknowledged) -> str:
    return (
        f"{u.event_id}: no attempt reached a ready handler — the answers ({u.statuses}) came while the lab's "
        "own service was booting, restarting or down; the lab did not test the handler"
    )


def _unreachable(u: Unacknowledged) -> str:
    why = next((d.error for d in u.of_role("unreachable") if d.error), "no answer")
    return (
        f"{u.event_id}: the lab could not connect to the endpoint ({why}); nothing was tested — "
        "is the service up at the endpoint?"
    )


def _unanswered(u: Unacknowledged) -> str:
    why = next((d.error for d in u.delivered if d.error), "no answer")
    return (
        f"{u.event_id}: no attempt got an answer from the handler ({why}); nothing was tested — "
        "is the service up at the endpoint?"
    )


def _refused_all(u: Unacknowledged) -> str:
    routes = {404, 405} & {d.status for d in u.failures}
    hint = (
        f"the endpoint answered {'/'.join(map(str, sorted(routes)))}: is the route there yet (command.ready)? "
        if routes
        else ""
    )
    return (
        f"{u.event_id}: the target accepted no valid delivery (handler statuses: {u.statuses}); "
        f"nothing was tested — {hint}check the endpoint, signing.scheme and signing.secret"
    )


# Without a violation: (test, what the lab could not judge — None: nothing, the event is judged on).
UNJUDGED: tuple[tuple[Callable[[Unacknowledged], bool], Callable[[Unacknowledged], str] | None], ...] = (
    (lambda u: bool(u.of_role("booting")) and not u.failures, _booting),
    (lambda u: bool(u.of_role("unreachable")) and not u.failures, _unreachable),
    # Only the lab's fault stood between the handler's answers and the sender.
    (lambda u: not u.failures and (u.processed or any(d.status is not None for d in u.delivered)), None),
    (lambda u: not u.failures, _unanswered),
    (lambda u: u.effects == 0, _refused_all),
)


def _seen(delivery: Delivery) -> str:
    """What the sender got of one attempt, in words (the handler's side where it differs)."""
    if delivery.sender_timed_out:
        late = f"; the handler answered {delivery.status} later" if delivery.status is not None else ""
        return f"seq {delivery.seq} ({delivery.kind}): no answer within the sender's timeout{late}"
    if delivery.sender_status is not None and delivery.sender_status == delivery.status:
        return f"seq {delivery.seq} ({delivery.kind}): {delivery.status}"
    handler = f"the handler answered {delivery.status}" if delivery.status is not None else "no answer"
    sender = delivery.sender_status if delivery.sender_status is not None else "no answer"
    via = f" (fault {delivery.fault})" if delivery.faulted else ""
    return f"seq {delivery.seq} ({delivery.kind}): {handler}, the sender got {sender}{via}"


def gives_up(scheme: str | None) -> str:
    """What the provider does to a consumer that never acknowledges (its retry policy, in words)."""
    if scheme is None:
        return "the provider keeps retrying until it disables the endpoint"
    known = PROFILES.get(scheme)
    if known is None:  # a scheme of a newer lab: the unsigned sender's policy, under its own name
        return PROFILES["none"].retry.consequence(scheme)
    return known.retry.consequence(known.short_name)


def _observed(delivery: Delivery) -> str:
    if delivery.sender_status is not None:
        return str(delivery.sender_status)
    return "timeout" if delivery.sender_timed_out else "none"


def judge_unacknowledged(
    result: Judgement,
    event_id: str,
    delivered: Sequence[Delivery],
    effects: int | None,
    *,
    timeout_s: float | None,
    role: str,
    genuine: str | None = None,
) -> bool:
    """eventually-acknowledged, for an event the sender never received a 2xx for; False: stop
    judging it. `effects`: its count (None: the probe could not read it); `genuine`: see
    `Unacknowledged.genuine`."""
    u = Unacknowledged(event_id, tuple(delivered), effects, timeout_s, role, genuine)
    failures = u.failures
    if failures and (u.severe or u.processed):
        why = next(words(u) for holds, words in WHY if holds(u))
        seen = "; ".join(_seen(d) for d in u.delivered)
        result.violate(
            "eventually-acknowledged",
            event_id,
            ", ".join(_observed(d) for d in u.delivered),
            f"a 2xx received by the sender within {len(u.delivered)} attempt(s)",
            f"{role}no attempt was acknowledged as the sender saw it: {why} ({seen}); {gives_up(result.provider)}",
            delivery=failures[-1],
        )
        return True
    for holds, words in UNJUDGED:
        if holds(u):
            if words is None:
                return True
            result.errors.append(words(u))
            return False
    return False
