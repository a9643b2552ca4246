"""The console's safety: read-only methods, strict headers, and raw files that stay in the evidence dir.

The console shows evidence recorded from a handler under attack, so its pages must not run
anything that evidence contains, and no request may change or reach outside the evidence.
"""

from __future__ import annotations

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

    Refuses absolute paths, `..`, empty segments (doubled slashes), backslashes and NUL,
    then resolves symlinks and checks the real path is still under the real `base`.
    """
    if not rel or "\x00" in rel or "\\" in rel or rel.startswith("/"):
        return None
    parts = rel.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return None
    if PurePosixPath(rel).is_absolute():
        return None
    real_base = base.resolve()
    try:
        candidate = (real_base / rel).resolve(strict=True)
    except (OSError, RuntimeError):
        return None
    if not candidate.is_relative_to(real_base) or not candidate.is_file():
        return None
    return candidate


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
