"""Provider records: how each real sender signs, times out and retries (one module per provider).

Each module of this package holds one `Provider` (its ``PROVIDER``): the profile (headers,
signature, timeout, the retry schedule and what a retry carries), the signer, the event-type
header and the headers to redact, where the event id and the amount live, and the provider's
published example payloads. Every table of providers the lab needs is a lookup here; the
facts come from each provider's documentation, source code and reference libraries (the URL
of every fact is in ``ProviderProfile.sources``), embedded on purpose: the lab must not depend
on a file outside the package at run time.

A new provider is a module here that defines ``PROVIDER``; it is found by name, listed in its
``order`` (the order of the target schema's ``signing.scheme`` enum, which names it too).
"""

from __future__ import annotations

import difflib
import importlib
import pkgutil
from collections.abc import Mapping
from typing import Any

from acklab.harness.errors import SpecError
from acklab.harness.wire.providers.base import (
    Attempt,
    Example,
    Provider,
    ProviderProfile,
    Signer,
)

__all__ = [
    "DEFAULT_TIME_COMPRESSION",
    "PROFILES",
    "PROVIDERS",
    "SCHEMES",
    "Attempt",
    "Example",
    "Provider",
    "ProviderProfile",
    "Signer",
    "event_type_header",
    "profile",
    "provider",
]

DEFAULT_TIME_COMPRESSION = 10_000.0


def _discover() -> dict[str, Provider]:
    found: list[Provider] = []
    for module in pkgutil.iter_modules(__path__):
        if module.name == "base" or module.name.startswith("_"):
            continue
        record = getattr(importlib.import_module(f"{__name__}.{module.name}"), "PROVIDER", None)
        if not isinstance(record, Provider) or record.name != module.name:
            raise ImportError(
                f"{__name__}.{module.name} must define PROVIDER, a Provider named {module.name!r}"
            )
        found.append(record)
    return {record.name: record for record in sorted(found, key=lambda p: (p.order, p.name))}


PROVIDERS: Mapping[str, Provider] = _discover()
SCHEMES: tuple[str, ...] = tuple(PROVIDERS)


def provider(scheme: str) -> Provider:
    """The record of `scheme`; SpecError (exit 3) naming the known schemes otherwise."""
    try:
        return PROVIDERS[scheme]
    except KeyError:
        close = difflib.get_close_matches(scheme, SCHEMES, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise SpecError(
            f"unknown signing scheme {scheme!r}; {hint}expected one of {', '.join(SCHEMES)}"
        ) from None


def profile(scheme: str) -> ProviderProfile:
    """The profile of `scheme` (its delivery facts); SpecError naming the known schemes otherwise."""
    return provider(scheme).profile


def event_type_header(scheme: str, explicit: str | None, document: Mapping[str, Any]) -> str:
    """The value of the provider's event-type header for one event.

    ``delivery.event_type`` when the spec sets it, sent as is. Otherwise the provider's naming
    of the body's event: its top-level ``type`` (``webhook`` when it names none); GitLab's
    "... Hook" after the ``object_kind``, Shopify's topics with ``/`` (`Provider.event_type`)."""
    return provider(scheme).type_header(explicit, document)


# The profiles by scheme: a view of the records (older callers and tests read it).
PROFILES: Mapping[str, ProviderProfile] = {name: record.profile for name, record in PROVIDERS.items()}
