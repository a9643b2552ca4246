"""Database passwords: shown redacted wherever they are recorded, refused by every writer.

A ``--db`` URL (``acklab run``, ``acklab sweep``) may carry a password. It lives in memory
only: records show the URL as ``user:***@`` (`redact`), and `url_secrets` lists what the
bundle writer and the journal must refuse to write, in every spelling a password takes on
its way through a URL (raw, URL-quoted, decoded, form-quoted) — a redaction that misses one
spelling would otherwise leak it silently.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import quote, quote_plus, unquote

# Shorter secrets would make the writers' guards trip on ordinary text ("postgres" is in
# "postgresql"); such a password is refused only in its URL context (":pw@", the whole URL).
MIN_SECRET_CHARS = 8
_USERINFO = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^/@:]*):(?P<password>[^/@]*)@")


def redact(text: str) -> str:
    """``user:pass@`` -> ``user:***@`` in every URL of `text`."""
    return _USERINFO.sub(lambda m: f"{m.group('head')}:***@", text)


def url_password(url: str | None) -> str | None:
    """The password of `url` as written in it (still URL-quoted), or None when it has none."""
    if not url:
        return None
    match = _USERINFO.search(url)
    return match.group("password") if match and match.group("password") else None


def url_secrets(url: str | None, *, context: Iterable[str] = ()) -> set[str]:
    """What no written byte may contain for `url`: its password in every spelling, and the URL.

    A password found in `context` (text records legitimately carry, such as a label) or in
    the redacted URL itself (it equals the user name, say) is refused only in its URL
    context, so that the guards do not refuse ordinary records.
    """
    password = url_password(url)
    if url is None or password is None:
        return set()
    found = {url, f":{password}@"}
    harmless = [redact(url), *context]
    if len(password) >= MIN_SECRET_CHARS and not any(password in text for text in harmless):
        decoded = unquote(password)
        found |= {password, decoded, quote(decoded, safe=""), quote_plus(decoded)}
    return found
