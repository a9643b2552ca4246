"""How a conflicting body differs from the original: one default for every target, and the record
of what differed.

`default_conflict` is the ``conflict.set`` of a target that names none — a spec without
``conflict:``, ``acklab.attack()`` without ``conflict=`` — derived from the event body, in
this order (docs/conflicts.md):

1. the provider's own amount field, where the provider has one (Stripe
   ``data.object.amount``, ``data.object.amount_total``; Shopify ``total_price``…);
2. else the first numeric *amount* field of the body in document order (a key named
   ``amount``, ``total`` or ``price``, alone or in ``amount_cents``, ``total_price``…; a number,
   or a decimal string such as Shopify's ``"199.00"``);
3. else the first plain text field that holds no placeholder and does not name the event
   (not ``id``, ``*_id``, ``type``, ``object_kind``…), with `` (conflicting)`` appended;
4. else a top-level ``acklab_conflict`` field, the one change every JSON body takes.

An amount gains 8700 (1200 becomes 9900; ``"199.00"`` becomes ``"8899.00"``): a different
charge for the same event id is the conflict a payment consumer must not apply.

`changed_fields` is what the incident records of each conflicting delivery: every field
whose value differs between the two bodies, values redacted where secret.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from acklab.evidence.redaction import REDACTED, known
from acklab.harness.wire.providers import PROVIDERS

LAST_RESORT = {"acklab_conflict": "this body differs from the original"}
AMOUNT_STEP = 8700
TEXT_SUFFIX = " (conflicting)"
AMOUNT_KEY = re.compile(r"(^|_)(amount|total|price)(_|$)", re.IGNORECASE)
DECIMAL = re.compile(r"^-?\d+(\.\d+)?$")
# Fields that name the event or its kind: changing them is another event, not a conflicting body.
NAMING_KEY = re.compile(r"^(id|type|object|object_kind|event|event_type|action|kind|topic)$|_id$|^id_")
SECRET_KEY = re.compile(r"pass(word)?|secret|token|api_?key|authorization|signature|card_?number|cvc|iban")
MAX_FIELDS = 20
MAX_VALUE_CHARS = 200
PLACEHOLDER = re.compile(r"\{\{\s*[a-z_]+\s*\}\}")


def _leaves(node: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    if isinstance(node, Mapping):
        for key, value in node.items():
            yield from _leaves(value, (*path, str(key)))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _leaves(value, (*path, str(i)))
    else:
        yield path, node


def value_at(document: Any, dotted: str) -> tuple[bool, Any]:
    """(found, value) at a dotted path (a numeric segment indexes a list)."""
    node = document
    for part in dotted.split("."):
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return False, None
    return True, node


def _is_amount(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, int | float) or (isinstance(value, str) and DECIMAL.match(value) is not None)


def changed_amount(value: Any) -> Any:
    """`value` (a number or a decimal string) plus `AMOUNT_STEP`, in the same type and format."""
    if isinstance(value, int):
        return value + AMOUNT_STEP
    if isinstance(value, float):
        return round(value + AMOUNT_STEP, 6)
    text = str(value)
    decimals = len(text.partition(".")[2])
    changed = float(text) + AMOUNT_STEP
    return f"{changed:.{decimals}f}" if decimals else str(int(changed))


def default_conflict(template: Mapping[str, Any], scheme: str = "none") -> dict[str, Any]:
    """The ``conflict.set`` of a target that names none: see the module docstring for the rules."""
    record = PROVIDERS.get(scheme)  # where the provider keeps the amount (`Provider.amount_fields`)
    for dotted in record.amount_fields if record is not None else ():
        found, value = value_at(template, dotted)
        if found and _is_amount(value):
            return {dotted: changed_amount(value)}
    leaves = list(_leaves(template))
    for path, value in leaves:
        if path and not path[-1].isdigit() and AMOUNT_KEY.search(path[-1]) and _is_amount(value):
            return {".".join(path): changed_amount(value)}
    for path, value in leaves:
        named = [p for p in path if not p.isdigit()]
        if (
            named
            and isinstance(value, str)
            and value
            and not PLACEHOLDER.search(value)
            and not NAMING_KEY.search(named[-1])
            and not SECRET_KEY.search(named[-1].lower())
        ):
            return {".".join(path): value + TEXT_SUFFIX}
    return dict(LAST_RESORT)


def _shown(value: Any) -> Any:
    if isinstance(value, str) and len(value) > MAX_VALUE_CHARS:
        return value[: MAX_VALUE_CHARS - 1] + "…"
    if isinstance(value, Mapping | list):
        return f"<{'an object' if isinstance(value, Mapping) else 'a list'} of {len(value)}>"
    return value


def changed_fields(original: Any, conflicting: Any) -> list[dict[str, Any]]:
    """Every field whose value differs between two bodies (added and removed ones too), at most
    `MAX_FIELDS`: ``{"path", "original", "conflicting"}``, a missing side ``None`` with
    ``"missing": "original"|"conflicting"``. A value under a secret-looking key (password, token,
    api_key…) or holding a secret the process knows is ``[redacted]``; long values are cut."""
    mine = dict(_leaves(original))
    theirs = dict(_leaves(conflicting))
    redactor = known()
    found: list[dict[str, Any]] = []
    for path in [*mine, *(p for p in theirs if p not in mine)]:
        before, after = mine.get(path), theirs.get(path)
        if path in mine and path in theirs and before == after:
            continue
        secret = any(SECRET_KEY.search(p.lower()) for p in path if not p.isdigit())

        def shown(value: Any, secret: bool = secret) -> Any:
            if secret and value is not None:
                return REDACTED
            return redactor.doc(_shown(value))

        field: dict[str, Any] = {
            "path": ".".join(path) or "(the body)",
            "original": shown(before),
            "conflicting": shown(after),
        }
        if path not in mine:
            field["missing"] = "original"
        elif path not in theirs:
            field["missing"] = "conflicting"
        found.append(field)
        if len(found) >= MAX_FIELDS:
            break
    return found
