"""Optional manifest signatures: HMAC-SHA256 with a key from the environment.

When ``ACKLAB_MANIFEST_KEY`` is set, every manifest the lab finalises carries
``signature: {alg: hmac-sha256, key_id, value}`` over its canonical JSON (all fields but
``signature`` and ``pulled_from``, which `evidence pull` adds after verifying). A bundle
whose files were changed *and* whose manifest was recomputed still fails: the forger does
not hold the key. `acklab evidence verify` checks the signature when the key is set (and
then refuses an unsigned manifest), and says a manifest is signed but unchecked when not.

The key never appears in a manifest, a message or a log; ``key_id`` is the first 16 hex
digits of its sha256, to tell keys apart. A process that starts untrusted code (the repair
flow) takes the key out of its environment and holds it here instead (`holding`), so that no
child can inherit it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

KEY_VARIABLE = "ACKLAB_MANIFEST_KEY"
ALGORITHM = "hmac-sha256"
UNSIGNED_FIELDS = frozenset({"signature", "pulled_from"})
_HELD: ContextVar[bytes | None] = ContextVar("acklab_manifest_key", default=None)


def signing_key(env: Mapping[str, str] | None = None) -> bytes | None:
    """The key held for this context (`holding`), else from the environment; None when unset or empty."""
    held = _HELD.get() if env is None else None
    if held is not None:
        return held
    value = (os.environ if env is None else env).get(KEY_VARIABLE, "")
    return value.encode("utf-8") if value else None


@contextmanager
def holding(key: bytes | None) -> Iterator[None]:
    """Sign with `key` inside the block, whatever the environment says (None: the environment's)."""
    token = _HELD.set(key)
    try:
        yield
    finally:
        _HELD.reset(token)


def key_id(key: bytes) -> str:
    return hashlib.sha256(key).hexdigest()[:16]


def _canonical(manifest: Mapping[str, Any]) -> bytes:
    signed = {k: v for k, v in manifest.items() if k not in UNSIGNED_FIELDS}
    return json.dumps(signed, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def sign(manifest: Mapping[str, Any], key: bytes) -> dict[str, str]:
    """The ``signature`` field for `manifest`."""
    value = hmac.new(key, _canonical(manifest), hashlib.sha256).hexdigest()
    return {"alg": ALGORITHM, "key_id": key_id(key), "value": value}


def check(manifest: Mapping[str, Any], key: bytes | None) -> str | None:
    """None when the signature holds (or there is nothing to check); else what is wrong."""
    signature = manifest.get("signature")
    if key is None:
        return None
    if not isinstance(signature, dict):
        return f"the manifest is not signed, but {KEY_VARIABLE} is set: every manifest is expected signed"
    if signature.get("alg") != ALGORITHM:
        return f"the manifest's signature uses {signature.get('alg')!r}; expected {ALGORITHM}"
    if signature.get("key_id") != key_id(key):
        return f"the manifest was signed with key {signature.get('key_id')!r}, not the key in {KEY_VARIABLE}"
    expected = sign(manifest, key)["value"]
    if not hmac.compare_digest(str(signature.get("value", "")), expected):
        return "the manifest's signature does not match its content: the manifest was changed after signing"
    return None
