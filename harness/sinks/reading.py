"""What the customer reads of a message or a call, and whether it names an event.

A sink matches an event in the text a person or a downstream API would read, not in the
bytes on the wire: a receipt sent base64 or quoted-printable, in a charset of its own, as a
``multipart/alternative`` with an HTML part, or with its subject in RFC 2047 encoded words is
decoded first (the standard library's `email` package, ``policy.default``); a call's JSON body
is parsed (a ``\\u``-escaped id is the id), a form body and the query string are unquoted.
The raw text stays in what is searched too, so nothing the wire shows is lost by decoding.

Matching is by **whole identifiers**: ``ord_12`` does not match inside ``ord_123``,
``ord_12lc``, ``xord_12`` or ``ord_12-lc0``. Identifier characters are letters, digits, ``_``
and ``-`` (so a uuid is one identifier, and ``evt_1-lc0`` is not ``evt_1``). Nothing may
continue a filled ``match``: where it ends with an identifier character, the character after
it must not be one. Before it, a *type prefix* ending in ``_`` or ``-`` is allowed — providers
and apps tag ids that way (Stripe's ``in_``, ``cus_``, ``ch_``; ``order-``), so a receipt for
invoice ``in_ord_12`` names order ``ord_12`` — but a letter or digit is not (``xord_12``).
A ``match`` that starts or ends with punctuation (``"order {{order_id}}:"``) is bound there by
its own text.
"""

from __future__ import annotations

import contextlib
import email.parser
import email.policy
import html
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from email.message import Message
from email.utils import getaddresses
from typing import Any
from urllib.parse import unquote, unquote_plus

_IDENTIFIER = re.compile(r"[\w-]+")
# A decoded body is bounded by the sink's byte limit; JSON nesting by the parser's recursion.
_MAX_PARTS = 200


def is_identifier_char(char: str) -> bool:
    return char in {"-", "_"} or char.isalnum()


def _starts_clear(needle: str, text: str, at: int) -> bool:
    """Whether `needle` found at `at` starts an identifier, or follows a type prefix (``in_``)."""
    if at == 0 or not is_identifier_char(needle[0]):
        return True
    before = text[at - 1]
    if needle[0].isalnum():
        return not before.isalnum()  # ``in_<id>``, ``order-<id>``: a prefix tags the id
    return not is_identifier_char(before)


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
        if _IDENTIFIER.fullmatch(needle) and needle in self.identifiers:
            return True
        text, start = self.text, 0
        while (at := text.find(needle, start)) >= 0:
            end = at + len(needle)
            if _starts_clear(needle, text, at) and not (
                is_identifier_char(needle[-1]) and end < len(text) and is_identifier_char(text[end])
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


@dataclass(frozen=True)
class ReadMail:
    """A message as ``effects.smtp.match`` reads it (`matching.MailMatch`)."""

    text: Text  # everything, decoded (email_text)
    recipients: tuple[str, ...]
    subject: str
    body: str


def read_mail(raw: bytes, envelope_recipients: tuple[str, ...]) -> ReadMail:
    """A message as ``effects.smtp.match`` reads it: all of it decoded, its recipients (the
    envelope's, then ``To`` and ``Cc``), its decoded subject and text parts."""
    message = parsed(raw)
    recipients = list(envelope_recipients)
    subject, body = "", []
    if message is not None:
        pairs = header_pairs(message)
        subject = next((v for k, v in pairs if k.lower() == "subject"), "")
        listed = [v for k, v in pairs if k.lower() in ("to", "cc")]
        recipients += [address for _, address in getaddresses(listed) if address]
        for count, part in enumerate(message.walk()):
            if count >= _MAX_PARTS:
                break
            if not part.is_multipart() and part.get_content_maintype() == "text":
                with contextlib.suppress(Exception):
                    body.append(_part_text(part))
    return ReadMail(email_text(raw), tuple(dict.fromkeys(recipients)), subject, "\n".join(body))


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
