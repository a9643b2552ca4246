"""The one redaction of acklab: every secret it knows becomes ``[redacted]`` in what it writes or prints.

A secret enters the lab in few places — a signing secret, a header value, an ``env:`` URL,
a database password, ``GITLAB_TOKEN``, the LLM key — and may leave it in many: records,
the journal, reports, the service's log, a trail, an MR note, an error text that quotes a
URL (httpx and SQLAlchemy messages do). So the places where a secret enters `remember` it,
process-wide, and every writer and printer passes its text through `redact` (the bundle
writer and the journal do so for every byte they write).

What is redacted:

* every remembered secret, in every spelling it takes on its way through a URL or a JSON
  document (raw, URL-quoted, form-quoted, decoded, JSON-escaped);
* in any URL of any text, whether the lab knows it or not: the password of ``user:pass@``
  (``user:***@``) and the values of query parameters named like a credential
  (``?api_key=***``, ``&token=***``, ``X-Amz-Signature=***``).

A secret shorter than `MIN_SECRET_CHARS` is not searched for in free text: it would
mangle ordinary words ("postgres" is in "postgresql"). Such a value is still redacted
where the lab knows its place (a header it sends, a URL's password).
"""

from __future__ import annotations

import functools
import json
import re
import threading
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote, quote_plus, unquote, unquote_plus

REDACTED = "[redacted]"
MIN_SECRET_CHARS = 8

# user:password@ in a URL (the user name stays: it helps, and is not a credential).
# A scheme starts where no scheme character precedes it: without the lookbehind every letter
# of a long word was a start whose scheme ran to the word's end, quadratic in its length (a
# 120 KB value took 90 s to redact).
_USERINFO = re.compile(
    r"(?P<head>(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://[^/@:\s]*):(?P<password>[^/@\s]*)@"
)
# ?api_key=... &access_token=... &X-Amz-Signature=... (a value runs to the next & # quote or space)
_CREDENTIAL_PARAM = re.compile(
    r"(?P<name>[?&;][^=&#\s\"'<>]*(?:key|token|secret|passw|pwd|sig|auth|credential)[^=&#\s\"'<>]*=)"
    r"(?P<value>[^&#\s\"'<>]+)",
    re.IGNORECASE,
)


def redact_urls(text: str) -> str:
    """Passwords and credential-named query values of every URL in `text`, as ``***``."""
    text = _USERINFO.sub(lambda m: f"{m.group('head')}:***@", text)
    return _CREDENTIAL_PARAM.sub(lambda m: f"{m.group('name')}***", text)


def url_password(url: str | None) -> str | None:
    """The password of `url` as written in it (still URL-quoted), or None when it has none."""
    if not url:
        return None
    match = _USERINFO.search(url)
    return match.group("password") if match and match.group("password") else None


def url_credentials(url: str | None) -> list[str]:
    """The credentials written in `url`: its password and its credential-named query values."""
    if not url:
        return []
    found = [m.group("value") for m in _CREDENTIAL_PARAM.finditer(url)]
    password = url_password(url)
    return [password, *found] if password else found


def spellings(secret: str) -> set[str]:
    """Every way `secret` is written on its way through URLs and JSON documents."""
    forms = {secret, unquote(secret), unquote_plus(secret)}
    for form in list(forms):
        forms |= {quote(form, safe=""), quote(form), quote_plus(form)}
        forms |= {json.dumps(form)[1:-1], json.dumps(form, ensure_ascii=False)[1:-1]}
    return {f for f in forms if len(f) >= MIN_SECRET_CHARS}


class Redactor:
    """Redacts a fixed set of secrets (every spelling given) and every URL credential; immutable."""

    __slots__ = ("_ordered", "secrets")

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self.secrets = frozenset(secrets)
        # Longest first: a secret that contains another is replaced whole.
        self._ordered = tuple(sorted(self.secrets, key=lambda s: (-len(s), s)))

    def __repr__(self) -> str:  # never the values
        return f"Redactor(<{len(self.secrets)} spellings>)"

    @classmethod
    def of(cls, secrets: Iterable[str | None]) -> Redactor:
        """A redactor of `secrets` in every spelling (values shorter than MIN_SECRET_CHARS are skipped)."""
        found: set[str] = set()
        for secret in secrets:
            if secret and len(secret) >= MIN_SECRET_CHARS:
                found |= spellings(secret)
        return cls(found)

    def union(self, secrets: Iterable[str | None]) -> Redactor:
        extra = Redactor.of(secrets).secrets
        return self if extra <= self.secrets else Redactor(self.secrets | extra)

    def text(self, text: str) -> str:
        """`text` with every known secret and every URL credential redacted."""
        # URLs first: a known URL with a password reads user:***@, not [redacted].
        text = redact_urls(text)
        for secret in self._ordered:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text

    def data(self, data: bytes) -> bytes:
        """Bytes as `text` does it; bytes that are not UTF-8 pass through unchanged."""
        decoded = data.decode("utf-8", errors="surrogateescape")
        redacted = self.text(decoded)
        return data if redacted == decoded else redacted.encode("utf-8", errors="surrogateescape")

    def doc(self, value: Any) -> Any:
        """A JSON-like document with every string (keys included) redacted; a new object."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.text(k) if isinstance(k, str) else k: self.doc(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.doc(v) for v in value]
        return value

    def leaks(self, text: str) -> list[str]:
        """The known secrets found in `text` (for tests and guards)."""
        return [s for s in self._ordered if s in text]


class _Known:
    """The secrets this process has learned (one instance; replaced whole, so readers need no lock)."""

    lock = threading.Lock()
    redactor = Redactor()


def remember(*secrets: str | None) -> None:
    """Make `secrets` known to every writer and printer of this process (from now on)."""
    with _Known.lock:
        _Known.redactor = _Known.redactor.union(secrets)


def known(extra: Iterable[str | None] = ()) -> Redactor:
    """The redactor of every secret this process has learned, plus `extra`."""
    return _with_extra(_Known.redactor, tuple(extra))


@functools.lru_cache(maxsize=64)
def _with_extra(base: Redactor, extra: tuple[str | None, ...]) -> Redactor:
    # Writers ask for the same union at every write; spellings are computed once.
    return base.union(extra)


def redact(text: str) -> str:
    """`text` with every secret this process knows and every URL credential redacted."""
    return _Known.redactor.text(text)
