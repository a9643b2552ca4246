"""Stripe's objects as its API returns them: payment intents, charges, refunds, checkout sessions, events.

The shapes follow Stripe's API reference (https://docs.stripe.com/api: "The PaymentIntent
object", "The Charge object", "The Refund object", "The Checkout Session object", "The Event
object"): the fields a consumer reads, with their types and the values their lifecycle takes.
An event the lab sends names an object in ``data.object``; the provider's version of it is that
object completed with the fields Stripe always returns, and the objects it implies exist too (a
completed checkout session's payment intent, a succeeded payment intent's charge) — nothing else
does, so a forged event naming an invented object gets the 404 the real API gives.

`before` is the version a lagging read replica still serves: the state the event changed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from acklab.harness.wire.providers import provider

API_VERSION = str(provider("stripe").api_version)
# Stripe's object names and their id prefixes (https://docs.stripe.com/api, each object's ``id``).
PREFIXES = {
    "pi_": "payment_intent",
    "ch_": "charge",
    "py_": "charge",
    "re_": "refund",
    "cs_": "checkout.session",
}
KINDS = frozenset(PREFIXES.values())
# Fields whose value is another object's id, per kind: what ``expand[]`` may replace.
LINKS = {
    "payment_intent": ("latest_charge",),
    "charge": ("payment_intent",),
    "refund": ("charge", "payment_intent"),
    "checkout.session": ("payment_intent",),
}


def kind_of(document: Mapping[str, Any]) -> str | None:
    """The Stripe object `document` is (its ``object`` field, else its id's prefix); None: not one."""
    declared = document.get("object")
    if isinstance(declared, str) and declared in KINDS:
        return declared
    ident = document.get("id")
    if isinstance(ident, str):
        return next((kind for prefix, kind in PREFIXES.items() if ident.startswith(prefix)), None)
    return None


def derived_id(prefix: str, *material: str) -> str:
    """An id Stripe-shaped (``ch_`` + 24 characters), a pure function of `material`."""
    digest = hashlib.sha256("/".join(material).encode()).hexdigest()
    return f"{prefix}{digest[:24]}"


def _int(value: Any, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _text(value: Any, default: str | None = None) -> str | None:
    return value if isinstance(value, str) else default


def _metadata(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, Mapping) else {}


def payment_intent(given: Mapping[str, Any], *, created: int) -> dict[str, Any]:
    """A PaymentIntent: `given`'s fields over the ones Stripe always returns."""
    status = _text(given.get("status"), "succeeded") or "succeeded"
    amount = _int(given.get("amount"), 1000)
    ident = str(given["id"])
    paid = status == "succeeded"
    charge = _text(given.get("latest_charge"))
    if charge is None and status in ("succeeded", "requires_capture"):
        charge = "ch_" + ident.removeprefix("pi_")
    base: dict[str, Any] = {
        "id": ident,
        "object": "payment_intent",
        "amount": amount,
        "amount_capturable": amount if status == "requires_capture" else 0,
        "amount_received": amount if paid else 0,
        "capture_method": "manual" if status == "requires_capture" else "automatic",
        "client_secret": f"{ident}_secret_{derived_id('', ident)[:24]}",
        "created": created,
        "currency": (_text(given.get("currency"), "usd") or "usd").lower(),
        "customer": None,
        "description": None,
        "last_payment_error": None,
        "latest_charge": charge,
        "livemode": False,
        "metadata": {},
        "payment_method": None,
        "payment_method_types": ["card"],
        "status": status,
    }
    return {**base, **given, "latest_charge": charge, "metadata": _metadata(given.get("metadata"))}


def charge(given: Mapping[str, Any], *, created: int) -> dict[str, Any]:
    """A Charge: `given`'s fields over the ones Stripe always returns (``refunds`` is not
    included since API version 2022-11-15: list them with ``GET /v1/refunds?charge=``)."""
    amount = _int(given.get("amount"), 1000)
    captured = given.get("captured", True) is not False
    refunded = _int(given.get("amount_refunded"))
    ident = str(given["id"])
    base: dict[str, Any] = {
        "id": ident,
        "object": "charge",
        "amount": amount,
        "amount_captured": amount if captured else 0,
        "amount_refunded": refunded,
        "balance_transaction": "txn_" + ident.removeprefix("ch_").removeprefix("py_"),
        "captured": captured,
        "created": created,
        "currency": (_text(given.get("currency"), "usd") or "usd").lower(),
        "customer": None,
        "description": None,
        "disputed": False,
        "failure_code": None,
        "failure_message": None,
        "livemode": False,
        "metadata": {},
        "paid": True,
        "payment_intent": _text(given.get("payment_intent")),
        "receipt_url": None,
        "refunded": refunded >= amount,
        "status": "succeeded",
    }
    return {**base, **given, "metadata": _metadata(given.get("metadata"))}


def refund(given: Mapping[str, Any], *, created: int) -> dict[str, Any]:
    """A Refund (``status``: pending, requires_action, succeeded, failed or canceled)."""
    ident = str(given["id"])
    base: dict[str, Any] = {
        "id": ident,
        "object": "refund",
        "amount": _int(given.get("amount")),
        "balance_transaction": "txn_" + ident.removeprefix("re_"),
        "charge": _text(given.get("charge")),
        "created": created,
        "currency": (_text(given.get("currency"), "usd") or "usd").lower(),
        "metadata": {},
        "payment_intent": _text(given.get("payment_intent")),
        "reason": None,
        "receipt_number": None,
        "status": "succeeded",
    }
    return {**base, **given, "metadata": _metadata(given.get("metadata"))}


def checkout_session(given: Mapping[str, Any], *, created: int) -> dict[str, Any]:
    """A Checkout Session (``status``: open, complete, expired; ``payment_status``: paid, unpaid...)."""
    ident = str(given["id"])
    paid = given.get("payment_status", "paid") == "paid"
    base: dict[str, Any] = {
        "id": ident,
        "object": "checkout.session",
        "amount_subtotal": _int(given.get("amount_total"), 1000),
        "amount_total": _int(given.get("amount_total"), 1000),
        "client_reference_id": None,
        "created": created,
        "currency": (_text(given.get("currency"), "usd") or "usd").lower(),
        "customer": None,
        "customer_details": None,
        "expires_at": created + 86400,
        "livemode": False,
        "metadata": {},
        "mode": "payment",
        "payment_intent": _text(given.get("payment_intent")),
        "payment_status": "paid" if paid else "unpaid",
        "status": "complete" if paid else "open",
        "url": None,
    }
    return {**base, **given, "metadata": _metadata(given.get("metadata"))}


COMPLETE = {
    "payment_intent": payment_intent,
    "charge": charge,
    "refund": refund,
    "checkout.session": checkout_session,
}


def complete(given: Mapping[str, Any], *, created: int) -> dict[str, Any] | None:
    """`given` as the API returns it (None: it is no Stripe object the API serves, or has no id)."""
    kind = kind_of(given)
    if kind is None or not isinstance(given.get("id"), str) or not given["id"]:
        return None
    return COMPLETE[kind]({**given, "object": kind}, created=created)


def implied(obj: Mapping[str, Any], *, created: int) -> list[dict[str, Any]]:
    """The objects `obj` implies exist: a paid session's payment intent, a payment intent's charge,
    a charge's payment intent (each only where `obj` names it or its state requires it)."""
    kind = obj["object"]
    found: list[dict[str, Any]] = []
    common = {
        "amount": obj.get("amount", obj.get("amount_total")),
        "currency": obj.get("currency"),
        "metadata": obj.get("metadata"),
    }
    if kind == "checkout.session" and isinstance(obj.get("payment_intent"), str):
        status = "succeeded" if obj.get("payment_status") == "paid" else "requires_payment_method"
        intent = payment_intent({"id": obj["payment_intent"], **common, "status": status}, created=created)
        found += [intent, *implied(intent, created=created)]
    elif kind == "payment_intent" and isinstance(obj.get("latest_charge"), str):
        captured = obj.get("status") == "succeeded"
        found.append(
            charge(
                {"id": obj["latest_charge"], **common, "payment_intent": obj["id"], "captured": captured},
                created=created,
            )
        )
    elif kind == "charge" and isinstance(obj.get("payment_intent"), str):
        found.append(
            payment_intent(
                {
                    "id": obj["payment_intent"],
                    **common,
                    "latest_charge": obj["id"],
                    "status": "succeeded" if obj.get("captured", True) else "requires_capture",
                },
                created=created,
            )
        )
    return found


def before(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The version of `obj` before its event: what a lagging replica serves when it has no older one."""
    kind, stale = obj["object"], dict(obj)
    if kind == "payment_intent":
        stale.update(status="processing", amount_received=0, latest_charge=None)
    elif kind == "charge":
        stale.update(amount_refunded=0, refunded=False)
        if not obj.get("amount_refunded"):
            stale.update(status="pending", paid=False, captured=False, amount_captured=0)
    elif kind == "checkout.session":
        stale.update(status="open", payment_status="unpaid")
    elif kind == "refund":
        stale.update(status="pending")
    return stale


def event(
    event_id: str,
    event_type: str,
    obj: Mapping[str, Any],
    *,
    created: int,
    previous: Mapping[str, Any] | None = None,
    request_id: str | None = None,
    idempotency_key: str | None = None,
) -> dict[str, Any]:
    """An Event as Stripe sends it to an endpoint (a snapshot event) and serves at ``/v1/events/{id}``."""
    data: dict[str, Any] = {"object": dict(obj)}
    if previous:
        data["previous_attributes"] = dict(previous)
    return {
        "id": event_id,
        "object": "event",
        "api_version": API_VERSION,
        "created": created,
        "data": data,
        "livemode": False,
        "pending_webhooks": 1,
        "request": {"id": request_id, "idempotency_key": idempotency_key},
        "type": event_type,
    }
