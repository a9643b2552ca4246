"""How the proxy carries out each fault: on the data passing through, and on the connection.

Two seams, one per kind of effect:

- `shape(fault, chunk, pipe)` forwards one chunk read in one direction (or withholds it);
- `hold(fault, link)` acts on a whole connection while the fault lasts (close, reset),
  started for every connection open when the fault is injected and for every new one.

Semantics follow Toxiproxy's toxics (github.com/Shopify/toxiproxy, ``toxics/*.go``).
"""

from __future__ import annotations

import asyncio
import random
from typing import Literal, Protocol

from .faults import Bandwidth, Down, Fault, Latency, LimitData, ResetPeer, Slicer, SlowClose, Timeout

Direction = Literal["upstream", "downstream"]


class Pipe(Protocol):
    """One direction of one proxied connection, as a toxic sees it."""

    direction: Direction
    rng: random.Random

    async def write(self, data: bytes) -> None:
        """Send ``data`` on to the other side and wait until it is flushed."""

    def passed(self) -> int:
        """Bytes forwarded in this direction since the current fault began."""

    def dropped(self) -> None:
        """Note that a chunk was withheld (it restarts a blackhole's timer)."""

    def close(self, why: str) -> None:
        """Close the whole connection (FIN on both sides)."""

    def reset(self, why: str) -> None:
        """Reset the whole connection (RST on both sides)."""


class Link(Protocol):
    """A whole proxied connection, as a fault held on it sees it."""

    def idle_s(self) -> float:
        """Seconds since the fault began on this connection or last withheld a chunk."""

    def close(self, why: str) -> None:
        """Close both sides with FIN."""

    def reset(self, why: str) -> None:
        """Reset both sides with RST."""


async def shape(fault: Fault, chunk: bytes, pipe: Pipe) -> None:
    """Forward ``chunk`` through ``fault`` (which acts on this pipe's direction)."""
    match fault:
        case Timeout():
            pipe.dropped()  # a blackhole drops what it is sent, as Toxiproxy's timeout toxic does
        case ResetPeer(timeout=ms):
            await asyncio.sleep(ms / 1000)
            pipe.reset(f"reset_peer ({pipe.direction}): {len(chunk)} bytes dropped, reset after {ms} ms")
        case LimitData(bytes=limit):
            room = max(limit - pipe.passed(), 0)
            if room:
                await pipe.write(chunk[:room])
            if len(chunk) >= room:
                pipe.close(f"limit_data: {limit} bytes passed")
        case Bandwidth(rate=rate) if rate > 0:
            # A tenth of a second's worth at a time, so a large chunk trickles rather than stalls.
            step = max(rate * 100, 1)
            for start in range(0, len(chunk), step):
                piece = chunk[start : start + step]
                await asyncio.sleep(len(piece) / (rate * 1000))
                await pipe.write(piece)
        case Slicer(average_size=size, size_variation=variation, delay=delay_us):
            start = 0
            while start < len(chunk):
                width = size + pipe.rng.randint(-variation, variation)
                await pipe.write(chunk[start : start + width])
                start += width
                if start < len(chunk) and delay_us:
                    await asyncio.sleep(delay_us / 1e6)
        case Latency():
            await asyncio.sleep(latency_s(fault, pipe.rng))
            await pipe.write(chunk)
        case _:
            await pipe.write(chunk)


def latency_s(fault: Latency, rng: random.Random) -> float:
    """The delay of one chunk under a latency fault: ms ± jitter, never below zero."""
    jitter = rng.uniform(-fault.jitter, fault.jitter) if fault.jitter else 0.0
    return max(fault.ms + jitter, 0.0) / 1000


def close_delay_s(fault: Fault | None, direction: Direction) -> float:
    """How long to hold a close that arrived in ``direction`` (slow_close), in seconds."""
    if isinstance(fault, SlowClose) and fault.acts_on(direction):
        return fault.delay / 1000
    return 0.0


def holds(fault: Fault) -> bool:
    """Whether ``fault`` acts on whole connections (and so needs `hold`)."""
    return isinstance(fault, Down) or (isinstance(fault, Timeout) and fault.timeout > 0)


async def hold(fault: Fault, link: Link) -> None:
    """Act on one connection for as long as ``fault`` lasts (cancelled when it is lifted)."""
    match fault:
        case Down():
            link.close("down: the proxy is disabled")
        case Timeout(timeout=ms) if ms > 0:
            while (left := ms / 1000 - link.idle_s()) > 0:
                await asyncio.sleep(left)
            link.close(f"timeout: closed after {ms} ms without passing data")
        case _:
            return


def closes_on_lift(fault: Fault) -> bool:
    """Whether lifting ``fault`` closes the connections it held (Toxiproxy's timeout Cleanup)."""
    return isinstance(fault, Timeout)
