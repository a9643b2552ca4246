"""What the customer reads of a message or a call, and whether it names an event.

A sink matches an event in the text a person or a downstream API would read, not in the
bytes on the wire: a receipt sent base64 or quoted-printable, in a charset of its own, as a
``multipart/alternative`` with an HTML part, or with its subject in RFC 2047 encoded words is
decoded first (the standard library's `email` package, ``policy.default``); a call's JSON body
is parsed (a ``\\u``-escaped id is the id), a form body and the query string are unquoted.
The raw text stays in what is searched too, so nothing the wire shows is lost by decoding.

Matching is by **whole identifiers**: ``ord_12`` does not match inside ``ord_123``,
``ord_12lc`` or ``xord_12``. Identifier characters are letters, digits, ``_`` and ``-`` (so a
uuid is one identifier, and ``evt_1-lc0`` is not ``evt_1``). Where a filled ``match`` starts
(or ends) with an identifier character, the character before (after) it in the text must not
be one; a ``match`` that starts or ends with punctuation (``"order {{order_id}}:"``) is bound
there by its own text.
"""

from __future__ import annotations

import contextlib
import email.parser
import email.policy
import html
import json
import re
from collections.abc import Iterator
from email.message import Message
from typing import Any
from urllib.parse import unquote, unquote_plus

_IDENTIFIER = re.compile(r"[\w-]+")
# A decoded body is bounded by the sink's byte limit; JSON nesting by the parser's recursion.
_MAX_PARTS = 200


def is_identifier_char(char: str) -> bool:
    return char in {"-", "_"} or char.isalnum()


class Text:
    """Searchable text: its identifiers as a set (a whole-identifier needle is one lookup) and
    the text itself (for a needle with punctuation in it)."""

    def __init__(self, *pieces: str) -> None:
        self.text = "\n".join(p for p in pieces if p)
        self.identifiers = frozenset(_IDENTIFIER.findall(self.text))

    def names(self, needle: str) -> bool:
        """Whether `needle` occurs in the text as a whole identifier (see the module's rule)."""
        if not needle:
            return False
        if _IDENTIFIER.fullmatch(needle):
            return needle in self.identifiers
        bound_start, bound_end = is_identifier_char(needle[0]), is_identifier_char(needle[-1])
        text, start = self.text, 0
        while (at := text.find(needle, start)) >= 0:
            end = at + len(needle)
            if not (bound_start and at > 0 and is_identifier_char(text[at - 1])) and not (
                bound_end and end < len(text) and is_identifier_char(text[end])
            ):
                return True
            start = at + 1
        return False


def _part_text(part: Message) -> str:
    """A leaf part as the reader sees it: text in its charset (HTML entities resolved), any
    other part's decoded bytes as UTF-8 (a JSON or CSV attachment names ids too)."""
    payload = part.get_payload(decode=True)
    if not isinstance(payload, bytes):
        return ""
    charset = part.get_content_charset() or "utf-8"
    try:
        text = payload.decode(charset, "replace")
    except LookupError:  # a charset Python does not know: read it as UTF-8
        text = payload.decode("utf-8", "replace")
    if part.get_content_type() == "text/html":
        text = html.unescape(text)
    return text


def header_pairs(part: Message) -> list[tuple[str, str]]:
    """`part`'s headers, RFC 2047 encoded words decoded (``policy.default``); a header the
    policy cannot parse is left out."""
    pairs = []
    for name, value in part.raw_items():
        with contextlib.suppress(Exception):
            pairs.append((name, str(part.policy.header_fetch_parse(name, value))))
    return pairs


def email_text(raw: bytes) -> Text:
    """A message as its reader sees it: every header decoded, every part in its charset."""
    wire = raw.decode("utf-8", "replace")
    message = parsed(raw)
    if message is None:  # only its bytes can be read
        return Text(wire)
    pieces: list[str] = []
    for count, part in enumerate(message.walk()):
        if count >= _MAX_PARTS:
            break
        pieces.extend(f"{name}: {value}" for name, value in header_pairs(part))
        if not part.is_multipart():
            with contextlib.suppress(Exception):
                pieces.append(_part_text(part))
    return Text(*pieces, wire)


def parsed(raw: bytes) -> Message | None:
    """`raw` parsed as a message (``policy.default``), or None when the parser refuses it."""
    try:
        return email.parser.BytesParser(policy=email.policy.default).parsebytes(raw)
    except Exception:
        return None


def _json_strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, int | float):
        yield str(value)
    elif isinstance(value, list):
        for item in value:
            yield from _json_strings(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _json_strings(item)


def call_text(path: str, query: str, body: bytes) -> Text:
    """A call as the downstream API reads it: the path, the query and a form body unquoted, a
    JSON body's keys and values decoded (whatever its ``Content-Type`` says)."""
    wire = body.decode("utf-8", "replace")
    pieces = [unquote(path), unquote_plus(query)]
    try:
        pieces.extend(_json_strings(json.loads(body)))
    except (ValueError, RecursionError):  # not JSON (or nested past the parser): a form, or text
        pieces.append(unquote_plus(wire))
    return Text(*pieces, f"{path}?{query}", wire)
