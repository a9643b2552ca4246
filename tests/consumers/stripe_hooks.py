"""What the standard-library Stripe endpoints share: one process serving a mode of a handler on a
SQLite database (``--port``, ``--db``, ``--mode``), the handler's schema made before it serves."""

from __future__ import annotations

import argparse
import sqlite3
from collections.abc import Sequence
from http.server import ThreadingHTTPServer

from tests.consumers.json_http import JsonHandler


def connect(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=30, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    return conn


class ModeHandler(JsonHandler):
    """A handler whose behaviour is one of its modes, on the database at `db_path`."""

    db_path = ""
    mode = ""

    def connect(self) -> sqlite3.Connection:
        return connect(self.db_path)


def serve(handler: type[ModeHandler], *, modes: Sequence[str], schema: str) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--db", required=True)
    parser.add_argument("--mode", choices=modes, required=True)
    args = parser.parse_args()
    handler.db_path, handler.mode = args.db, args.mode
    conn = connect(args.db)
    conn.executescript(schema)
    conn.close()
    ThreadingHTTPServer(("127.0.0.1", args.port), handler).serve_forever()
