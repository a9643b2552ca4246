"""What the deeper experiments share: sender-side fault labels and the sender's retries.

In the deeper experiments the fault strikes away from the HTTP exchange — on the link to
the database, or by killing the handler's process — so the sender sees whatever reaches
it (the handler's answer, a timeout, a dropped connection). The labels below only name
that fault in the delivery records. After the fault, the sender retries on its compressed
schedule, until it sees a 2xx (`TrialContext.retry_until_acked`, the loop `deliver` uses too).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import ClassVar

import httpx

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
            raise exchange.cut(
                httpx.RemoteProtocolError(
                    "the lab killed the service after its answer and withheld the answer (killed-after-answer)",
                    request=exchange.request,
                )
            )
        return exchange.respond(answer)
