"""The outbound sink: a fake of the downstream API the consumer calls (``effects.outbound``).

An ASGI app (Starlette) served by uvicorn on loopback, in a thread of its own so a busy lab
never slows its answers. Each route says which calls it takes (``method``, ``path`` — a
template: ``/v1/subscriptions/{{object_id}}`` takes any one segment there), which events a
call is for (``match``, filled per event, looked for as a whole identifier in the path, query
and body as the API reads them — unquoted, a JSON body parsed: `reading.call_text`; by
default the path's own placeholders) and how it answers (``respond``: ``status``, ``json`` with
``{{seq}}`` and the event's placeholders filled, ``delay_s``). ``first`` answers the first call
for each event differently, so the consumer's own retries are attacked too: an error
(``status: 503``), a slow answer (``delay_s``) or ``drop: true`` — the headers are sent and the
connection is closed before the body.

Every call is recorded with its ``idempotency_header`` value. A call whose body is past
``SinkLimits.max_bytes`` is answered 413 and recorded as ``capped``; a call no route takes is
answered 404 and recorded for no event. A call for an event whose effects the lab fails on
purpose (`Ledger.fail`, effect-failure) is answered 503 and is no effect.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from acklab.evidence.clock import utcnow
from acklab.evidence.extras import require
from acklab.harness.sinks.base import SinkKind
from acklab.harness.sinks.reading import call_text
from acklab.harness.sinks.records import (
    EventKeys,
    Ledger,
    SinkRecord,
    digest,
    excerpt_of,
    now_mono,
    redacted_headers,
)
from acklab.harness.sinks.serving import ThreadedServer
from acklab.harness.specs.target import OutboundAnswer, OutboundEffects

NAME = "outbound"
_PLACEHOLDER = re.compile(r"\{\{\s*([a-z_]+)\s*\}\}")


@dataclass(frozen=True)
class Answer:
    """How a route answers: status, JSON body (templated), a delay first, or a dropped connection."""

    status: int = 200
    json: Any = None
    delay_s: float = 0.0
    drop: bool = False

    @classmethod
    def of(cls, spec: OutboundAnswer) -> Answer:
        """A route's ``respond:`` or ``first:`` of the spec."""
        return cls(status=spec.status, json=spec.json_body, delay_s=spec.delay_s, drop=spec.drop)


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    match: str | None
    respond: Answer
    first: Answer | None = None

    @property
    def pattern(self) -> re.Pattern[str]:
        parts = _PLACEHOLDER.split(self.path)
        # split() alternates literal text and placeholder names
        regex = "".join(re.escape(p) if i % 2 == 0 else "[^/]+" for i, p in enumerate(parts))
        return re.compile(f"^{regex}$")

    @property
    def needle(self) -> str | None:
        """What ties a call to an event: `match`, or the path's own placeholders."""
        if self.match is not None:
            return self.match
        return self.path if _PLACEHOLDER.search(self.path) else None


@dataclass(frozen=True)
class OutboundConfig:
    """``effects.outbound``: where the sink listens, its routes, and the idempotency header."""

    host: str
    port: int
    routes: tuple[Route, ...] = ()
    idempotency_header: str | None = None
    # How a call no route takes is answered (None: 404). `acklab init` answers every call while it
    # watches what the app calls, before any route is known.
    otherwise: Answer | None = None


def fill_json(value: Any, values: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), value)
    if isinstance(value, list):
        return [fill_json(v, values) for v in value]
    if isinstance(value, dict):
        return {k: fill_json(v, values) for k, v in value.items()}
    return value


class _Dropped(Exception):
    """Raised after the headers went out: uvicorn then closes the connection mid-response."""


@dataclass
class _App:
    config: OutboundConfig
    ledger: Ledger
    _firsts: set[tuple[int, str]] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _route(self, method: str, path: str) -> tuple[int, Route] | None:
        for index, route in enumerate(self.config.routes):
            if route.method.upper() == method.upper() and route.pattern.match(path):
                return index, route
        return None

    def _is_first(self, index: int, events: Sequence[str]) -> bool:
        keys = [(index, e) for e in events] or [(index, "")]
        with self._lock:
            fresh = [k for k in keys if k not in self._firsts]
            self._firsts.update(keys)
        return bool(fresh)

    def _answer(self, found: tuple[int, Route] | None, events: tuple[str, ...], *, refused: bool) -> Answer:
        """How a call is answered: its route's answer (its `first` for an event's first call),
        404 unrouted, 503 when effect-failure refuses the event's calls."""
        if refused:  # effect-failure: the downstream is down for this event's calls
            if found is not None and found[1].first is not None:
                self._is_first(found[0], events)  # the refused call was the event's first all the same
            return Answer(status=503, json={"error": "service unavailable"})
        if found is None:
            return self.config.otherwise or Answer(status=404)
        index, route = found
        if route.first is not None and self._is_first(index, events):
            return route.first
        return route.respond

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        from starlette.requests import Request

        if scope["type"] != "http":
            return
        request = Request(scope, receive)
        raw, capped = await _read_capped(request, self.ledger.limits.max_bytes)
        path = request.url.path
        found = self._route(request.method, path)
        events: tuple[str, ...] = ()
        if found is not None and found[1].needle is not None and not capped:
            events = self.ledger.matching(found[1].needle, call_text(path, request.url.query, raw))
        # effect-failure refuses the calls that would take effect; a read still answers
        write = request.method.upper() not in ("GET", "HEAD", "OPTIONS")
        refused = found is not None and not capped and write and self.ledger.refuses(events)
        answer = Answer(status=413) if capped else self._answer(found, events, refused=refused)
        key_header = self.config.idempotency_header
        key = request.headers.get(key_header) if key_header else None
        seq = self.ledger.next_seq(NAME)
        keep = frozenset({key_header.lower()}) if key_header else frozenset()
        self.ledger.keep(
            SinkRecord(
                kind="call",
                sink=NAME,
                seq=seq,
                at=utcnow(),
                at_mono=now_mono(),
                events=events,
                headers=redacted_headers(request.headers.items(), keep=keep),
                excerpt=excerpt_of(raw),
                sha256=digest(raw),
                size=len(raw),
                capped=capped,
                rows_at_arrival=self.ledger.rows_at(events),
                method=request.method,
                path=path[:500],
                route=None if found is None else found[0],
                status=None if answer.drop else answer.status,
                idempotency_key=key[:200] if key is not None else None,
                served="unavailable" if refused else None,
            )
        )
        await self._send(answer, seq=seq, events=events, scope=scope, receive=receive, send=send)

    async def _send(
        self,
        answer: Answer,
        *,
        seq: int,
        events: tuple[str, ...],
        scope: dict[str, Any],
        receive: Any,
        send: Any,
    ) -> None:
        """The answer, after its delay; its placeholders filled for the call's first event."""
        from starlette.responses import JSONResponse, Response

        if answer.delay_s:
            await asyncio.sleep(answer.delay_s)
        if answer.drop:
            await send(
                {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"64")]}
            )
            raise _Dropped
        keys = self.ledger.keys_of(events[0]) if events else None
        values = {"seq": str(seq)}
        if keys is not None:
            values |= {"event_id": keys.event_id, "order_id": keys.order_id, "object_id": keys.object_id}
        response = (
            Response(status_code=answer.status)
            if answer.json is None
            else JSONResponse(fill_json(answer.json, values), status_code=answer.status)
        )
        await response(scope, receive, send)


async def _read_capped(request: Any, limit: int) -> tuple[bytes, bool]:
    """The call's body up to `limit` bytes, and whether it was longer."""
    body = bytearray()
    async for chunk in request.stream():
        if len(body) + len(chunk) > limit:
            return bytes(body), True
        body += chunk
    return bytes(body), False


class OutboundSink:
    """The outbound app on uvicorn, in a thread; `start` returns once it accepts connections."""

    def __init__(self, config: OutboundConfig, ledger: Ledger) -> None:
        self.config, self.ledger = config, ledger
        self._server: ThreadedServer | None = None

    def start(self) -> None:
        require("sinks", "starlette", "effects.outbound (the outbound API sink)")
        self._server = ThreadedServer(
            _App(self.config, self.ledger),
            self.config.host,
            self.config.port,
            name="outbound",
            placeholder="{{outbound_port}}",
        )
        self._server.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
        self._server = None


def keys_for(event_id: str, order_id: str, object_id: str) -> EventKeys:
    return EventKeys(event_id=event_id, order_id=order_id, object_id=object_id)


def _config(section: OutboundEffects, host: str, port: int) -> OutboundConfig:
    routes = tuple(
        Route(
            method=r.method.upper(),
            path=r.path,
            match=r.match,
            respond=Answer.of(r.respond),
            first=Answer.of(r.first) if r.first is not None else None,
        )
        for r in section.routes
    )
    return OutboundConfig(host, port, routes, section.idempotency_header or None)


SINK = SinkKind(
    name=NAME,
    order=20,
    record="call",
    config=_config,
    server=OutboundSink,
    verb="made",
    what="effects downstream",
    carries_keys=True,
    keyed=lambda config: config.idempotency_header is not None,
    silent=(
        "the outbound API sink saw no call while the database gained rows for {events} event(s); is the "
        "app's API base URL pointed at it (http://127.0.0.1:{{{{outbound_port}}}} in the variable it "
        "reads)? — no call was judged"
    ),
    unmatched=(
        "the outbound API sink received {heard} call(s), none naming an event of the run; check the "
        "routes' match, so calls are counted"
    ),
)
