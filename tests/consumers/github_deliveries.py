"""A GitHub App's webhook receiver that dedupes by ``X-GitHub-Delivery`` in memory, for an hour.

GitHub never retries by itself; people redeliver failed deliveries by hand or by script, and a
redelivery keeps its ``X-GitHub-Delivery``. This receiver remembers the delivery GUIDs it saw in
the last hour (a dict pruned as it goes) and opens one check run per push: a redelivery the next
day finds nothing remembered and opens a second one.

    python -m tests.consumers.github_deliveries --port 9000 --db /tmp/checks.sqlite
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import os
import sqlite3
import threading
import time
from http.server import ThreadingHTTPServer

from tests.consumers.json_http import JsonHandler

REMEMBER_S = 3600.0


class Handler(JsonHandler):
    db_path = ""
    secret = b""
    seen: dict[str, float] = {}
    lock = threading.Lock()

    def do_POST(self) -> None:
        payload = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        expected = "sha256=" + hmac.new(self.secret, payload, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, self.headers.get("X-Hub-Signature-256", "")):
            self.answer(401, {"error": "bad signature"})
            return
        if self.headers.get("X-GitHub-Event") != "push":
            self.answer(202, {"ignored": self.headers.get("X-GitHub-Event")})
            return
        delivery = self.headers.get("X-GitHub-Delivery", "")
        now = time.time()
        with self.lock:
            for guid, at in list(self.seen.items()):
                if now - at > REMEMBER_S:
                    del self.seen[guid]
            if delivery in self.seen:
                self.answer(200, {"duplicate": True})
                return
            self.seen[delivery] = now
        push = json.loads(payload)
        conn = sqlite3.connect(self.db_path, timeout=30)
        try:
            conn.execute(
                "INSERT INTO check_runs (delivery, head_sha) VALUES (?, ?)", (delivery, push["after"])
            )
            conn.commit()
        finally:
            conn.close()
        self.answer(201, {"check_run": "queued"})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--db", required=True, help="SQLite file")
    args = parser.parse_args()
    conn = sqlite3.connect(args.db)
    conn.execute("CREATE TABLE IF NOT EXISTS check_runs (delivery TEXT NOT NULL, head_sha TEXT NOT NULL)")
    conn.commit()
    conn.close()
    Handler.db_path, Handler.secret = args.db, os.environ["ACKLAB_TEST_GITHUB_SECRET"].encode()
    ThreadingHTTPServer(("127.0.0.1", args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
