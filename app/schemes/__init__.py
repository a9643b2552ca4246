"""The signature schemes the fixture verifies: one module each, found by name.

Each module of this package defines ``SCHEME``, a `Scheme`: how a delivery is verified, where
the provider's event id (the dedupe key) lives, and how a sender signs (for tests and tooling).
``verify(scheme, ...)`` and ``sign(scheme, ...)`` dispatch to it. The fixture imports nothing of
the lab, so this is its own list; a test checks that every scheme here is one the lab's provider
records know (and signs the same way).
"""

from __future__ import annotations

import importlib
import pkgutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol


class Verifier(Protocol):
    """The shape shared by every ``verify_<scheme>`` function."""

    def __call__(
        self,
        secret: str,
        headers: Mapping[str, str],
        body: bytes,
        *,
        tolerance_s: int = ...,
        now: float | None = ...,
    ) -> None: ...


# (secret, event id, body, timestamp) -> the headers a sender of the scheme attaches
Sign = Callable[[str, str, bytes, int], dict[str, str]]


@dataclass(frozen=True)
class Scheme:
    """A provider's signature scheme and where its dedupe key (the event id) lives.

    ``dedupe_headers`` are tried in order; empty means the key is the body's ``id`` field.
    ``signature_header`` and ``other_headers`` are what the OpenAPI document declares.
    """

    name: str
    verify: Verifier
    sign: Sign
    dedupe_headers: tuple[str, ...]
    signature_header: str
    other_headers: tuple[str, ...] = ()
    timestamped: bool = True  # a stale or future signed timestamp is refused
    signs_body: bool = True  # a changed body fails verification
    # Refuses (SigningError) a secret the scheme cannot use; None: any non-empty secret.
    check_secret: Callable[[str], object] | None = None


def _discover() -> dict[str, Scheme]:
    found: dict[str, Scheme] = {}
    for module in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        scheme = getattr(importlib.import_module(f"{__name__}.{module.name}"), "SCHEME", None)
        if not isinstance(scheme, Scheme) or scheme.name != module.name:
            raise ImportError(f"{__name__}.{module.name} must define SCHEME, a Scheme named {module.name!r}")
        found[scheme.name] = scheme
    return found


SCHEMES: Mapping[str, Scheme] = _discover()
NAMES: tuple[str, ...] = tuple(SCHEMES)


def verify(
    scheme: str,
    secret: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    tolerance_s: int = 300,
    now: float | None = None,
) -> None:
    """Verify a delivery under ``scheme``; raise ``VerificationFailed`` with the reason."""
    SCHEMES[scheme].verify(secret, headers, body, tolerance_s=tolerance_s, now=now)


def sign(
    scheme: str, secret: str, event_id: str, body: bytes, *, timestamp: int | None = None
) -> dict[str, str]:
    """The headers a sender of ``scheme`` would attach to ``body`` (for tests and tooling).

    ``event_id`` fills the scheme's event-id header (schemes that carry it in the body ignore it).
    """
    if scheme not in SCHEMES:
        raise ValueError(f"unknown scheme {scheme!r}; expected one of {sorted(SCHEMES)}")
    return SCHEMES[scheme].sign(secret, event_id, body, int(time.time()) if timestamp is None else timestamp)
