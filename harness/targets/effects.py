"""Effects probes: count one event's side effects, read back from the target itself.

* `SqlProbe`: a SQL query run with SQLAlchemy against the target's own database
  (``:event_id`` is bound, never interpolated).
* `HttpProbe`: a GET to an effects endpoint, the count at a dotted JSON path (the
  fixture's ``/events/{event_id}/effects`` is one).

Both turn library errors into `ProbeError` (exit 4): an unreadable count is a lab
failure, never a zero.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

import httpx
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from acklab.evidence.loading import DocumentError, Limits, parse_json
from acklab.harness.bodies import read_capped
from acklab.harness.errors import ProbeError, SpecError

# An effects endpoint answers a small JSON object; more is refused, not buffered.
PROBE_LIMITS = Limits(max_bytes=1 << 20, max_depth=32)


class EffectsProbe(Protocol):
    """Counts the side effects of one event."""

    source: str  # "sql", "http" or "fixture" (the observation's source)

    async def count(self, event_id: str) -> int: ...

    async def aclose(self) -> None: ...


def _as_count(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0 or int(value) != value:
        raise ProbeError(f"{where} gave {value!r}; expected a non-negative integer count")
    return int(value)


def safe_url(url: str) -> str:
    """The URL without its password, for messages and records."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "<unparseable URL>"


def database_kind(url: str) -> str:
    try:
        return make_url(url).get_backend_name()
    except ArgumentError:
        return "unknown"


class SqlProbe:
    """``effects.sql``: `query` with ``:event_id`` bound, on the target's database."""

    source = "sql"

    def __init__(self, url: str, query: str) -> None:
        try:
            parsed = make_url(url)
        except ArgumentError as exc:
            raise SpecError(
                f"effects.sql.url: got {url!r}; expected a SQLAlchemy URL such as sqlite:////tmp/shop.db"
            ) from exc
        if parsed.get_backend_name() == "postgresql" and parsed.drivername == "postgresql":
            parsed = parsed.set(drivername="postgresql+psycopg")  # psycopg 3 is the installed driver
        self._url = parsed
        self._query = text(query)
        self._engine: Engine | None = None

    def _count(self, event_id: str) -> int:
        if self._engine is None:
            self._engine = create_engine(self._url, pool_pre_ping=True)
        try:
            with self._engine.connect() as conn:
                value = conn.execute(self._query, {"event_id": event_id}).scalar()
        except SQLAlchemyError as exc:
            raise ProbeError(
                f"effects query on {self._url.render_as_string(hide_password=True)} failed: "
                f"{type(exc).__name__}: {getattr(exc, 'orig', exc)}; check effects.sql.url and effects.sql.count"
            ) from exc
        return _as_count(value, "effects.sql.count")

    async def count(self, event_id: str) -> int:
        return await asyncio.to_thread(self._count, event_id)

    async def aclose(self) -> None:
        if self._engine is not None:
            await asyncio.to_thread(self._engine.dispose)


class HttpProbe:
    """``effects.http``: GET `url_template` (``{{event_id}}`` filled), read `json_path`."""

    def __init__(
        self,
        url_template: str,
        json_path: str,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        source: str = "http",
    ) -> None:
        self._template, self._path, self.source = url_template, json_path, source
        # The probe has a transport of its own: it must never go through a fault.
        self._client = httpx.AsyncClient(
            transport=transport or httpx.AsyncHTTPTransport(retries=0), timeout=10.0, trust_env=False
        )

    async def count(self, event_id: str) -> int:
        url = self._template.replace("{{event_id}}", event_id)
        try:
            async with self._client.stream("GET", url) as response:
                response.raise_for_status()
                # The target answers: read it bounded, never a body it chose to make huge.
                body = await read_capped(response, PROBE_LIMITS.max_bytes)
        except httpx.HTTPError as exc:
            raise ProbeError(f"effects probe GET {url} failed: {type(exc).__name__}: {exc}") from exc
        if body.truncated:
            raise ProbeError(
                f"effects probe GET {url} answered more than {PROBE_LIMITS.describe_size()}; "
                "an effects endpoint answers a small JSON object"
            )
        try:
            value: Any = parse_json(body.data, source=f"effects probe GET {url}", limits=PROBE_LIMITS)
        except DocumentError as exc:
            raise ProbeError(f"{exc.source} did not answer readable JSON: {exc.problem}") from exc
        for part in self._path.split("."):
            if not isinstance(value, dict) or part not in value:
                raise ProbeError(
                    f"effects probe GET {url}: no {self._path!r} in the answer; check effects.http.json_path"
                )
            value = value[part]
        return _as_count(value, f"effects probe {url} at {self._path!r}")

    async def aclose(self) -> None:
        await self._client.aclose()
