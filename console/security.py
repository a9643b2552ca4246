"""The console's safety: read-only methods, strict headers, raw files that stay in the evidence dir,
and answers only to the host names it serves.

The console shows evidence recorded from a handler under attack, so its pages must not run
anything that evidence contains, and no request may change or reach outside the evidence.
A page on another site can make a browser send requests to 127.0.0.1 under its own name
(DNS rebinding): the console answers only requests whose ``Host`` names an address it
serves (`HostCheckMiddleware`).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from starlette.types import ASGIApp, Message, Receive, Scope, Send

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
# Raw evidence is data, never a document: nothing in it may run, even when opened directly.
RAW_CSP = "default-src 'none'; sandbox; frame-ancestors 'none'"
HEADERS: dict[bytes, bytes] = {
    b"content-security-policy": CSP.encode(),
    b"x-content-type-options": b"nosniff",
    b"referrer-policy": b"no-referrer",
    b"x-frame-options": b"DENY",
    b"cross-origin-opener-policy": b"same-origin",
    b"cross-origin-resource-policy": b"same-origin",
    b"permissions-policy": b"camera=(), microphone=(), geolocation=(), payment=()",
}
ALLOWED_METHODS = frozenset({"GET", "HEAD"})


class ReadOnlyMiddleware:
    """Answers 405 to every method but GET and HEAD, and adds the security headers to every response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["method"] not in ALLOWED_METHODS:
            await self._refuse(send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers", [])}
                extra = [(name, value) for name, value in HEADERS.items() if name not in present]
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        await self.app(scope, receive, send_with_headers)

    @staticmethod
    async def _refuse(send: Send) -> None:
        body = b"405 Method Not Allowed: the acklab console is read-only (GET and HEAD only)\n"
        headers = [
            (b"allow", b"GET, HEAD"),
            (b"content-type", b"text/plain; charset=utf-8"),
            (b"content-length", str(len(body)).encode()),
            *HEADERS.items(),
        ]
        await send({"type": "http.response.start", "status": 405, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def resolve_inside(base: Path, rel: str) -> Path | None:
    """The regular file `rel` names under `base`, or None when it would leave `base` in any way.

    Refuses absolute paths, `..`, empty segments (doubled slashes), backslashes and NUL, and
    any symbolic link on the way (a link is never followed, even one that points inside).
    """
    if not rel or "\x00" in rel or "\\" in rel or rel.startswith("/"):
        return None
    parts = rel.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return None
    if PurePosixPath(rel).is_absolute():
        return None
    candidate = base.resolve()
    for n, part in enumerate(parts):
        candidate = candidate / part
        try:
            mode = os.lstat(candidate).st_mode
        except OSError:
            return None
        last = n == len(parts) - 1
        if stat.S_ISLNK(mode) or (not last and not stat.S_ISDIR(mode)) or (last and not stat.S_ISREG(mode)):
            return None
    return candidate


LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
WILDCARDS = frozenset({"", "::", ".".join("0" * 4)})  # every interface: no one name to answer to


def served_hosts(listen: str, extra: Iterable[str] = ()) -> frozenset[str]:
    """The host names a console listening on `listen` answers to (lower case, no port)."""
    names = {*LOOPBACK_NAMES, *(h.strip().lower().strip("[]") for h in extra if h.strip())}
    if listen not in WILDCARDS:
        names.add(listen.lower().strip("[]"))
    return frozenset(names)


def host_of(header: str) -> str:
    """The name in a ``Host`` header, without its port (``[::1]:8000`` -> ``::1``)."""
    value = header.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


class HostCheckMiddleware:
    """Answers 421 to a request whose ``Host`` names no address the console serves."""

    def __init__(self, app: ASGIApp, hosts: Iterable[str]) -> None:
        self.app = app
        self.hosts = frozenset(hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        header = next((v.decode("latin-1") for k, v in scope.get("headers", []) if k == b"host"), "")
        if host_of(header) in self.hosts:
            await self.app(scope, receive, send)
            return
        body = (
            f"421 Misdirected Request: this acklab console answers only to {', '.join(sorted(self.hosts))}; "
            "start it with --allow-host NAME to add a name\n"
        ).encode()
        headers = [
            (b"content-type", b"text/plain; charset=utf-8"),
            (b"content-length", str(len(body)).encode()),
            *HEADERS.items(),
        ]
        await send({"type": "http.response.start", "status": 421, "headers": headers})
        await send({"type": "http.response.body", "body": body})


MEDIA_TYPES = {
    ".json": "application/json",
    ".xml": "application/xml",
    ".txt": "text/plain; charset=utf-8",
    ".log": "text/plain; charset=utf-8",
    ".diff": "text/plain; charset=utf-8",
    ".patch": "text/plain; charset=utf-8",
    ".md": "text/plain; charset=utf-8",
    ".yaml": "text/plain; charset=utf-8",
    ".yml": "text/plain; charset=utf-8",
}


def media_type(path: Path) -> str:
    """Evidence is served as data: anything not known to be JSON, XML or text is a download."""
    return MEDIA_TYPES.get(path.suffix.lower(), "application/octet-stream")
