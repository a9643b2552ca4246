"""Signatures as providers really send them: several at once during a key rotation, and Ed25519 (``v1a``).

**Rotation.** While a rolled secret is still valid, a provider signs every delivery with each
active secret, in one header (a verifier accepts when any one matches):

* Stripe: one ``v1=`` per active secret, ``t=<ts>,v1=<hex>,v1=<hex>`` (up to 24 hours);
* Standard Webhooks (and Svix, GitLab's signing tokens): a space-delimited list,
  ``v1,<base64> v1,<base64>``.

`rotated` builds that header from the headers each secret alone gives, in the order given (the
lab sends both orders: a verifier that reads only the first signature fails one of them).
GitHub, Shopify and GitLab's legacy token send one signature per delivery, so a rotation has no
overlap there to test (`rotation_format` says why).

**Standard Webhooks' asymmetric signatures.** A ``whsk_`` secret (base64 of an Ed25519 private
key: the 32-byte seed, or libsodium's 64-byte seed and public key) signs ``{id}.{timestamp}.{body}``
with Ed25519, sent as ``v1a,<base64 signature>``; the consumer verifies with the ``whpk_``
public key (`public_key`), never holding the secret. Facts: the Standard Webhooks specification,
"Signature scheme" (https://github.com/standard-webhooks/standard-webhooks/blob/main/spec/standard-webhooks.md).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from acklab.harness.errors import SpecError

SECRET_KEY_PREFIX, PUBLIC_KEY_PREFIX = "whsk_", "whpk_"


def _private_key(secret: str) -> object:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    try:
        raw = base64.b64decode(secret.removeprefix(SECRET_KEY_PREFIX), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise SpecError(
            f"a Standard Webhooks asymmetric secret must be {SECRET_KEY_PREFIX!r} + base64 of an Ed25519 private "
            f"key; got a value of {len(secret)} characters that is not base64 after the prefix"
        ) from exc
    if len(raw) not in (32, 64):
        raise SpecError(
            f"a {SECRET_KEY_PREFIX} secret holds an Ed25519 private key: 32 bytes (the seed) or 64 (seed and "
            f"public key, as libsodium keeps them); got {len(raw)} bytes"
        )
    return Ed25519PrivateKey.from_private_bytes(raw[:32])


def is_asymmetric(secret: str) -> bool:
    return secret.startswith(SECRET_KEY_PREFIX)


def check_asymmetric(secret: str) -> None:
    """Raise SpecError unless `secret` is a usable ``whsk_`` key."""
    _private_key(secret)


def sign_v1a(secret: str, content: bytes) -> str:
    """``v1a,<base64 Ed25519 signature of content>`` with the ``whsk_`` key `secret`."""
    key = _private_key(secret)
    return "v1a," + base64.b64encode(key.sign(content)).decode()  # type: ignore[attr-defined]


def public_key(secret: str) -> str:
    """The ``whpk_`` public key a consumer verifies `secret`'s signatures with."""
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    key = _private_key(secret)
    raw = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)  # type: ignore[attr-defined]
    return PUBLIC_KEY_PREFIX + base64.b64encode(raw).decode()


def stripe_list(values: Sequence[str]) -> str:
    """Stripe's: one ``t=`` and every ``v1=``, comma-separated."""
    stamp = next(p for p in values[0].split(",") if p.startswith("t="))
    signatures = [p for v in values for p in v.split(",") if p.startswith("v1=")]
    return ",".join([stamp, *signatures])


def spaced_list(values: Sequence[str]) -> str:
    """Standard Webhooks': the signatures space-delimited."""
    return " ".join(values)


@dataclass(frozen=True)
class SignatureList:
    """How a provider writes several signatures in one header during a key rotation: the header, and
    how the values each secret alone gives are joined (a provider record's ``Signer.rotation``)."""

    header: str
    join: Callable[[Sequence[str]], str]

    def rotated(self, signed: Sequence[Mapping[str, str]]) -> dict[str, str]:
        """The headers of one attempt signed with several secrets: `signed` holds the headers each
        secret alone gives (same attempt), in the order the signatures are written."""
        merged = dict(signed[0])
        name = next(k for k in merged if k.lower() == self.header.lower())
        merged[name] = self.join(
            [next(v for k, v in h.items() if k.lower() == self.header.lower()) for h in signed]
        )
        return merged


STRIPE_LIST = SignatureList("Stripe-Signature", stripe_list)
SPACED_LIST = SignatureList("webhook-signature", spaced_list)
