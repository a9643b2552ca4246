"""State probes: what one event left behind, read back so a verdict can compare it.

``effects.sql.state`` (a query with ``:event_id`` and ``:object_id`` bound) or ``effects.http.state_path`` (a
dotted path in the effects probe's JSON answer) reads the committed state of one event —
the stored amount, the status of an order. ``expect.conflict: ignore`` needs it: a consumer
that answers 2xx to a conflicting body and keeps one row, but overwrites that row's amount,
changed the state all the same.

The state is recorded as canonical JSON text (rows or the value at the path), cut at
`STATE_CHARS`. Reads are read-only, on the same kind of connection as the effects probe's
(`harness.targets.effects.read_only_engine`), and every transaction is rolled back. Library errors become
`ProbeError` (exit 4): an unreadable state is a lab failure, never "unchanged".
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any, Protocol

import httpx
from sqlalchemy import text
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from acklab.evidence.redaction import redact
from acklab.harness.errors import ProbeError, SpecError
from acklab.harness.targets.effects import (
    OBJECT_PARAMETER,
    OBJECT_PLACEHOLDER,
    EffectsProbe,
    SqlProbe,
    fill_keys,
    keys,
    read_only_engine,
)
from acklab.harness.targets.read_engine import ReadEngine
from acklab.harness.wire.transports import tls

STATE_CHARS = 500


class StateProbe(Protocol):
    """Reads the committed state of one event (or of its object: `by_object`) as text."""

    @property
    def by_object(self) -> bool:
        """Whether the state read is the event's object's (``:object_id``)."""
        ...

    async def read(self, event_id: str, object_id: str | None = None) -> str: ...

    async def aclose(self) -> None: ...


def canonical(value: Any) -> str:
    text_value = json.dumps(value, sort_keys=True, default=str, separators=(",", ":"))
    return text_value[:STATE_CHARS]


class SqlState:
    """``effects.sql.state``: every row the query returns, on the effects probe's read-only connection."""

    def __init__(self, url: str, query: str, *, field_name: str = "effects.sql.state") -> None:
        try:
            self._url = make_url(url)
        except ArgumentError as exc:
            raise SpecError(
                "effects.sql.url: not a SQLAlchemy URL; expected e.g. sqlite:////tmp/shop.db"
            ) from exc
        self._field = field_name
        self._label = redact(self._url.render_as_string(hide_password=True))
        self._query = text(query)
        self.by_object = OBJECT_PARAMETER.search(query) is not None
        self._reads = ReadEngine(lambda: read_only_engine(self._url), self._label)

    @property
    def url(self) -> str:
        return self._url.render_as_string(hide_password=False)

    def rows(self, conn: Connection, event_id: str, object_id: str | None) -> str:
        """The state as `conn` reads it (inside the caller's transaction: `read_together`)."""
        try:
            rows = [list(row) for row in conn.execute(self._query, keys(event_id, object_id))]
        except SQLAlchemyError as exc:
            reason = redact(f"{type(exc).__name__}: {getattr(exc, 'orig', exc)}".split("\n[SQL:")[0])
            raise ProbeError(f"state query on {self._label} failed: {reason}; check {self._field}") from exc
        return canonical(rows)

    def _read(self, event_id: str, object_id: str | None) -> str:
        try:
            with self._reads.connect() as conn:
                state = self.rows(conn, event_id, object_id)
                conn.rollback()  # a read leaves nothing to keep
        except SQLAlchemyError as exc:
            reason = redact(f"{type(exc).__name__}: {getattr(exc, 'orig', exc)}".split("\n[SQL:")[0])
            raise ProbeError(f"state query on {self._label} failed: {reason}; check {self._field}") from exc
        return state

    async def read(self, event_id: str, object_id: str | None = None) -> str:
        return await asyncio.to_thread(self._read, event_id, object_id)

    async def aclose(self) -> None:
        """Close every connection, once each read in flight returned its own (`ReadEngine`)."""
        await asyncio.to_thread(self._reads.close)


class HttpState:
    """``effects.http.state_path``: the value at a dotted path of the effects probe's answer."""

    def __init__(
        self,
        url_template: str,
        path: str,
        *,
        headers: Mapping[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._template, self._path = url_template, path
        self.by_object = OBJECT_PLACEHOLDER.search(url_template) is not None
        self._client = httpx.AsyncClient(
            transport=transport or httpx.AsyncHTTPTransport(retries=0, verify=tls()),
            timeout=10.0,
            trust_env=False,
            headers=dict(headers or {}),
        )

    async def read(self, event_id: str, object_id: str | None = None) -> str:
        url = fill_keys(self._template, event_id, object_id)
        try:
            response = await self._client.get(url)
            response.raise_for_status()
            value: Any = response.json()
        except httpx.HTTPError as exc:
            raise ProbeError(f"state probe GET {url} failed: {type(exc).__name__}: {exc}") from exc
        except ValueError as exc:
            raise ProbeError(f"state probe GET {url} did not answer JSON: {exc}") from exc
        for part in self._path.split("."):
            if isinstance(value, list) and part.isdigit() and int(part) < len(value):
                value = value[int(part)]
            elif isinstance(value, dict) and part in value:
                value = value[part]
            else:
                raise ProbeError(
                    f"state probe GET {url}: no {self._path!r} in the answer; check effects.http.state_path"
                )
        return canonical(value)

    async def aclose(self) -> None:
        await self._client.aclose()


async def read_together(
    probe: EffectsProbe, state: StateProbe | None, event_id: str, object_id: str | None
) -> tuple[int, str | None]:
    """One observation of an event: its count and its state. Where both are SQL queries on one
    database they are read in one read-only transaction (one committed state: never a count
    from before a commit beside a state from after it); otherwise one after the other."""
    if state is None:
        return await probe.count(event_id, object_id), None
    if isinstance(probe, SqlProbe) and isinstance(state, SqlState) and probe.same_database(state.url):
        return await probe.count_with(event_id, object_id, lambda conn: state.rows(conn, event_id, object_id))
    return await probe.count(event_id, object_id), await state.read(event_id, object_id)
