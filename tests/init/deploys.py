"""A GitLab push consumer init has never seen, as an ASGI app object (`acklab init --app`):
every push to a branch queues one build of its checkout commit.

Its schema differs from the payments shop's: ``hook_log`` records each delivery it received
(the ``Idempotency-Key`` GitLab sends), ``builds`` holds one row per pushed commit, keyed by
``sha``; ``projects`` is reference data. It verifies GitLab's signing token (Standard
Webhooks). ``DEPLOYS_DEDUPE=none`` queues a build per delivery (a resent hook builds twice);
otherwise the idempotency key is claimed in the build's transaction.

    DEPLOYS_DB=/tmp/d.db GITLAB_WEBHOOK_SECRET=whsec_... uvicorn tests.init.deploys:app
"""

from __future__ import annotations

import json
import os
import sqlite3

from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS projects (id INTEGER PRIMARY KEY, path TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS hook_log (idempotency_key TEXT PRIMARY KEY, received TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS builds (id INTEGER PRIMARY KEY AUTOINCREMENT, sha TEXT NOT NULL, "
    "ref TEXT NOT NULL, project_path TEXT NOT NULL, state TEXT NOT NULL)",
)


def connect() -> sqlite3.Connection:
    conn = sqlite3.connect(os.environ["DEPLOYS_DB"], timeout=30, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    return conn


with connect() as _conn:
    for _statement in SCHEMA:
        _conn.execute(_statement)
    _conn.execute("INSERT OR IGNORE INTO projects VALUES (15, 'mike/diaspora')")


async def push(request: Request) -> JSONResponse:
    body = await request.body()
    headers = {k.lower(): v for k, v in request.headers.items()}
    try:
        Webhook(os.environ["GITLAB_WEBHOOK_SECRET"]).verify(body, headers)
    except WebhookVerificationError:
        return JSONResponse({"error": "bad signature"}, status_code=401)
    event = json.loads(body)
    if event.get("object_kind") != "push":
        return JSONResponse({"status": "ignored"})
    key = headers.get("idempotency-key", "")
    conn = connect()
    try:
        conn.execute("BEGIN IMMEDIATE")
        if os.environ.get("DEPLOYS_DEDUPE", "claim") == "claim":
            if conn.execute("SELECT 1 FROM hook_log WHERE idempotency_key = ?", (key,)).fetchone():
                conn.execute("ROLLBACK")
                return JSONResponse({"status": "already queued"})
            conn.execute("INSERT INTO hook_log VALUES (?, datetime('now'))", (key,))
        conn.execute(
            "INSERT INTO builds (sha, ref, project_path, state) VALUES (?, ?, ?, 'queued')",
            (event["checkout_sha"], event["ref"], event["project"]["path_with_namespace"]),
        )
        conn.execute("COMMIT")
    finally:
        conn.close()
    return JSONResponse({"status": "queued"}, status_code=202)


app = Starlette(routes=[Route("/hooks/gitlab", push, methods=["POST"])])
