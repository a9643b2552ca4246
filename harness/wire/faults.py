"""Faults: small declarative values, one method each (`sender_view`).

A fault decides what the simulated sender sees of one delivery; the handler always gets
the full request and its answer is always recorded (see `harness.wire.transports`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol

import httpx

from acklab.harness.wire.transports import Exchange


class Fault(Protocol):
    """What the sender sees of one delivery."""

    name: ClassVar[str]

    async def sender_view(self, exchange: Exchange) -> httpx.Response: ...


@dataclass(frozen=True)
class NoFault:
    """The handler's answer, unless it comes later than the sender's timeout."""

    name: ClassVar[str] = "none"

    async def sender_view(self, exchange: Exchange) -> httpx.Response:
        return exchange.respond(await exchange.answer_within(exchange.ticket.sender_timeout_s))


@dataclass(frozen=True)
class LostAck:
    """The handler answers 2xx and commits; the lab confirms the commit, the sender gets a 504.

    Only an acknowledgement can be lost: a 4xx or 5xx reaches the sender as the handler sent
    it (the provider retries it anyway), and so does a 2xx whose commit the lab never saw —
    the fault did not land, and the trial says so rather than judge a retry it cannot explain.
    """

    synthetic_status: int = 504
    name: ClassVar[str] = "lost-ack"

    async def sender_view(self, exchange: Exchange) -> httpx.Response:
        answer = await exchange.answer()
        if not 200 <= answer.status < 300:
            return exchange.respond(answer)
        if not await exchange.confirm_commit(self.synthetic_status):
            return exchange.respond(answer)
        return exchange.synthetic(self.synthetic_status, "acknowledgement lost (fault lost-ack)")


@dataclass(frozen=True)
class ResetAfterSend:
    """The connection is reset once the request was sent; the handler still gets all of it."""

    name: ClassVar[str] = "reset"

    async def sender_view(self, exchange: Exchange) -> httpx.Response:
        await exchange.request_sent()
        raise exchange.cut(
            httpx.ReadError(
                "connection reset by peer after the request was sent (fault reset)", request=exchange.request
            )
        )


@dataclass(frozen=True)
class SenderTimeout:
    """The sender gives up after `timeout_s` (below the handler's latency) while it still works."""

    timeout_s: float
    name: ClassVar[str] = "timeout"

    async def sender_view(self, exchange: Exchange) -> httpx.Response:
        return exchange.respond(await exchange.answer_within(self.timeout_s))
