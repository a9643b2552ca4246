"""A fast WSGI ledger for gunicorn with several workers, counted over its own HTTP endpoint.

It answers in about a millisecond after its commit: faster than any probe can see the commit,
so a crash aimed "after the commit, before the answer" needs the lab to hold the answer back.
``GET /ledger/<event_id>`` counts an event's entries (the effects probe, served by the same
workers). How it dedupes is the mode:

* ``durable``: a unique receipt in the same transaction as the entry; a retry is acknowledged.
* ``memory-set``: each worker keeps the ids it has seen in a Python set — lost with the process,
  and not shared between workers.

    ACKLAB_TEST_DB_PATH=/tmp/ledger.sqlite ACKLAB_TEST_LEDGER_MODE=durable ACKLAB_TEST_WEBHOOK_SECRET=... \\
        python -m gunicorn --workers 2 --bind 127.0.0.1:9000 'tests.consumers.fast_ledger:create_app()'
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable, Iterable
from typing import Any

from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

StartResponse = Callable[[str, list[tuple[str, str]]], Any]


def create_app() -> Callable[[dict[str, Any], StartResponse], Iterable[bytes]]:
    path, mode = os.environ["ACKLAB_TEST_DB_PATH"], os.environ["ACKLAB_TEST_LEDGER_MODE"]
    conn = sqlite3.connect(path, timeout=30)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE IF NOT EXISTS receipts (event_id TEXT PRIMARY KEY)")
    conn.execute("CREATE TABLE IF NOT EXISTS entries (id INTEGER PRIMARY KEY, event_id TEXT NOT NULL)")
    conn.commit()
    conn.close()
    verifier = Webhook(os.environ["ACKLAB_TEST_WEBHOOK_SECRET"])
    seen: set[str] = set()

    def answer(start_response: StartResponse, status: str, doc: object) -> list[bytes]:
        body = json.dumps(doc).encode()
        start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
        return [body]

    def record(event_id: str) -> None:
        db = sqlite3.connect(path, timeout=30, isolation_level=None)
        try:
            db.execute("BEGIN IMMEDIATE")
            if mode == "durable":
                if db.execute("SELECT 1 FROM receipts WHERE event_id = ?", (event_id,)).fetchone():
                    db.execute("ROLLBACK")
                    return
                db.execute("INSERT INTO receipts (event_id) VALUES (?)", (event_id,))
            db.execute("INSERT INTO entries (event_id) VALUES (?)", (event_id,))
            db.execute("COMMIT")
        finally:
            db.close()

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        route = environ["PATH_INFO"]
        if environ["REQUEST_METHOD"] == "GET" and route.startswith("/ledger/"):
            db = sqlite3.connect(path, timeout=30)
            try:
                (count,) = db.execute(
                    "SELECT count(*) FROM entries WHERE event_id = ?", (route.removeprefix("/ledger/"),)
                ).fetchone()
            finally:
                db.close()
            return answer(start_response, "200 OK", {"count": count})
        if environ["REQUEST_METHOD"] != "POST" or route != "/hooks":
            return answer(start_response, "404 Not Found", {"error": "no such route"})
        body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        headers = {k[5:].replace("_", "-").lower(): v for k, v in environ.items() if k.startswith("HTTP_")}
        try:
            verifier.verify(body, headers)
        except WebhookVerificationError:
            return answer(start_response, "401 Unauthorized", {"error": "bad signature"})
        event_id = headers["webhook-id"]
        if mode == "memory-set" and event_id in seen:
            return answer(start_response, "200 OK", {"duplicate": True})
        record(event_id)
        seen.add(event_id)
        return answer(start_response, "200 OK", {"received": True})

    return app
