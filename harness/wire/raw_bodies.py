"""Bodies whose bytes are unusual but whose JSON is the same: what a signature over the raw bytes must survive.

A provider signs the bytes it sends. A consumer that verifies ``json.dumps(json.loads(body))``
(or an Express app's ``JSON.stringify(req.body)``) verifies other bytes: it rejects every
delivery its own serializer would have written differently. Each variant is valid JSON meaning
what the lab's compact body means:

* ``whitespace``: pretty-printed, two spaces and a final newline — how Stripe sends its bodies;
* ``escapes``: ``\\u`` escapes for every non-ASCII character and for ``<``, ``>``, ``&`` (Go's
  encoding/json), ``\\/`` for ``/`` (PHP's json_encode); when the body has none of those, the
  first letter of its ``id`` is written ``\\u00XX`` (still the same string);
* ``numbers``: every decimal with a trailing zero (``1.10``); a body with no decimal gets one
  top-level field, ``acklab_fidelity: {"rate": 1.10, "large": 12345678901234567890}`` (a
  decimal a re-serializer shortens to ``1.1``, an integer past 2^53).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

VARIANTS = ("whitespace", "escapes", "numbers")
FIDELITY_FIELD = "acklab_fidelity"
_HTML = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"}


def _escaped(document: Mapping[str, Any]) -> bytes:
    text = json.dumps(document, separators=(",", ":"), ensure_ascii=True)
    plain = json.dumps(document, separators=(",", ":"), ensure_ascii=False)
    text = "".join(_HTML.get(c, c) for c in text).replace("/", "\\/")
    if text == plain:
        ident = document.get("id")
        if isinstance(ident, str) and ident:
            quoted = json.dumps(ident)
            written = '"' + f"\\u{ord(ident[0]):04x}" + quoted[2:]
            text = text.replace(f'"id":{quoted}', f'"id":{written}', 1)
    return text.encode("ascii")


def _written(node: Any) -> tuple[str, int]:
    """`node` as compact JSON with every finite decimal written with a trailing zero, and how many."""
    if isinstance(node, Mapping):
        parts = [(json.dumps(str(k), ensure_ascii=False), _written(v)) for k, v in node.items()]
        return "{" + ",".join(f"{k}:{v}" for k, (v, _) in parts) + "}", sum(n for _, (_, n) in parts)
    if isinstance(node, list):
        items = [_written(v) for v in node]
        return "[" + ",".join(v for v, _ in items) + "]", sum(n for _, n in items)
    if isinstance(node, float) and math.isfinite(node):
        shown = repr(node)
        return (shown + "0", 1) if "." in shown and "e" not in shown else (shown, 0)
    return json.dumps(node, ensure_ascii=False), 0


def _numbers(document: Mapping[str, Any]) -> bytes:
    text, decimals = _written(document)
    if not decimals:
        extra = f'"{FIDELITY_FIELD}":{{"rate":1.10,"large":12345678901234567890}}'
        text = text[:-1] + ("," if len(text) > 2 else "") + extra + "}"
    return text.encode("utf-8")


def raw_body(variant: str, document: Mapping[str, Any]) -> bytes:
    """`document` written as `variant` (one of `VARIANTS`)."""
    if variant == "whitespace":
        return (json.dumps(document, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
    if variant == "escapes":
        return _escaped(document)
    if variant == "numbers":
        return _numbers(document)
    raise ValueError(f"unknown raw-bytes variant {variant!r}; expected one of {', '.join(VARIANTS)}")
