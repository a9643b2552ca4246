"""A hostile shop for `acklab init`: the standard library's ``http.server`` and ``sqlite3``.

It verifies Standard Webhooks signatures and records each event once in ``orders`` (keyed by
the event id), and when each new order came in an audit table whose name it takes from its
tenant's settings (`audit_table`) — anything a tenant typed, newlines included. It may answer every
delivery with `answer_bytes` of report (streamed, never held), as a service in debug mode
answers with a page of its own. Its database may hold a large table of blobs (`big_table`).

Served in a thread of the test's process (`Shop`), so a test can run init in a subprocess
against it and measure what init held.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

CHUNK = 1 << 20


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def create(db: Path, audit_table: str) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS orders (event_id TEXT PRIMARY KEY, email TEXT NOT NULL)")
        conn.execute(f"CREATE TABLE IF NOT EXISTS {quote(audit_table)} (n INTEGER PRIMARY KEY, at REAL)")


def big_table(db: Path, rows: int, row_bytes: int) -> None:
    """A table of `rows` blobs of `row_bytes` each (an attachments table, say)."""
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE attachments (id INTEGER PRIMARY KEY, data BLOB NOT NULL)")
        conn.execute(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?) "
            "INSERT INTO attachments (data) SELECT randomblob(?) FROM n",
            (rows, row_bytes),
        )


class Shop:
    """The shop on 127.0.0.1 (a free port), in a thread; `url` is its webhook endpoint."""

    def __init__(self, db: Path, secret: str, *, audit_table: str, answer_bytes: int = 0) -> None:
        create(db, audit_table)
        webhook = Webhook(secret)

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                return

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                try:
                    event = webhook.verify(body, dict(self.headers.items()))
                except WebhookVerificationError:
                    self.send_response(401)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                with sqlite3.connect(db, timeout=30) as conn:
                    new = conn.execute(
                        "INSERT OR IGNORE INTO orders (event_id, email) VALUES (?, ?)",
                        (event["id"], json.dumps(event.get("data", {}))[:200]),
                    ).rowcount
                    if new:
                        conn.execute(f"INSERT INTO {quote(audit_table)} (at) VALUES (?)", (time.time(),))
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(answer_bytes or 2))
                self.end_headers()
                if not answer_bytes:
                    self.wfile.write(b"ok")
                    return
                sent = 0
                chunk = b"report " * (CHUNK // 7)
                try:
                    while sent < answer_bytes:
                        part = chunk[: answer_bytes - sent]
                        self.wfile.write(part)
                        sent += len(part)
                except (BrokenPipeError, ConnectionResetError):
                    return  # the client read what it wanted and left

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/webhooks"

    @contextmanager
    def serving(self) -> Iterator[Shop]:
        thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.server.shutdown()
            self.server.server_close()
            thread.join(10)
