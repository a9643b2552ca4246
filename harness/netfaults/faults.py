"""Faults on a TCP link, in Toxiproxy's vocabulary, as small frozen values.

A fault says *what* goes wrong; `harness.netfaults.toxics` says how the proxy does it.
Attribute names and units follow Toxiproxy's toxics so that a record reads like a
Toxiproxy toxic: ``{"type": "latency", "stream": "downstream", "attributes": {...}}``.

``stream`` is the direction a toxic acts on: ``upstream`` (client -> server),
``downstream`` (server -> client, Toxiproxy's default) or ``both``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar, Literal, TypeAlias

from .errors import FaultInvalid

Stream: TypeAlias = Literal["upstream", "downstream", "both"]
STREAMS: tuple[Stream, ...] = ("upstream", "downstream", "both")


class _Toxic:
    """Shared checks and the evidence record of every fault."""

    toxic: ClassVar[str]

    def __post_init__(self) -> None:
        for f in fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if f.name == "stream":
                if value not in STREAMS:
                    raise FaultInvalid(
                        f"{self.toxic}: got stream={value!r}; expected one of {', '.join(STREAMS)}"
                    )
            elif not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise FaultInvalid(f"{self.toxic}: got {f.name}={value!r}; expected a whole number >= 0")

    def acts_on(self, direction: Literal["upstream", "downstream"]) -> bool:
        """Whether this fault shapes the data flowing in ``direction``."""
        stream = getattr(self, "stream", "both")
        return stream in ("both", direction)

    def record(self) -> dict[str, Any]:
        """The fault as Toxiproxy would show it: type, stream, attributes."""
        attributes = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "stream"}  # type: ignore[arg-type]
        return {"type": self.toxic, "stream": getattr(self, "stream", "both"), "attributes": attributes}


@dataclass(frozen=True)
class Latency(_Toxic):
    """Delay every chunk by ``ms`` ± ``jitter`` milliseconds, in each direction it acts on."""

    toxic: ClassVar[str] = "latency"
    ms: int
    jitter: int = 0
    stream: Stream = "downstream"


@dataclass(frozen=True)
class Bandwidth(_Toxic):
    """Limit the link to ``rate`` KB/s (1 KB = 1000 bytes; 0 means no limit, as in Toxiproxy)."""

    toxic: ClassVar[str] = "bandwidth"
    rate: int
    stream: Stream = "downstream"


@dataclass(frozen=True)
class SlowClose(_Toxic):
    """Delay the close of a connection by ``delay`` milliseconds after its peer closed."""

    toxic: ClassVar[str] = "slow_close"
    delay: int
    stream: Stream = "downstream"


@dataclass(frozen=True)
class Timeout(_Toxic):
    """Blackhole: forward nothing; close a connection idle for ``timeout`` ms (0 = never).

    As in Toxiproxy, data sent while it is injected is dropped (each dropped chunk restarts
    the connection's timer), and lifting it closes the connections it held: a protocol
    that was mid-exchange would stay out of step otherwise.
    """

    toxic: ClassVar[str] = "timeout"
    timeout: int = 0
    stream: Stream = "both"


@dataclass(frozen=True)
class ResetPeer(_Toxic):
    """Reset the connection (RST, via SO_LINGER 0) when data next flows in ``stream``.

    As in Toxiproxy, the first chunk in the stream after injection is dropped, and the
    connection is reset ``timeout`` ms later. On ``downstream`` this loses an answer the
    server already gave (a COMMIT that happened but was never acknowledged); on
    ``upstream`` the request itself never arrives.
    """

    toxic: ClassVar[str] = "reset_peer"
    timeout: int = 0
    stream: Stream = "downstream"


@dataclass(frozen=True)
class Slicer(_Toxic):
    """Cut data into pieces of ``average_size`` ± ``size_variation`` bytes, ``delay`` µs apart."""

    toxic: ClassVar[str] = "slicer"
    average_size: int
    size_variation: int = 0
    delay: int = 0
    stream: Stream = "downstream"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.average_size < 1 or self.size_variation >= self.average_size:
            raise FaultInvalid(
                f"slicer: got average_size={self.average_size}, size_variation={self.size_variation}; "
                "expected average_size >= 1 and size_variation < average_size"
            )


@dataclass(frozen=True)
class LimitData(_Toxic):
    """Close the connection once ``bytes`` bytes have passed since the fault began."""

    toxic: ClassVar[str] = "limit_data"
    bytes: int
    stream: Stream = "downstream"


@dataclass(frozen=True)
class Down(_Toxic):
    """The proxy is disabled: it refuses new connections and closes existing ones."""

    toxic: ClassVar[str] = "down"


Fault: TypeAlias = Latency | Bandwidth | SlowClose | Timeout | ResetPeer | Slicer | LimitData | Down
FAULT_TYPES: dict[str, type[Fault]] = {
    cls.toxic: cls for cls in (Latency, Bandwidth, SlowClose, Timeout, ResetPeer, Slicer, LimitData, Down)
}


def fault_from_record(record: dict[str, Any]) -> Fault:
    """Rebuild a fault from its `record()` (a plan, an incident, a replay)."""
    kind = record.get("type")
    cls = FAULT_TYPES.get(str(kind))
    if cls is None:
        raise FaultInvalid(f"got fault type {kind!r}; expected one of {', '.join(sorted(FAULT_TYPES))}")
    attributes = dict(record.get("attributes", {}))
    if "stream" in {f.name for f in fields(cls)} and "stream" in record:
        attributes["stream"] = record["stream"]
    try:
        return cls(**attributes)
    except TypeError as exc:
        raise FaultInvalid(f"{kind}: got attributes {sorted(attributes)}; {exc}") from exc
