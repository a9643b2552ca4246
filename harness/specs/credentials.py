"""Credentials of a run: ``env:NAME`` values, URL passwords, and what the writers must redact.

The redaction itself is `acklab.evidence.redaction` (one mechanism for every writer and
printer); this module is where the harness learns its secrets:

* `resolve_env` reads an ``env:NAME`` value of a spec and remembers it as a secret (a
  header value, a URL with a token in it, a signing secret);
* `url_secrets` lists what no written byte may contain for a database URL (``--db``,
  ``effects.sql.url``): its password in every spelling, and the URL itself; records show
  the URL as ``user:***@`` (`redact`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from acklab.evidence.redaction import (
    MIN_SECRET_CHARS,
    redact,
    redact_urls,
    remember,
    spellings,
    url_credentials,
    url_password,
)
from acklab.harness.errors import SpecError

__all__ = [
    "ENV_REF",
    "MIN_SECRET_CHARS",
    "env_names",
    "redact",
    "resolve_env",
    "shared_names",
    "shown",
    "unset_env_names",
    "url_password",
    "url_secrets",
]

ENV_REF = re.compile(r"^env:([A-Za-z_][A-Za-z0-9_]*)$")


def shown(value: str, resolved: str) -> str:
    """How a URL is named in a message: its ``env:NAME`` when it came from the environment."""
    return value if ENV_REF.match(value) else resolved


def resolve_env(value: str, *, field_name: str, secret: bool = True) -> str:
    """``env:NAME`` -> the variable's value (exit 3 naming NAME when unset); a literal stays as is.

    A value read from the environment is remembered as a secret (unless `secret` is False):
    every writer and printer of the process redacts it from then on.
    """
    match = ENV_REF.match(value)
    if not match:
        return value
    name = match.group(1)
    resolved = os.environ.get(name)
    if not resolved:
        raise SpecError(
            f"{field_name}: {value!r} names the environment variable {name}, which is not set; "
            f"export {name}=... (or run `acklab validate --allow-unset` to check the rest)"
        )
    if secret:
        remember(resolved, *url_credentials_of(resolved))
    return resolved


# A URL or header value longer than this is refused: servers cap a request line and a header
# at about 8 KiB, so a longer one is a mistake (a file pasted into a variable), never a target.
MAX_WIRE_CHARS = 8192
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def check_wire_value(value: str, *, field_name: str, shown: str = "the value") -> str:
    """Refuse (exit 3 naming the field) a value that becomes a URL or a header when it holds a
    control character (CR, LF, NUL: a header split into two, a request line cut) or is longer
    than `MAX_WIRE_CHARS`. `shown` names the value (``env:NAME`` when it came from there)."""
    found = _CONTROL.search(value)
    if found is not None:
        raise SpecError(
            f"{field_name}: {shown} holds the control character {found.group()!r} at position {found.start()}; "
            "a URL or header value is one line of printable text (a trailing newline from `echo` is a "
            "common cause: use `printf %s`)"
        )
    if len(value) > MAX_WIRE_CHARS:
        raise SpecError(
            f"{field_name}: {shown} is {len(value):,} characters long, more than a URL or header takes "
            f"({MAX_WIRE_CHARS:,}); check what was put in it"
        )
    return value


def url_credentials_of(value: str) -> list[str]:
    """The password and credential-named query values of `value` when it is a URL."""
    return url_credentials(value) if "://" in value else []


def env_names(doc: Any, where: str = "") -> Iterator[tuple[str, str]]:
    """Every ``env:NAME`` in a spec document, as (field path, NAME)."""
    if isinstance(doc, Mapping):
        for key, value in doc.items():
            yield from env_names(value, f"{where}.{key}" if where else str(key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            yield from env_names(value, f"{where}.{i}")
    elif isinstance(doc, str):
        match = ENV_REF.match(doc)
        if match:
            yield where, match.group(1)


def shared_names(doc: Mapping[str, Any]) -> list[str]:
    """The variables a spec reads with ``env:`` for what its service must agree on with the lab: its
    signing secret and the headers the lab sends (not what only the lab reads, such as effects URLs)."""
    signing = doc.get("signing")
    refs = [signing.get("secret") if isinstance(signing, Mapping) else None]
    headers = doc.get("headers")
    refs += list(headers.values()) if isinstance(headers, Mapping) else []
    return [ref[4:] for ref in refs if isinstance(ref, str) and ref.startswith("env:")]


def unset_env_names(doc: Any, *, skip: Iterable[str] = ("event",)) -> list[tuple[str, str]]:
    """The ``env:NAME`` references of a spec whose variable is unset or empty (the event body is data)."""
    skipped = tuple(skip)
    return [
        (where, name)
        for where, name in env_names(doc)
        if where.split(".")[0] not in skipped and not os.environ.get(name)
    ]


def url_secrets(url: str | None, *, context: Iterable[str] = ()) -> set[str]:
    """What no written byte may contain for `url`: its password in every spelling, and the URL.

    A password found in `context` (text records legitimately carry, such as a label) or in
    the redacted URL itself (it equals the user name, say) is redacted only in its URL
    context, so that ordinary records are not mangled.
    """
    password = url_password(url)
    if url is None or password is None:
        return set()
    found = {url, f":{password}@"}
    harmless = [redact_urls(url), *context]
    if len(password) >= MIN_SECRET_CHARS and not any(password in text for text in harmless):
        found |= spellings(password)
    return found
