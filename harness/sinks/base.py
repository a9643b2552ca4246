"""What one sink declares, once: a `SinkKind` (its module's ``SINK``), found by `harness.sinks.SINKS`.

A sink is a server the lab runs on loopback for the whole run (an SMTP server, a fake of an API
the consumer calls) whose messages or calls are counted per event beside the rows. Its spec side
is its section of ``effects:`` (`harness.specs.target.SinkSection`: its run placeholder, and the
source its effects are counted as: ``expect.max_<source>``, the observations' field, a violation's
``source``); its runtime side is declared here: how its section becomes a config, the server that
runs it, and the words a violation says of it. The trial, the verdicts, the bundle's
``sinks/<name>.json``, the console and the pytest plugin iterate the sinks found; none names one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from acklab.evidence.documents.records import SinkSource
from acklab.harness.sinks.records import Ledger, RecordKind
from acklab.harness.specs.target import SINK_SECTIONS, SinkSection


class Listening(Protocol):
    @property
    def host(self) -> str: ...

    @property
    def port(self) -> int: ...


class Server(Protocol):
    """One running sink: started once (returns once it accepts), stopped after the final re-read."""

    @property
    def config(self) -> Listening: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...


@dataclass(frozen=True)
class SinkKind:
    """One sink, as its module declares it (see the module docstring)."""

    name: str  # effects.<name>; sinks/<name>.json; what its records carry as `sink`
    order: int  # where it is listed
    record: RecordKind  # the shape of its records: a message (email) or a call
    # (its spec section with run placeholders filled, host, port) -> the config its server runs
    config: Callable[[Any, str, int], Any]
    server: Callable[[Any, Ledger], Server]
    # A violation's words: "{source}: N deliveries of one event {verb} {count} {what} (...){cost}"
    verb: str
    what: str
    cost: str = ""
    refusal: str = "answered the call 503"  # what it does to an event's effect it refuses (effect-failure)
    # It can also stall an event's effect: hold its answer until the event's first attempt is
    # answered, then refuse (effect-failure plays one more event where a sink of the target can).
    stalls: bool = False
    # A run's warnings (`harness.engine.notices`): it heard nothing while rows landed ({events}), or
    # heard only what named no event ({heard}, its config's {match}); None: it does not warn.
    silent: str | None = None
    unmatched: str | None = None
    # Its effects may carry an idempotency key (the observations' call_keys are its calls' keys), and
    # whether one config names the header they carry it in (without one, no key is judged).
    carries_keys: bool = False
    keyed: Callable[[Any], bool] = lambda config: False
    # What it does when the provider sends an event (makes the objects it names), when an event's
    # effects are to be refused (effect-failure) and when that ends; None: nothing of its own.
    emit: Callable[[Any, str, Mapping[str, Any], int], object] | None = None
    fail: Callable[[Any, str], object] | None = None
    recover: Callable[[Any, str], object] | None = None

    @property
    def section(self) -> type[SinkSection]:
        return SINK_SECTIONS[self.name]

    @property
    def source(self) -> SinkSource:
        """Its effects' source beside the rows (``emails``, ``calls``)."""
        return self.section.SOURCE

    @property
    def placeholder(self) -> str:
        return self.section.PLACEHOLDER
