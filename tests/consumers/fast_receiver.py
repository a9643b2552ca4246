"""A receiver that answers in about a millisecond once warm; its first requests are slow.

The first ``--cold`` requests load its caches (``--cold-ms`` each, as a lazy import or a
template cache would); after that, verification and one INSERT take about a millisecond.
A sender timeout calibrated on those first requests is far longer than a warm answer:
timeout-overlap must notice that its timeout never fired, never pass vacuously.

    python -m tests.consumers.fast_receiver --port 9000 --db /tmp/fast.sqlite
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

EFFECTS_QUERY = "SELECT count(*) FROM deliveries WHERE event_id = :event_id"


class Handler(BaseHTTPRequestHandler):
    db_path = ""
    verifier: Webhook
    cold_left = 0
    cold_s = 0.0
    lock = threading.Lock()

    def log_message(self, format: str, *args: object) -> None:
        return

    def do_POST(self) -> None:
        with Handler.lock:
            cold = Handler.cold_left > 0
            Handler.cold_left -= 1
        if cold:
            time.sleep(Handler.cold_s)
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        try:
            self.verifier.verify(body, {k.lower(): v for k, v in self.headers.items()})
        except WebhookVerificationError:
            status = 401
        else:
            conn = sqlite3.connect(self.db_path, timeout=30, isolation_level=None)
            try:
                conn.execute(
                    "INSERT OR IGNORE INTO deliveries (event_id) VALUES (?)", (self.headers["webhook-id"],)
                )
            finally:
                conn.close()
            status = 204
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--db", required=True, help="SQLite file")
    parser.add_argument("--cold", type=int, default=3)
    parser.add_argument("--cold-ms", type=int, default=80)
    args = parser.parse_args()
    conn = sqlite3.connect(args.db)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE IF NOT EXISTS deliveries (event_id TEXT PRIMARY KEY)")
    conn.close()
    Handler.db_path, Handler.cold_left, Handler.cold_s = args.db, args.cold, args.cold_ms / 1000
    Handler.verifier = Webhook(os.environ["ACKLAB_TEST_WEBHOOK_SECRET"])
    ThreadingHTTPServer(("127.0.0.1", args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
