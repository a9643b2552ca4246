"""A service whose health URL answers before its webhook routes exist (as a workflow engine's does
while it loads its workflows): ``POST /hooks`` is 404 for ``--routes-after`` seconds after every
start. ``GET /health`` answers 200 at once; ``POST /health`` with ``{"query": "{ ready }"}`` too
(a GraphQL-style health check). Deliveries are deduped by a unique receipt (correct).

    python -m tests.consumers.late_routes --port 9000 --db /tmp/late.sqlite --routes-after 2
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import time
from http.server import ThreadingHTTPServer

from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from tests.consumers.json_http import JsonHandler


class Handler(JsonHandler):
    db_path = ""
    routes_at = 0.0
    verifier: Webhook

    def do_GET(self) -> None:
        self.answer(200 if self.path == "/health" else 404, {"status": "ok"})

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path == "/health":
            asked = json.loads(body or b"{}").get("query") == "{ ready }"
            self.answer(200 if asked else 400, {"data": {"ready": True}} if asked else {"error": "query"})
            return
        if self.path != "/hooks" or time.monotonic() < Handler.routes_at:
            self.answer(404, {"message": f"Cannot POST {self.path}"})
            return
        try:
            self.verifier.verify(body, {k.lower(): v for k, v in self.headers.items()})
        except WebhookVerificationError:
            self.answer(401, {"error": "signature"})
            return
        conn = sqlite3.connect(self.db_path, timeout=30, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            event_id = self.headers["webhook-id"]
            if conn.execute("SELECT 1 FROM receipts WHERE event_id = ?", (event_id,)).fetchone() is None:
                conn.execute("INSERT INTO receipts (event_id) VALUES (?)", (event_id,))
                conn.execute("INSERT INTO runs (event_id) VALUES (?)", (event_id,))
            conn.execute("COMMIT")
        finally:
            conn.close()
        self.answer(200, {"message": "Workflow was started"})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--db", required=True)
    parser.add_argument("--routes-after", type=float, default=2.0)
    args = parser.parse_args()
    conn = sqlite3.connect(args.db)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE IF NOT EXISTS receipts (event_id TEXT PRIMARY KEY)")
    conn.execute("CREATE TABLE IF NOT EXISTS runs (id INTEGER PRIMARY KEY, event_id TEXT NOT NULL)")
    conn.close()
    Handler.db_path, Handler.routes_at = args.db, time.monotonic() + args.routes_after
    Handler.verifier = Webhook(os.environ["ACKLAB_TEST_WEBHOOK_SECRET"])
    ThreadingHTTPServer(("127.0.0.1", args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
