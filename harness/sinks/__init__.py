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
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from acklab.evidence.documents.base import problems_of
from acklab.harness.errors import SpecError
from acklab.harness.ports import free_port
from acklab.harness.sinks.matching import MailMatch
from acklab.harness.sinks.outbound import Answer, OutboundConfig, OutboundSink, Route
from acklab.harness.sinks.provider_api import PROVIDERS, ProviderApi, ProviderApiConfig
from acklab.harness.sinks.provider_api.faults import Unavailable
from acklab.harness.sinks.records import (
    REFUSALS,
    EventKeys,
    FailureMode,
    Ledger,
    RowsNow,
    SinkLimits,
    SinkRecord,
)
from acklab.harness.sinks.smtp import SmtpConfig, SmtpSink
from acklab.harness.specs.target import OutboundEffects, ProviderApiEffects, Section, SmtpEffects

__all__ = [
    "EventKeys",
    "ProviderApiConfig",
    "SinkLimits",
    "SinkRecord",
    "SinkTally",
    "Sinks",
    "provider_api_config",
    "sink_configs",
]


@dataclass(frozen=True)
class SinkTally:
    """One event's effects in the sinks, now."""

    emails: int | None  # None: no SMTP sink
    calls: int | None  # None: no outbound sink; distinct idempotency keys (a keyless call is one)
    call_keys: tuple[str | None, ...]  # the first effect calls' keys, in arrival order (None: no key sent)
    before_commit: int  # emails and call effects (per key) that arrived while the event had no row
    effect_calls: int = 0  # every effect call, keyed or not

    def total(self) -> tuple[int, int, int]:
        return (self.emails or 0, self.effect_calls, self.before_commit)


def _free() -> str:
    return f"127.0.0.1:{free_port()}"


def _listen(value: str, field_name: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    if host not in ("127.0.0.1", "localhost", "::1", "[::1]") or not port.isdigit():
        raise SpecError(
            f"{field_name}: got {value!r}; expected a loopback address and port, e.g. "
            '"127.0.0.1:{{smtp_port}}" (the sinks bind loopback only)'
        )
    return host.strip("[]"), int(port)


def sink_configs(
    smtp: SmtpEffects | None, outbound: OutboundEffects | None
) -> tuple[SmtpConfig | None, OutboundConfig | None]:
    """``effects.smtp`` and ``effects.outbound`` of a spec (run placeholders filled), as the sinks run them."""
    smtp_config = outbound_config = None
    if smtp is not None:
        host, port = _listen(smtp.listen, "effects.smtp.listen")
        match = smtp.match if isinstance(smtp.match, str) else smtp.match.dump()
        MailMatch.of(match)  # a pattern that is not one: SpecError before anything listens
        smtp_config = SmtpConfig(host, port, match)
    if outbound is not None:
        host, port = _listen(outbound.listen, "effects.outbound.listen")
        routes = tuple(
            Route(
                method=r.method.upper(),
                path=r.path,
                match=r.match,
                respond=Answer.of(r.respond),
                first=Answer.of(r.first) if r.first is not None else None,
            )
            for r in outbound.routes
        )
        outbound_config = OutboundConfig(host, port, routes, outbound.idempotency_header or None)
    return smtp_config, outbound_config


def _section(model: type[Section], doc: Mapping[str, Any], field_name: str) -> Any:
    try:
        return model.model_validate(dict(doc))
    except ValidationError as exc:
        found = problems_of(exc)
        raise SpecError(f"{field_name}: {found[0] if found else exc}") from None


def provider_api_config(api: ProviderApiEffects | None, url: str | None = None) -> ProviderApiConfig | None:
    """``effects.provider_api`` of a spec (run placeholders filled): the provider's API the lab serves,
    at its ``listen``, else at `url` (``{{provider_api_url}}``)."""
    if api is None:
        return None
    listen = api.listen or (url or "").removeprefix("http://")
    if not listen:
        raise SpecError(
            "effects.provider_api: no listen and no {{provider_api_url}} for this service; the lab picks the "
            "port when the spec is served (leave listen out), or write listen: 127.0.0.1:PORT"
        )
    if api.provider not in PROVIDERS:
        raise SpecError(
            f"effects.provider_api.provider: got {api.provider!r}; expected one of {', '.join(PROVIDERS)} "
            "(the providers whose API the lab serves)"
        )
    host, port = _listen(listen, "effects.provider_api.listen")
    return ProviderApiConfig(host, port, api.provider)


class Sinks:
    """The run's sinks (either may be absent), started once and stopped after the final re-read.

    A target spec's are started by the lab (`SpecTarget.start_sinks`); an app attacked in the
    test's process gets them from ``webhook_lab.sinks(...)`` (`for_test`) before it is built."""

    @classmethod
    def for_test(
        cls,
        *,
        smtp: bool | Mapping[str, Any] = True,
        outbound: Mapping[str, Any] | None = None,
        provider_api: Mapping[str, Any] | None = None,
    ) -> Sinks:
        """Started sinks on free loopback ports: ``smtp`` (True, or ``{"match": ...}``),
        ``outbound`` (``{"routes": [...], "idempotency_header": ...}``, as a spec's) and
        ``provider_api`` (``{"provider": "stripe"}``)."""
        mail = (
            _section(SmtpEffects, {**(smtp if isinstance(smtp, Mapping) else {}), "listen": _free()}, "smtp")
            if smtp
            else None
        )
        calls = _section(OutboundEffects, {**outbound, "listen": _free()}, "outbound") if outbound else None
        api = (
            _section(ProviderApiEffects, {**provider_api, "listen": _free()}, "provider_api")
            if provider_api is not None
            else None
        )
        sinks = cls(*sink_configs(mail, calls), provider_api=provider_api_config(api))
        sinks.start()
        return sinks

    def __init__(
        self,
        smtp: SmtpConfig | None,
        outbound: OutboundConfig | None,
        *,
        provider_api: ProviderApiConfig | None = None,
        rows_now: RowsNow | None = None,
        limits: SinkLimits | None = None,
    ) -> None:
        self.ledger = Ledger(limits or SinkLimits(), rows_now)
        self.smtp = SmtpSink(smtp, self.ledger) if smtp is not None else None
        self.outbound = OutboundSink(outbound, self.ledger) if outbound is not None else None
        self.provider_api = ProviderApi(provider_api, self.ledger) if provider_api is not None else None
        self.idempotency_header = outbound.idempotency_header if outbound is not None else None
        self._started = False

    @property
    def smtp_port(self) -> int | None:
        """Where the SMTP sink listens on 127.0.0.1 (None: no SMTP sink)."""
        return self.smtp.config.port if self.smtp is not None else None

    @property
    def outbound_url(self) -> str | None:
        """The outbound sink's base URL, ``http://127.0.0.1:PORT`` (None: no outbound sink)."""
        return (
            f"http://{self.outbound.config.host}:{self.outbound.config.port}"
            if self.outbound is not None
            else None
        )

    @property
    def provider_api_url(self) -> str | None:
        """The provider's API, ``http://127.0.0.1:PORT`` (None: no effects.provider_api)."""
        return self.provider_api.url if self.provider_api is not None else None

    @property
    def sources(self) -> tuple[str, ...]:
        """The sources these sinks add beside ``rows``: ``emails``, ``calls`` (outbound, the provider's API)."""
        calls = self.outbound is not None or self.provider_api is not None
        return tuple(
            name for name, present in (("emails", self.smtp is not None), ("calls", calls)) if present
        )

    def _each(self) -> tuple[SmtpSink | OutboundSink | ProviderApi, ...]:
        return tuple(s for s in (self.smtp, self.outbound, self.provider_api) if s is not None)

    def start(self) -> None:
        if self._started:
            return
        try:
            for sink in self._each():
                sink.start()
        except BaseException:
            self.stop()
            raise
        self._started = True

    def stop(self) -> None:
        for sink in self._each():
            sink.stop()
        self._started = False

    def register(self, event_id: str, order_id: str, object_id: str) -> None:
        self.ledger.register(EventKeys(event_id, order_id, object_id or order_id))

    def emit(self, event_id: str, document: Mapping[str, Any], created: int) -> None:
        """The provider sent this event: the objects it names exist in the provider's API from now on."""
        if self.provider_api is not None:
            self.provider_api.emit(event_id, document, created=created)

    def fail(self, event_id: str, how: FailureMode = "refuse") -> tuple[str, ...]:
        """Refuse `event_id`'s effects in every sink from now on (until `recover`): the SMTP server
        answers 554 (``stall``: holds its answer until `recover`, then answers 451), the outbound
        API and the provider's API 503. The sources failed."""
        self.ledger.fail(event_id, how)
        if self.provider_api is not None:
            self.provider_api.arm(event_id, Unavailable())
        return self.sources

    def recover(self, event_id: str) -> None:
        self.ledger.recover(event_id)
        if self.provider_api is not None:
            self.provider_api.disarm(event_id)

    def refused(self, event_id: str) -> list[SinkRecord]:
        """The messages and calls for `event_id` a sink refused (`fail`), as kept in the records."""
        return [
            r
            for r in self.ledger.records()
            if event_id in r.events and r.served in REFUSALS and r.served_for in (None, event_id)
        ]

    def tally(self, event_id: str) -> SinkTally:
        count = self.ledger.count(event_id)
        counts_calls = self.outbound is not None or self.provider_api is not None
        return SinkTally(
            emails=count.emails if self.smtp is not None else None,
            calls=count.call_effects if counts_calls else None,
            call_keys=count.shown_keys(),
            before_commit=count.before_commit,
            effect_calls=count.calls + count.executed,
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
        named = (
            ("smtp", "email", self.smtp),
            ("outbound", "call", self.outbound),
            ("provider_api", "api", self.provider_api),
        )
        for name, kind, sink in named:
            if sink is None:
                continue
            records = self.ledger.records(kind)  # type: ignore[arg-type]
            docs[name] = {
                "sink": name,
                "records": [r.as_dict() for r in records],
                "capped": sum(1 for r in records if r.capped),
                "dropped": self.ledger.dropped[kind],  # type: ignore[index]
                "limits": {
                    "max_bytes": self.ledger.limits.max_bytes,
                    "max_records": self.ledger.limits.max_records,
                },
            }
        return docs
