"""A burst: N deliveries released together (N identical ones, or different requests such as a
webhook and the app's own request), and how close together they arrived.

Three ways to release them (``burst_sync``, an experiment parameter and ``--burst-sync``):

* ``none``: N tasks wait on one asyncio event and send through the lab's transport; each
  opens its own connection after the release (the naive release, kept for comparison);
* ``last-byte`` (the default): every request is written on its own pre-opened connection
  but its last byte, then the last bytes are released in one tight loop, at real-time
  priority where the OS allows it, so the server it wakes cannot run mid-loop
  (`harness.wire.burst_h1`);
* ``single-packet``: HTTP/2 only — every request is a stream of one connection, and their
  final frames leave in one TCP packet (`harness.wire.burst_h2`).

Either way every delivery goes through the lab's `FaultTransport` (its record, its fault,
its bounded answer), so the rest of the lab does not know how it travelled. `Burst` says
how it went: the sender's release spread (first to last final byte written) and, where
the handler says when each request entered it (``x-acklab-entered-ns``: the fixture, the
bench's racy handler), the handler's arrival spread; where the server says when it had read
each request whole (``x-acklab-received-ns``: the fixture), the server's spread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import httpx

from acklab.evidence.extras import require
from acklab.harness.core.plan import BURST_SYNCS
from acklab.harness.errors import HarnessError, Http2Refused
from acklab.harness.wire.burst_h1 import H1Burst
from acklab.harness.wire.records import DeliveryRecord
from acklab.harness.wire.transports import TICKET, Ticket, Wire

if TYPE_CHECKING:
    from acklab.harness.core.trial import TrialContext
    from acklab.harness.targets import Target

__all__ = ["BURST_SYNCS", "Burst", "check_burst_sync", "send_burst"]
CLAIM_TIMEOUT_S = 10.0  # every delivery of an armed burst reaches the lab's transport within this
PROBE_TIMEOUT_S = 5.0


class ArmedWire(Wire, Protocol):
    """One armed delivery: the transport's `Wire`, and whether the lab's transport waits on it.

    A wire closes itself once its answer was read (or failed); `aclose` closes one the lab's
    transport never asked for."""

    claimed: asyncio.Event

    async def aclose(self) -> None: ...


class Armed(Protocol):
    """A burst whose requests are written but their last bytes (`H1Burst`, `H2Burst`)."""

    @property
    def wires(self) -> Sequence[ArmedWire]: ...

    def release(self) -> None: ...

    @property
    def closed_half_sent(self) -> int: ...

    # How the release loop ran: "real-time" (not preempted by the server it wakes), "normal", or
    # None where the release is one write (HTTP/2) or nothing was armed.
    release_priority: str | None

    async def aclose(self) -> None: ...


@dataclass(frozen=True)
class Burst:
    """How one burst went: its deliveries, how they were released, and their arrival spread."""

    records: tuple[DeliveryRecord, ...]
    sync: str
    closed_half_sent: int = 0  # connections the target closed before their last byte was released
    release_priority: str | None = None  # the release loop's scheduling ("real-time" or "normal")

    @property
    def release_spread_ms(self) -> float | None:
        """First to last final byte written by the sender."""
        written = sorted(m for r in self.records if (m := r.written_mono) is not None)
        return round((written[-1] - written[0]) * 1000, 3) if len(written) >= 2 else None

    @property
    def server_received(self) -> list[int]:
        return sorted(n for r in self.records if (n := r.server_received_ns) is not None)

    @property
    def server_spread_ms(self) -> float | None:
        """First to last request read whole by the server, where it says so (the fixture)."""
        received = self.server_received
        return round((received[-1] - received[0]) / 1e6, 3) if len(received) >= 2 else None

    @property
    def handler_entered(self) -> list[int]:
        return sorted(n for r in self.records if (n := r.handler_entered_ns) is not None)

    @property
    def handler_spread_ms(self) -> float | None:
        """First to last request entering the handler, as the handler reported it."""
        entered = self.handler_entered
        return round((entered[-1] - entered[0]) / 1e6, 3) if len(entered) >= 2 else None

    def facts(self) -> dict[str, Any]:
        """What a try's proof records of the burst."""
        facts: dict[str, Any] = {"burst_sync": self.sync, "release_spread_ms": self.release_spread_ms}
        if (spread := self.handler_spread_ms) is not None:
            facts["handler_spread_ms"] = spread
            facts["handler_reported"] = len(self.handler_entered)
        if (server := self.server_spread_ms) is not None:
            facts["server_spread_ms"] = server
        if self.closed_half_sent:
            facts["closed_half_sent"] = self.closed_half_sent
        if self.release_priority is not None:
            facts["release_priority"] = self.release_priority
        return facts

    def describe(self) -> str:
        """One line for the evidence: how released, and the spreads measured."""
        parts = [f"released {self.sync}"]
        if self.release_spread_ms is not None:
            parts.append(f"sender spread {self.release_spread_ms:.3f} ms")
        if self.server_spread_ms is not None:
            parts.append(f"server spread {self.server_spread_ms:.3f} ms")
        if self.handler_spread_ms is not None:
            parts.append(f"handler arrival spread {self.handler_spread_ms:.3f} ms")
        return ", ".join(parts)


def effective_sync(sync: str, *, socket: bool) -> str:
    """The release a burst gets: a synchronised one needs a real socket to the target."""
    return sync if socket else "none"


async def send_burst(
    trial: TrialContext, prepared: Sequence[tuple[httpx.Request, DeliveryRecord]], sync: str
) -> Burst:
    """Send `prepared` (built and signed by the trial) as one burst released the `sync` way."""
    lab = trial.lab
    sync = effective_sync(sync, socket=lab.endpoint.socket)
    records = tuple(record for _, record in prepared)
    if sync == "none":
        await _naive(trial, prepared)
        return Burst(records, sync)
    requests = [request for request, _ in prepared]
    armed: Armed
    try:
        if sync == "single-packet":
            h2 = _h2()
            try:
                armed = await h2.H2Burst.arm(_one_origin(requests), requests, timeout_s=lab.horizon_s)
            except h2.NotHttp2 as exc:
                raise Http2Refused(_refusal(lab.target, str(exc))) from exc
        else:
            armed = await H1Burst.arm(requests, timeout_s=lab.horizon_s)
    except httpx.TransportError as exc:
        # Nothing was armed (HTTP/2: the one connection failed): each delivery says why.
        armed = _Unarmed(sync, [_Failed(exc) for _ in requests])
    wires: Sequence[ArmedWire] = armed.wires
    if len(wires) != len(prepared):
        raise HarnessError(f"the burst sender armed {len(wires)} of {len(prepared)} deliveries")
    try:
        for (request, _), wire in zip(prepared, wires, strict=True):
            ticket = request.extensions[TICKET]
            if not isinstance(ticket, Ticket):
                raise TypeError(f"a burst's request carries no delivery ticket; got {type(ticket).__name__}")
            ticket.wire = wire
        tasks = [asyncio.create_task(trial.transmit(request, record)) for request, record in prepared]
        # Released only once every delivery waits in the lab's transport: its record is started.
        claims = [asyncio.ensure_future(w.claimed.wait()) for w in wires]
        _, late = await asyncio.wait(claims, timeout=CLAIM_TIMEOUT_S)
        for claim in late:
            claim.cancel()
        armed.release()
        for (_, record), wire in zip(prepared, wires, strict=True):
            record.written_mono = wire.released_mono
        await asyncio.gather(*tasks)
    except BaseException:
        await armed.aclose()
        raise
    # The handler side of each delivery may still be reading its answer (the sender gave up
    # first): those wires close themselves. One the transport never asked for closes here.
    await asyncio.gather(*(w.aclose() for w in wires if not w.claimed.is_set()))
    return Burst(records, sync, armed.closed_half_sent, armed.release_priority)


async def _naive(trial: TrialContext, prepared: Sequence[tuple[httpx.Request, DeliveryRecord]]) -> None:
    """N tasks parked on one event, released in the same loop iteration (each connects after)."""
    release = asyncio.Event()

    async def one(request: httpx.Request, record: DeliveryRecord) -> None:
        await release.wait()
        await trial.transmit(request, record)

    tasks = [asyncio.create_task(one(request, record)) for request, record in prepared]
    await asyncio.sleep(0)  # every task is now parked on the event
    release.set()
    await asyncio.gather(*tasks)


def _one_origin(requests: Sequence[httpx.Request]) -> httpx.URL:
    """The one origin every request of a single-packet burst goes to (streams of one connection)."""
    origins = {(r.url.scheme, r.url.host, r.url.port) for r in requests}
    if len(origins) != 1:
        shown = ", ".join(sorted(f"{scheme}://{host}:{port}" for scheme, host, port in origins))
        raise HarnessError(
            f"a single-packet burst sends its requests as streams of one HTTP/2 connection, but they go to "
            f"{len(origins)} origins ({shown}); use --burst-sync last-byte, which opens a connection per request"
        )
    return requests[0].url


class _Failed:
    """A wire that could not be armed: its delivery ends with the error."""

    def __init__(self, error: httpx.TransportError) -> None:
        self.error = error
        self.sent = asyncio.Event()
        self.claimed = asyncio.Event()
        self.released_mono: float | None = None

    async def response(self, request: httpx.Request, timeout_s: float) -> httpx.Response:
        self.claimed.set()
        raise self.error

    async def aclose(self) -> None:
        return


@dataclass
class _Unarmed:
    sync: str
    wires: Sequence[_Failed]
    closed_half_sent: int = 0
    release_priority: str | None = None

    def release(self) -> None:
        return

    async def aclose(self) -> None:
        return


def _refusal(target: Target, why: str) -> str:
    return (
        f"--burst-sync single-packet: target {target.name!r} does not speak HTTP/2 ({why}); the "
        "single-packet burst sends every request as a stream of one HTTP/2 connection (prior knowledge "
        "on http://, ALPN h2 on https://). Use --burst-sync last-byte (or burst_sync: last-byte)."
    )


def _h2() -> Any:
    """`harness.wire.burst_h2`, imported where a single-packet burst is asked for (the ``h2`` extra)."""
    require("h2", "h2", "--burst-sync single-packet (HTTP/2)")
    from acklab.harness.wire import burst_h2

    return burst_h2


async def check_burst_sync(target: Target, sync: str) -> None:
    """Refuse (exit 3) a single-packet burst against a target that does not speak HTTP/2.

    Called before anything is written, after the target's preflight (a spec's service runs)."""
    if sync != "single-packet":
        return
    if target.http2_refusal is not None:
        raise Http2Refused(_refusal(target, target.http2_refusal))
    url = httpx.URL(target.endpoint)
    why = await _h2().speaks_http2(url, PROBE_TIMEOUT_S)
    if why is not None:
        raise Http2Refused(_refusal(target, f"{why}, at {target.name}'s endpoint"))
