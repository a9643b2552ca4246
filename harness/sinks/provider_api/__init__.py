"""The provider's API, served by the lab (``effects.provider_api``): the third sink, beside SMTP and outbound.

Real consumers call the provider back: they fetch the object a thin event names, refund,
capture. The lab serves that API (Stripe's first: `stripe_api`) at ``{{provider_api_url}}`` for
the whole run, holding only what the run's events made (`store`): a forged event naming an
invented object gets the 404 the real API gives. Every call is recorded in the run's `Ledger`
(``kind: api``: method, path, the objects it touched and the run's events they belong to, the
idempotency key, what answered it) and is in the bundle as ``sinks/provider_api.json``.

Experiments make it misbehave for one event's objects (`arm`: `faults`) and hear the provider's
own webhooks about a call while that call is open (`echoing`). A call that changed the
provider's state (a refund made, a payment captured; never an idempotent replay) is a
downstream effect of the events it touched: counted with the ``calls`` source.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from acklab.evidence.clock import utcnow
from acklab.evidence.extras import require
from acklab.harness.errors import SpecError
from acklab.harness.sinks.base import SinkKind
from acklab.harness.sinks.provider_api.faults import ApiFault, Armed, Faults, Unavailable
from acklab.harness.sinks.provider_api.store import Idempotency, ObjectStore
from acklab.harness.sinks.provider_api.stripe_api import Answer, Echo, Request, StripeApi
from acklab.harness.sinks.records import Ledger, SinkRecord, digest, excerpt_of, now_mono, redacted_headers
from acklab.harness.sinks.serving import ThreadedServer
from acklab.harness.specs.target import ProviderApiEffects
from acklab.harness.wire.providers import PROVIDERS as WIRE_PROVIDERS

__all__ = ["ApiFault", "Echo", "ProviderApi", "ProviderApiConfig"]
NAME = "provider_api"
# The providers whose API the lab serves: those whose record names the version it speaks.
PROVIDERS = tuple(name for name, record in WIRE_PROVIDERS.items() if record.api_version is not None)
ECHO_TIMEOUT_S = 120.0
# Delivers one event the provider sends back (on the lab's loop, the caller's of `echoing`).
EchoSender = Callable[
    [Echo], Coroutine[Any, Any, None]
]  # bounded: a consumer that never answers the echo cannot hold the call forever


@dataclass(frozen=True)
class ProviderApiConfig:
    """``effects.provider_api``: which provider's API, and where it listens."""

    host: str
    port: int
    provider: str = "stripe"


class ProviderApi:
    """The provider's API on uvicorn, in a thread of its own, for the whole run."""

    def __init__(self, config: ProviderApiConfig, ledger: Ledger) -> None:
        self.config, self.ledger = config, ledger
        self.store, self.faults, self.idempotency = ObjectStore(), Faults(), Idempotency()
        self._echo: tuple[EchoSender, asyncio.AbstractEventLoop] | None = None
        self.app = StripeApi(
            self.store,
            self.faults,
            self.idempotency,
            record=self._record,
            echo=self._echoed,
            max_bytes=ledger.limits.max_bytes,
        )
        self._server: ThreadedServer | None = None

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``: what ``{{provider_api_url}}`` is (the stripe library's ``api_base``)."""
        return f"http://{self.config.host}:{self.config.port}"

    def start(self) -> None:
        require("sinks", "starlette", "effects.provider_api (the provider's API)")
        self._server = ThreadedServer(
            self.app,
            self.config.host,
            self.config.port,
            name="provider_api",
            placeholder="{{provider_api_url}}",
        )
        self._server.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
        self._server = None

    # -- what the provider sent ------------------------------------------------------------

    def emit(self, event_id: str, document: Mapping[str, object], *, created: int) -> tuple[str, ...]:
        """The provider sent (or emitted) this event: its objects exist from now on, in this version."""
        return self.store.emit(event_id, document, created=created)

    # -- faults ----------------------------------------------------------------------------

    def arm(self, event_id: str, fault: ApiFault) -> Armed:
        """Make the API answer calls on `event_id`'s objects with `fault` until `disarm`."""
        touched = self.store.objects_of(event_id)
        made = frozenset(o for o in touched if self.store.created_by(o) == event_id)
        armed = Armed(event_id, fault, made, frozenset(touched))
        self.faults.arm(armed)
        return armed

    def disarm(self, event_id: str) -> None:
        self.faults.disarm(event_id)

    def calls(self) -> list[SinkRecord]:
        """Every call the API answered, as kept in the records."""
        return self.ledger.records(NAME)

    def served(self, event_id: str) -> list[SinkRecord]:
        """The calls a fault armed for `event_id` answered."""
        return [r for r in self.calls() if r.served is not None and r.served_for == event_id]

    # -- echoes ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def echoing(self, send: EchoSender) -> Iterator[None]:
        """While inside, every event a call makes is handed to `send` (run on the caller's loop) before
        the call is answered."""
        self._echo = (send, asyncio.get_running_loop())
        try:
            yield
        finally:
            self._echo = None

    async def _echoed(self, echo: Echo) -> bool:
        hook = self._echo
        if hook is None:
            return False
        send, loop = hook
        done = asyncio.run_coroutine_threadsafe(send(echo), loop)
        with contextlib.suppress(TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(asyncio.wrap_future(done), ECHO_TIMEOUT_S)
        return True

    # -- records ---------------------------------------------------------------------------

    def _events_of(self, objects: tuple[str, ...]) -> tuple[str, ...]:
        """The run's events the objects belong to (the event itself, for ``/v1/events/{id}``)."""
        found: list[str] = []
        for object_id in objects:
            for event_id in (object_id, *self.store.events_about(object_id)):
                if event_id not in found and self.ledger.keys_of(event_id) is not None:
                    found.append(event_id)
        return tuple(found)

    def _record(self, request: Request, raw: bytes, answer: Answer) -> None:
        method, path, query, headers = request.method, request.path, request.query, request.headers
        events = self._events_of(answer.objects)
        self.ledger.keep(
            SinkRecord(
                kind="api",
                sink=NAME,
                seq=self.ledger.next_seq(NAME),
                at=utcnow(),
                at_mono=now_mono(),
                events=events,
                headers=redacted_headers(headers.items(), keep=frozenset({"idempotency-key"})),
                excerpt=excerpt_of(raw if method == "POST" else query.encode()),
                sha256=digest(raw),
                size=len(raw),
                capped=False,
                rows_at_arrival=self.ledger.rows_at(events),
                method=method,
                path=(path + (f"?{query}" if query else ""))[:500],
                status=answer.status,
                idempotency_key=(headers.get("idempotency-key") or None) if method == "POST" else None,
                objects=answer.objects,
                served=answer.served.fault.name if answer.served is not None else None,
                served_for=answer.served.event_id if answer.served is not None else None,
                effect=answer.effect and 200 <= answer.status < 300 and not answer.replayed,
                replayed=answer.replayed,
                echoed=answer.echoed,
            )
        )


def _config(section: ProviderApiEffects, host: str, port: int) -> ProviderApiConfig:
    if section.provider not in PROVIDERS:
        raise SpecError(
            f"effects.provider_api.provider: got {section.provider!r}; expected one of {', '.join(PROVIDERS)} "
            "(the providers whose API the lab serves)"
        )
    return ProviderApiConfig(host, port, section.provider)


SINK = SinkKind(
    name=NAME,
    order=30,
    record="api",
    config=_config,
    server=ProviderApi,
    verb="made",
    what="effects downstream",
    emit=lambda api, event_id, document, created: api.emit(event_id, document, created=created),
    fail=lambda api, event_id: api.arm(event_id, Unavailable()),
    recover=lambda api, event_id: api.disarm(event_id),
)
