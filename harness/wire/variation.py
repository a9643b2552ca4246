"""What the lab sends varies with the seed, so that no patch can single out the lab's deliveries.

A handler repaired against fixed test data can be "repaired" for that data only: special-case
EUR 1200, or the lab's id length, and double-fulfil every other order. So the values a sender
chooses are drawn from the trial's seed — through the event id, itself derived from the seed
(`harness.core.plan.event_ids`) — within what the target's template allows:

* ids (`event_id`, `order_id`): one of several formats real providers use (a prefixed hex
  string, a UUID, a prefixed base32 string, a ULID-like string), of varying length;
* ``{{amount_cents}}`` (a JSON integer, any size a shop sells at) and ``{{currency}}`` (an
  ISO 4217 code), available to every template;
* the order of the fields of every object in the body (JSON objects are unordered).

Targets whose template the lab owns (the fixture) vary ids and field order; a spec target
keeps the ids its provider shape expects and varies only what its template asks for through
the placeholders. The fixture's own tests (``tests/app``) draw their events from the same
generator (`Draw`). Everything is a pure function of its input: ``acklab plan`` stays the same
for a seed.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

CURRENCIES = (
    "EUR",
    "USD",
    "GBP",
    "JPY",
    "CHF",
    "SEK",
    "PLN",
    "CAD",
    "AUD",
    "DKK",
    "NOK",
    "CZK",
    "BRL",
    "INR",
)
ID_FORMATS = ("prefixed-hex", "uuid", "prefixed-base32", "ulid")
CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
MAX_AMOUNT_CENTS = 10_000_000  # 100 000.00: an order, not an integer-overflow probe


def _digest(material: str) -> bytes:
    return hashlib.sha256(material.encode("utf-8")).digest()


@dataclass(frozen=True)
class Draw:
    """The values drawn for one key (an event id, a test's name): all derived from its digest."""

    key: str

    def _int(self, what: str, low: int, high: int) -> int:
        value = int.from_bytes(_digest(f"{self.key}/{what}")[:8], "big")
        return low + value % (high - low + 1)

    def identifier(self, prefix: str, what: str = "id") -> str:
        """An id in one of `ID_FORMATS`, of varying length (12 to 40 significant characters)."""
        digest = _digest(f"{self.key}/{what}")
        kind = ID_FORMATS[digest[0] % len(ID_FORMATS)]
        if kind == "uuid":
            h = digest[1:17].hex()
            return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{'89ab'[digest[17] % 4]}{h[17:20]}-{h[20:32]}"
        if kind == "ulid":
            chars = "".join(CROCKFORD[b % 32] for b in digest[1:27])
            return f"{prefix}01{chars[: 22 + digest[27] % 5]}"
        length = 12 + digest[28] % 29
        if kind == "prefixed-base32":
            text = base64.b32encode(digest[1:26]).decode("ascii").lower().rstrip("=")
            return f"{prefix}{text[:length]}"
        return f"{prefix}{hashlib.sha256(digest).hexdigest()[:length]}"

    def amount_cents(self, avoid: Iterable[int] = ()) -> int:
        """A price: mostly everyday amounts, sometimes round, sometimes large; never one of `avoid`
        (a conflicting body's value must differ from the original's)."""
        band = self._int("band", 0, 9)
        if band < 6:
            value = self._int("amount", 50, 25_000)
        elif band < 8:
            value = self._int("amount", 1, 500) * 100
        else:
            value = self._int("amount", 25_001, MAX_AMOUNT_CENTS)
        avoided = set(avoid)
        while value in avoided:
            value += 1
        return value

    def currency(self) -> str:
        return CURRENCIES[self._int("currency", 0, len(CURRENCIES) - 1)]

    def values(self, avoid_amounts: Iterable[int] = ()) -> dict[str, Any]:
        """The template placeholders this draw fills: ``amount_cents`` and ``currency``."""
        return {"amount_cents": self.amount_cents(avoid_amounts), "currency": self.currency()}

    def reordered(self, document: Any) -> Any:
        """`document` with the fields of every object in a drawn order (values untouched)."""
        return _reordered(document, self.key, "")


def _reordered(node: Any, key: str, path: str) -> Any:
    if isinstance(node, list):
        return [_reordered(v, key, f"{path}.{i}") for i, v in enumerate(node)]
    if not isinstance(node, Mapping):
        return node
    order = sorted(node, key=lambda name: _digest(f"{key}/order{path}/{name}"))
    return {name: _reordered(node[name], key, f"{path}.{name}") for name in order}


def varied_ids(digest: str) -> tuple[str, str]:
    """(event id, order id) for an event whose plan digest is `digest`, in varied formats."""
    draw = Draw(digest)
    return draw.identifier("evt_", "event"), draw.identifier("ord_", "order")
