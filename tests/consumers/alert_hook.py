"""An Alertmanager webhook receiver: unsigned, one incident per alert group, counted over HTTP.

Alertmanager signs nothing. It sends a group's notification again on every repeat interval
and when the group changes; this receiver opens one incident per ``groupKey`` and answers
2xx to a notification of a group it already has (whatever its body now says), like most
paging bridges. ``GET /alerts?resource=<groupKey>`` counts the incidents of a group and shows
the first notification's status.

    python -m tests.consumers.alert_hook --port 9000 --db /tmp/alerts.sqlite
"""

from __future__ import annotations

import argparse
import json
import sqlite3
from http.server import ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from tests.consumers.json_http import JsonHandler


class Handler(JsonHandler):
    db_path = ""

    def connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.db_path, timeout=30, isolation_level=None)

    def do_POST(self) -> None:
        if urlsplit(self.path).path != "/alertmanager":
            self.answer(404, {"error": "no such route"})
            return
        notification = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        conn = self.connect()
        try:
            conn.execute(
                "INSERT OR IGNORE INTO incidents (group_key, status) VALUES (?, ?)",
                (notification["groupKey"], notification["status"]),
            )
        finally:
            conn.close()
        self.answer(200, {"status": "ok"})

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        if parts.path != "/alerts":
            self.answer(404, {"error": "no such route"})
            return
        group = parse_qs(parts.query).get("resource", [""])[0]
        conn = self.connect()
        try:
            rows = conn.execute("SELECT status FROM incidents WHERE group_key = ?", (group,)).fetchall()
        finally:
            conn.close()
        self.answer(200, {"total": len(rows), "first": {"status": rows[0][0] if rows else None}})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--db", required=True, help="SQLite file")
    args = parser.parse_args()
    conn = sqlite3.connect(args.db)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(
        "CREATE TABLE IF NOT EXISTS incidents (id INTEGER PRIMARY KEY, group_key TEXT UNIQUE, status TEXT)"
    )
    conn.close()
    Handler.db_path = args.db
    ThreadingHTTPServer(("127.0.0.1", args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
