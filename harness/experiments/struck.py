"""What the deeper experiments share: sender-side fault labels and the sender's retries.

In the deeper experiments the fault strikes away from the HTTP exchange — on the link to
the database, or by killing the handler's process — so the sender sees whatever reaches
it (the handler's answer, a timeout, a dropped connection). The labels below only name
that fault in the delivery records. After the fault, the sender retries on its compressed
schedule, exactly as `TrialContext.deliver` does, until it sees a 2xx.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import ClassVar

import httpx

from acklab.harness.core.trial import STOP_RETRYING, TrialContext
from acklab.harness.wire.records import DeliveryRecord
from acklab.harness.wire.templates import WebhookEvent
from acklab.harness.wire.transports import Exchange


class _Struck:
    async def sender_view(self, exchange: Exchange) -> httpx.Response:
        return exchange.respond(await exchange.answer_within(exchange.ticket.sender_timeout_s))


@dataclass(frozen=True)
class DbLinkStruck(_Struck):
    """This attempt ran while a fault was on the handler's link to its database."""

    name: ClassVar[str] = "db-link"


@dataclass(frozen=True)
class CrashAfterCommit(_Struck):
    """The handler's process SIGKILLs itself after its commit, before it answers."""

    name: ClassVar[str] = "crash-after-commit"


@dataclass(frozen=True)
class CrashMidTransaction(_Struck):
    """The lab SIGKILLs the handler's process while its transaction is open."""

    name: ClassVar[str] = "crash-mid-transaction"


@dataclass
class WithheldAnswer:
    """crash-after-commit on a service the lab cannot hook: the handler's answer is held back from
    the sender until the lab has decided whether to kill the service first (`withhold`): an
    answer that beat the effects probe never reaches the sender's retry logic, and the retry
    lands on a fresh process all the same (``killed-after-answer``)."""

    name: ClassVar[str] = "crash-after-commit"
    answered: asyncio.Event = field(default_factory=asyncio.Event)
    decided: asyncio.Event = field(default_factory=asyncio.Event)
    withhold: bool = False
    got_answer: bool = False  # the handler answered (not: its connection failed)

    async def sender_view(self, exchange: Exchange) -> httpx.Response:
        try:
            answer = await exchange.answer_within(exchange.ticket.sender_timeout_s)
            self.got_answer = True
        finally:
            self.answered.set()
        await self.decided.wait()
        if self.withhold:
            raise httpx.RemoteProtocolError(
                "the lab killed the service after its answer and withheld the answer (killed-after-answer)",
                request=exchange.request,
            )
        return exchange.respond(answer)


def sender_acked(record: DeliveryRecord) -> bool:
    status = record.sender_status
    return status is not None and (200 <= status < 300 or status in STOP_RETRYING)


async def retry_until_acked(
    trial: TrialContext, event: WebhookEvent, *, started: float, first: DeliveryRecord
) -> list[DeliveryRecord]:
    """Attempts 2..N at the schedule's offsets from ``started``, until the sender sees a 2xx."""
    if sender_acked(first):
        return []
    schedule = trial.lab.schedule
    attempts = min(len(schedule), trial.lab.settings.max_attempts)
    sent: list[DeliveryRecord] = []
    for n in range(2, attempts + 1):
        delay = started + schedule[n - 1] - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        record = await trial.send(event, kind="retry", attempt=n)
        sent.append(record)
        if sender_acked(record):
            break
    return sent
