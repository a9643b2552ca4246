"""What the standard-library consumers share: a quiet request handler that answers JSON."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler


class JsonHandler(BaseHTTPRequestHandler):
    """A request handler that logs nothing and answers a JSON document with its length."""

    def log_message(self, format: str, *args: object) -> None:
        return

    def answer(self, status: int, doc: object) -> None:
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
