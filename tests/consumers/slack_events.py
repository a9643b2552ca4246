"""A Slack Events API app that posts a reply for each mention, verifying Slack's signature.

``--mode ignores-retries`` does not look at ``X-Slack-Retry-Num``: a retry of an event it already
answered (its acknowledgement lost, or late) posts the reply again. ``--mode dedupe`` keeps the
event_id of every reply in a unique column and acknowledges a retry without posting twice.

    python -m tests.consumers.slack_events --port 9000 --db /tmp/replies.sqlite --mode dedupe
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import os
import sqlite3
import time
from http.server import ThreadingHTTPServer

from tests.consumers.json_http import JsonHandler

TOLERANCE_S = 300


class Handler(JsonHandler):
    db_path = ""
    secret = b""
    mode = "dedupe"

    def verified(self, body: bytes) -> bool:
        stamp = self.headers.get("X-Slack-Request-Timestamp", "")
        if not stamp.isdigit() or abs(time.time() - int(stamp)) > TOLERANCE_S:
            return False
        expected = "v0=" + hmac.new(self.secret, f"v0:{stamp}:".encode() + body, hashlib.sha256).hexdigest()
        return hmac.compare_digest(expected, self.headers.get("X-Slack-Signature", ""))

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if not self.verified(body):
            self.answer(401, {"error": "bad signature"})
            return
        event = json.loads(body)
        if event.get("type") != "event_callback":
            self.answer(200, {"ignored": event.get("type")})
            return
        conn = sqlite3.connect(self.db_path, timeout=30)
        try:
            if self.mode == "dedupe":
                done = conn.execute(
                    "INSERT OR IGNORE INTO replies (event_id, channel) VALUES (?, ?)",
                    (event["event_id"], event["event"]["channel"]),
                )
            else:
                done = conn.execute(
                    "INSERT INTO replies (event_id, channel) VALUES (?, ?)",
                    (event["event_id"], event["event"]["channel"]),
                )
            conn.commit()
        finally:
            conn.close()
        self.answer(200, {"ok": True, "posted": done.rowcount == 1})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--db", required=True, help="SQLite file")
    parser.add_argument("--mode", choices=("ignores-retries", "dedupe"), required=True)
    args = parser.parse_args()
    conn = sqlite3.connect(args.db)
    unique = " UNIQUE" if args.mode == "dedupe" else ""
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS replies (event_id TEXT NOT NULL{unique}, channel TEXT NOT NULL)"
    )
    conn.commit()
    conn.close()
    Handler.db_path, Handler.mode = args.db, args.mode
    Handler.secret = os.environ["ACKLAB_TEST_SLACK_SECRET"].encode()
    ThreadingHTTPServer(("127.0.0.1", args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
