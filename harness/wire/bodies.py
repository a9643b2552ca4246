"""Reading what a target answers, bounded: a handler under test may stream without end.

A response body is read while it streams: the first `keep` bytes are kept (the excerpt the
evidence shows), the rest is read and discarded, and reading stops at `limit` bytes (the
connection is then closed). The sha256 covers every byte that was read, so the evidence says
exactly what the lab saw, and `truncated` says the lab stopped before the body's end. Memory
stays at `keep` plus one chunk, whatever the target sends.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import httpx

# A delivery's response: 2 KiB kept for the excerpt; reading stops after 1 MiB. A webhook
# consumer answers a few bytes; anything past a megabyte tells nothing more about it.
KEEP_BYTES = 2048
LIMIT_BYTES = 1 << 20


@dataclass(frozen=True)
class CappedBody:
    """What was read of one response body."""

    data: bytes  # the first `keep` bytes
    read: int  # bytes read in all (decoded)
    sha256: str  # over every byte read
    truncated: bool  # reading stopped at the limit, before the end of the body


async def read_capped(response: httpx.Response, keep: int, limit: int | None = None) -> CappedBody:
    """Read `response`'s body while streaming: keep `keep` bytes, stop after `limit` (default `keep`)."""
    limit = keep if limit is None else max(limit, keep)
    digest = hashlib.sha256()
    kept = bytearray()
    read = 0
    truncated = False
    async for received in response.aiter_bytes():
        chunk = received
        if read + len(chunk) > limit:
            chunk = received[: limit - read]
            truncated = True
        read += len(chunk)
        digest.update(chunk)
        if len(kept) < keep:
            kept += chunk[: keep - len(kept)]
        if truncated:
            break
    return CappedBody(bytes(kept), read, digest.hexdigest(), truncated)
