"""Sender-side signing: each provider's signer (`harness.wire.providers`), and what records show of it.

Each signer turns one delivery attempt into the headers that provider would send. A retry
is signed again: schemes that sign a timestamp get a fresh one per attempt, exactly like
the real sender, while the body bytes and the event id stay identical.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from acklab.evidence.redaction import REDACTED, known
from acklab.harness.errors import SpecError
from acklab.harness.wire.providers import PROVIDERS, provider
from acklab.harness.wire.providers.base import Attempt, Signer, whsec_key

__all__ = [
    "REDACTED_HEADERS",
    "SIGNERS",
    "Attempt",
    "Signer",
    "foreign_secret",
    "redact_headers",
    "rotated",
    "rotation_format",
    "signs_body",
    "signs_timestamp",
    "whsec_key",
]

# Headers whose values are (or are derived from) a secret; never written to evidence.
REDACTED_HEADERS = frozenset({"authorization"}).union(*(p.redacted_headers for p in PROVIDERS.values()))
# Each scheme's signer, by name: a view of the provider records.
SIGNERS: Mapping[str, Signer] = {name: record.signer for name, record in PROVIDERS.items()}


def redact_headers(headers: Mapping[str, str], also: Iterable[str] = ()) -> dict[str, str]:
    """The headers as records show them: signature and token values, and those of the headers
    named in `also` (a spec's own ``headers:``), as ``[redacted]``; every other value through
    the process's redaction (`acklab.evidence.redaction`)."""
    hidden = REDACTED_HEADERS | {name.lower() for name in also}
    redactor = known()
    return {k: (REDACTED if k.lower() in hidden else redactor.text(v)) for k, v in headers.items()}


def signs_timestamp(scheme: str, secret: str) -> bool:
    """Whether a signature of `scheme` covers the attempt's timestamp (replay: stale check)."""
    return provider(scheme).signer.signs_timestamp(secret)


def signs_body(scheme: str, secret: str) -> bool:
    """Whether a delivery of `scheme` carries a signature over its body (replay: tampered check)."""
    return provider(scheme).signer.signs_body(secret)


def foreign_secret(scheme: str, entropy: bytes, like: str = "") -> str:
    """Another valid-looking secret of the same format as `like`: a signature with it must be rejected."""
    return provider(scheme).signer.foreign_secret(entropy, like)


def rotation_format(scheme: str, secret: str) -> str | None:
    """None when `scheme` sends one signature per active secret during a rotation, else why not."""
    return provider(scheme).signer.rotation_refusal(secret)


def rotated(scheme: str, signed: Sequence[Mapping[str, str]]) -> dict[str, str]:
    """The headers of one attempt signed with several secrets: `signed` holds the headers each secret
    alone gives (same attempt), in the order the signatures are written (`Signer.rotation`)."""
    rotation = provider(scheme).signer.rotation
    if rotation is None:
        raise SpecError(f"signing.rotation: {rotation_format(scheme, '')}")
    return rotation.rotated(signed)
