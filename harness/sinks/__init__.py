"""Sinks: real servers the lab runs on loopback for the whole run, counting effects the world sees.

A consumer's duplicates are often outside its database: two receipt emails, two refunds sent
to the payment provider. ``effects.smtp`` runs an SMTP server (aiosmtpd, `smtp`) where the
consumer's mail settings point; ``effects.outbound`` a fake of the downstream API it calls
(Starlette on uvicorn, `outbound`); ``effects.provider_api`` the provider's own API, which the
consumer fetches from and refunds through (`provider_api`, docs/provider-api.md). All record into
one `Ledger`: each message or call with the events it matched, and each matched event's database
effects read the moment it arrived (so an email sent before the commit is told from one sent
after it). `Sinks.fail` makes every sink refuse one event's effects (effect-failure).

`Sinks.tally` is what a trial observes of one event beside its rows: emails, calls (one per
idempotency key: the downstream's dedupe makes calls with one key one effect; ``GET`` and
``HEAD`` are reads, never effects; a change the provider's API executed is one), the keys, and how
many of them arrived while the event had no committed row — from the ledger's per-event counts,
which no cap drops. A message or call matches an event by what its reader reads (`reading`: MIME
and JSON decoded, whole identifiers only). `Sinks.documents` is the bundle's ``sinks/*.json``.

Each sink is one module here whose ``SINK`` (`base.SinkKind`) declares it; `SINKS` finds them, in
their order. Nothing outside this package names a sink but its section of the spec: a new one is
its module, its section (`harness.specs.target.SinkSection`, with its ``expect.max_<source>``
unless it shares a source), its count in the trial's observations
(`evidence.documents.records.Observation`) and the schemas of both (docs/sinks.md, "Adding a sink").
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from acklab.evidence.documents.base import problems_of
from acklab.harness.errors import SpecError
from acklab.harness.ports import free_port
from acklab.harness.sinks.base import Server, SinkKind
from acklab.harness.sinks.provider_api import ProviderApi
from acklab.harness.sinks.records import (
    REFUSALS,
    EventKeys,
    FailureMode,
    Ledger,
    RowsNow,
    SinkLimits,
    SinkRecord,
)
from acklab.harness.specs.target import SINK_SECTIONS, Effects, SinkSection

__all__ = ["SINKS", "EventKeys", "SinkKind", "SinkLimits", "SinkRecord", "SinkTally", "Sinks", "sink_configs"]


def _discover() -> dict[str, SinkKind]:
    found: list[SinkKind] = []
    for module in pkgutil.iter_modules(__path__):
        kind = getattr(importlib.import_module(f"{__name__}.{module.name}"), "SINK", None)
        if isinstance(kind, SinkKind):
            if kind.name not in SINK_SECTIONS:
                raise ImportError(
                    f"{__name__}.{module.name}: no effects.{kind.name} section in the target spec"
                )
            found.append(kind)
    return {kind.name: kind for kind in sorted(found, key=lambda k: (k.order, k.name))}


# Every sink, by name (effects.<name>), in its order.
SINKS: Mapping[str, SinkKind] = _discover()


@dataclass(frozen=True)
class SinkTally:
    """One event's effects in the sinks, now."""

    counts: Mapping[str, int]  # by source (emails, calls), for the sinks run: effects (one per key)
    keys: tuple[str | None, ...] | None  # a keyed sink's first calls' keys (None: no key is judged)
    before_commit: int  # effects that arrived while the event had no row
    received: int  # every message and effect call, keyed or not

    def total(self) -> tuple[int, ...]:
        """Everything counted, as one value: it stops changing once the sinks settle."""
        return (self.received, self.before_commit, *self.counts.values())


def _free() -> str:
    return f"127.0.0.1:{free_port()}"


def _listen(value: str, kind: SinkKind) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    if host not in ("127.0.0.1", "localhost", "::1", "[::1]") or not port.isdigit():
        raise SpecError(
            f"effects.{kind.name}.listen: got {value!r}; expected a loopback address and port, e.g. "
            f'"127.0.0.1:{{{{{kind.placeholder}}}}}" (the sinks bind loopback only)'
        )
    return host.strip("[]"), int(port)


def sink_configs(
    effects: Effects | Mapping[str, SinkSection], values: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The sinks of a spec's ``effects:`` (run placeholders filled), each as its server runs it; one
    without an address of its own is served where `values` (the run placeholders) put it."""
    sections = effects.sinks if isinstance(effects, Effects) else effects
    configs = {}
    for name, section in sections.items():
        kind = SINKS[name]
        address = section.address or (values or {}).get(kind.placeholder, "").removeprefix("http://")
        if not address:
            raise SpecError(
                f"effects.{name}: no listen and no {{{{{kind.placeholder}}}}} for this service; the lab picks the "
                "port when the spec is served (leave listen out), or write listen: 127.0.0.1:PORT"
            )
        configs[name] = kind.config(section, *_listen(address, kind))
    return configs


def _section(model: type[SinkSection], doc: Mapping[str, Any], field_name: str) -> SinkSection:
    try:
        return model.model_validate(dict(doc))
    except ValidationError as exc:
        found = problems_of(exc)
        raise SpecError(f"{field_name}: {found[0] if found else exc}") from None


class Sinks:
    """The run's sinks (any of `SINKS`), started once and stopped after the final re-read.

    A target spec's are started by the lab (`SpecTarget.start_sinks`); an app attacked in the
    test's process gets them from ``webhook_lab.sinks(...)`` (`for_test`) before it is built."""

    @classmethod
    def for_test(cls, **wanted: bool | Mapping[str, Any] | None) -> Sinks:
        """Started sinks on free loopback ports, by name, as a spec's sections say them:
        ``smtp=True`` (or ``{"match": ...}``), ``outbound={"routes": [...], "idempotency_header":
        ...}``, ``provider_api={"provider": "stripe"}`` (a false or None one is not run)."""
        sections = {}
        for name, given in wanted.items():
            if name not in SINKS:
                raise SpecError(f"sinks: no sink {name!r}; the sinks are {', '.join(SINKS)}")
            if given or isinstance(given, Mapping):  # {} is a sink with its defaults
                doc = {**(given if isinstance(given, Mapping) else {}), "listen": _free()}
                sections[name] = _section(SINKS[name].section, doc, name)
        sinks = cls(sink_configs(sections))
        sinks.start()
        return sinks

    def __init__(
        self,
        configs: Mapping[str, Any],
        *,
        rows_now: RowsNow | None = None,
        limits: SinkLimits | None = None,
    ) -> None:
        self.ledger = Ledger(limits or SinkLimits(), rows_now)
        self.servers: dict[str, Server] = {
            name: SINKS[name].server(config, self.ledger) for name, config in configs.items()
        }
        self._keyed = next((name for name, c in configs.items() if SINKS[name].keyed(c)), None)
        self._started = False

    def port(self, name: str) -> int | None:
        """Where sink `name` listens on 127.0.0.1 (None: it is not run)."""
        server = self.servers.get(name)
        return server.config.port if server is not None else None

    def url(self, name: str) -> str | None:
        """Sink `name`'s base URL, ``http://127.0.0.1:PORT`` (None: it is not run)."""
        server = self.servers.get(name)
        if server is None:
            return None
        return f"http://{server.config.host}:{server.config.port}"

    @property
    def smtp_port(self) -> int | None:
        """Where the SMTP sink listens on 127.0.0.1 (None: no SMTP sink)."""
        return self.port("smtp")

    @property
    def outbound_url(self) -> str | None:
        """The outbound sink's base URL, ``http://127.0.0.1:PORT`` (None: no outbound sink)."""
        return self.url("outbound")

    @property
    def provider_api_url(self) -> str | None:
        """The provider's API, ``http://127.0.0.1:PORT`` (None: no effects.provider_api)."""
        return self.url("provider_api")

    @property
    def provider_api(self) -> ProviderApi | None:
        """The provider's API the lab serves (its experiments arm faults and emit objects in it)."""
        server = self.servers.get("provider_api")
        return server if isinstance(server, ProviderApi) else None

    @property
    def names(self) -> tuple[str, ...]:
        """The sinks run, by name (``effects.<name>``), in the sinks' order."""
        return tuple(name for name in SINKS if name in self.servers)

    @property
    def sources(self) -> tuple[str, ...]:
        """The sources these sinks add beside ``rows`` (``emails``, ``calls``), in the sinks' order."""
        return tuple(dict.fromkeys(kind.source for name, kind in SINKS.items() if name in self.servers))

    def start(self) -> None:
        if self._started:
            return
        try:
            for server in self.servers.values():
                server.start()
        except BaseException:
            self.stop()
            raise
        self._started = True

    def stop(self) -> None:
        for server in self.servers.values():
            server.stop()
        self._started = False

    def register(self, event_id: str, order_id: str, object_id: str) -> None:
        self.ledger.register(EventKeys(event_id, order_id, object_id or order_id))

    def emit(self, event_id: str, document: Mapping[str, Any], created: int) -> None:
        """The provider sent this event: a sink that holds the provider's objects makes them now."""
        for name, server in self.servers.items():
            if (emit := SINKS[name].emit) is not None:
                emit(server, event_id, document, created)

    def fail(self, event_id: str, how: FailureMode = "refuse") -> tuple[str, ...]:
        """Refuse `event_id`'s effects in every sink from now on (until `recover`): the SMTP server
        answers 554 (``stall``: holds its answer until `recover`, then answers 451), the outbound
        API and the provider's API 503. The sources failed."""
        self.ledger.fail(event_id, how)
        for name, server in self.servers.items():
            if (fail := SINKS[name].fail) is not None:
                fail(server, event_id)
        return self.sources

    def recover(self, event_id: str) -> None:
        self.ledger.recover(event_id)
        for name, server in self.servers.items():
            if (recover := SINKS[name].recover) is not None:
                recover(server, event_id)

    def refused(self, event_id: str) -> list[SinkRecord]:
        """The messages and calls for `event_id` a sink refused (`fail`), as kept in the records."""
        return [
            r
            for r in self.ledger.records()
            if event_id in r.events and r.served in REFUSALS and r.served_for in (None, event_id)
        ]

    def tally(self, event_id: str) -> SinkTally:
        count = self.ledger.count(event_id)
        counts: dict[str, int] = {}
        for name in SINKS:
            if name in self.servers:
                source = SINKS[name].source
                counts[source] = counts.get(source, 0) + count.of(name).effects
        return SinkTally(
            counts=counts,
            keys=count.of(self._keyed).shown_keys() if self._keyed is not None else None,
            before_commit=count.before_commit,
            received=count.received,
        )

    def unread_since(self, moment: datetime, when: str = "while this trial ran") -> str | None:
        """Why a trial cannot show all it counted: the sinks could not keep whole something that
        arrived since `moment` (`when` says when that was; None: everything since is recorded)."""
        unread = self.ledger.unread_since(moment)
        if not unread:
            return None
        dropped = sum(self.ledger.dropped.values())
        limits = self.ledger.limits
        return (
            f"the sinks could not keep {unread} message(s)/call(s) whole ({dropped} past their "
            f"{limits.max_records} records, the rest past {limits.max_bytes} bytes), the last {when}: they "
            "are counted, but sinks/*.json does not show everything the verdict rests on"
        )

    def documents(self) -> dict[str, dict[str, Any]]:
        """The bundle's ``sinks/<name>.json``: every record of each sink, and what was dropped."""
        docs: dict[str, dict[str, Any]] = {}
        for name in self.servers:
            records = self.ledger.records(name)
            docs[name] = {
                "sink": name,
                "records": [r.as_dict() for r in records],
                "capped": sum(1 for r in records if r.capped),
                "dropped": self.ledger.dropped.get(name, 0),
                "limits": {
                    "max_bytes": self.ledger.limits.max_bytes,
                    "max_records": self.ledger.limits.max_records,
                },
            }
        return docs
