"""``prepare:`` of a target spec: the object an event is about, created before the event is sent.

Real shops act only on events about objects they made themselves: a payment for an order the
shop created, a ticket it issued. The lab makes that object first, once per object, right when
a trial makes the event (before its first delivery), in one of two ways:

* ``request``: a request to the app (``method``, ``url``, ``body``, ``headers``), answered one
  of ``ok_status`` — the shop's own API, as its checkout would call it;
* ``sql``: a statement on ``effects.sql``'s database (a writable connection of the lab's), with
  ``:order_id``, ``:event_id`` and ``:object_id`` bound.

The request's placeholders (``{{order_id}}``, ``{{event_id}}``, ``{{object_id}}``) are the
event's, so the object the shop makes carries the ids the event names. A step that fails is
the lab's failure (exit 4 for the trial: error), never the handler's: its event was never sent.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from acklab.evidence.redaction import redact
from acklab.harness.errors import TargetUnreachable
from acklab.harness.specs.credentials import resolve_env
from acklab.harness.specs.service import PrepareRequest
from acklab.harness.specs.target import TargetSpec
from acklab.harness.targets.spec_checks import check_url

_PLACEHOLDER = re.compile(r"\{\{\s*(event_id|order_id|object_id)\s*\}\}")
DEFAULT_OK = (200, 201, 202, 204)
TIMEOUT_S = 10.0
ANSWER_CHARS = 300


def _fill(value: Any, values: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        return _PLACEHOLDER.sub(lambda m: values[m.group(1)], value)
    if isinstance(value, list):
        return [_fill(v, values) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v, values) for k, v in value.items()}
    return value


@dataclass
class Preparer:
    """One spec's ``prepare:``, run once per object (thread-safe: bursts make events together)."""

    request: PrepareRequest | None = None
    sql: str | None = None
    database_url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    _done: set[str] = field(default_factory=set, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def of(cls, spec: TargetSpec, sql_url: str | None, *, allow_remote: bool) -> Preparer | None:
        """The spec's ``prepare:`` (run placeholders filled), or None without one; `sql_url`: the
        database ``effects.sql`` counts in, as served (None: the spec counts over HTTP)."""
        step = spec.prepare
        if step is None:
            return None
        if step.sql is not None:
            if sql_url is None:
                from acklab.harness.errors import SpecError

                raise SpecError(
                    "prepare.sql runs on effects.sql's database, and this spec counts effects over HTTP; "
                    "prepare the object with prepare.request (the app's own API) instead"
                )
            return cls(sql=step.sql, database_url=sql_url)
        request = step.request
        if request is None:  # the schema gives one of the two
            return None
        check_url(
            _PLACEHOLDER.sub("x", request.url), field_name="prepare.request.url", allow_remote=allow_remote
        )
        headers = {
            k: resolve_env(v, field_name=f"prepare.request.headers.{k}") for k, v in request.headers.items()
        }
        return cls(request=request, headers=headers)

    def run(self, event_id: str, order_id: str, object_id: str) -> None:
        """Create the object of this event, unless it was made already."""
        with self._lock:
            if object_id in self._done:
                return
            self._done.add(object_id)
        values = {"event_id": event_id, "order_id": order_id, "object_id": object_id}
        if self.sql is not None and self.database_url is not None:
            self._run_sql(self.sql, self.database_url, values)
        elif self.request is not None:
            self._send(self.request, values)

    @staticmethod
    def _run_sql(sql: str, database_url: str, values: Mapping[str, str]) -> None:
        url = make_url(database_url)
        if url.get_backend_name() == "postgresql":
            url = url.set(drivername="postgresql+psycopg")
        engine = create_engine(url)
        try:
            with engine.begin() as conn:
                # The spec's own statement: what it prepares is its author's to say (docs/targets.md).
                wanted = {k: v for k, v in values.items() if f":{k}" in sql}
                conn.execute(text(sql), wanted)
        except SQLAlchemyError as exc:
            raise TargetUnreachable(
                f"prepare.sql could not make the object {values['object_id']} of event {values['event_id']}: "
                f"{redact(str(getattr(exc, 'orig', exc)))}; the event was not sent"
            ) from exc
        finally:
            engine.dispose()

    def _send(self, request: PrepareRequest, values: Mapping[str, str]) -> None:
        url = _fill(request.url, values)
        body = _fill(request.body, values)
        headers = {k: _fill(v, values) for k, v in self.headers.items()}
        content = json.dumps(body).encode() if body is not None else None
        if content is not None:
            headers.setdefault("Content-Type", "application/json")
        ok = request.ok_status
        method = request.method
        try:
            with httpx.Client(timeout=TIMEOUT_S, trust_env=False) as client:
                answer = client.request(method, url, content=content, headers=headers)
        except httpx.HTTPError as exc:
            raise TargetUnreachable(
                f"prepare.request {method} {redact(url)} did not answer ({type(exc).__name__}: {redact(str(exc))}); "
                f"the object {values['object_id']} was not made and its event was not sent"
            ) from exc
        if answer.status_code not in ok:
            raise TargetUnreachable(
                f"prepare.request {method} {redact(url)} answered {answer.status_code} (expected one of "
                f"{list(ok)}): {redact(answer.text[:ANSWER_CHARS])!r}; the object {values['object_id']} was not "
                "made and its event was not sent"
            )
