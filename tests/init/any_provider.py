"""A consumer of whichever provider ``ANY_SCHEME`` names, as an ASGI app object (`acklab init --app`).

It verifies each delivery with the fixture's own verifier of that scheme (``acklab.app.schemes``:
the fixture's list, every one a provider record's) and takes the event id from where the
provider puts it (its event-id header, else the body field its record names). Each event is
claimed in ``seen`` and makes one row of ``orders`` in the same transaction; a different body
under a claimed id is answered 409. ``ANY_DEDUPE=none`` records a row per delivery (the bug).

    ANY_SCHEME=slack ANY_SECRET=... ANY_DB=/tmp/any.db uvicorn tests.init.any_provider:app
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from acklab.app.schemes import verify
from acklab.app.signing import VerificationFailed
from acklab.harness.wire.conflicts import value_at
from acklab.harness.wire.providers import provider

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS seen (event_id TEXT PRIMARY KEY, body_sha256 TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS orders (pk INTEGER PRIMARY KEY AUTOINCREMENT, event_key TEXT NOT NULL)",
)


def connect() -> sqlite3.Connection:
    conn = sqlite3.connect(os.environ["ANY_DB"], timeout=30, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    return conn


with connect() as _conn:
    for _statement in SCHEMA:
        _conn.execute(_statement)


def event_id(headers: Any, document: Any) -> str | None:
    record = provider(os.environ["ANY_SCHEME"])
    if record.profile.event_id_header is not None:
        return headers.get(record.profile.event_id_header)
    found, value = value_at(document, record.body_event_id or "id")
    return value if found and isinstance(value, str) else None


async def hook(request: Request) -> JSONResponse:
    body = await request.body()
    try:
        verify(os.environ["ANY_SCHEME"], os.environ["ANY_SECRET"], dict(request.headers), body)
    except VerificationFailed as exc:
        return JSONResponse({"error": exc.reason}, status_code=401)
    key = event_id(request.headers, json.loads(body))
    if not key:
        return JSONResponse({"error": "no event id"}, status_code=422)
    digest = hashlib.sha256(body).hexdigest()
    conn = connect()
    try:
        conn.execute("BEGIN IMMEDIATE")
        if os.environ.get("ANY_DEDUPE", "claim") == "claim":
            known = conn.execute("SELECT body_sha256 FROM seen WHERE event_id = ?", (key,)).fetchone()
            if known is not None:
                conn.execute("ROLLBACK")
                status = 200 if known[0] == digest else 409
                return JSONResponse({"status": "duplicate"}, status_code=status)
            conn.execute("INSERT INTO seen (event_id, body_sha256) VALUES (?, ?)", (key, digest))
        conn.execute("INSERT INTO orders (event_key) VALUES (?)", (key,))
        conn.execute("COMMIT")
    finally:
        conn.close()
    return JSONResponse({"status": "processed"})


app = Starlette(routes=[Route("/hooks", hook, methods=["POST"])])
