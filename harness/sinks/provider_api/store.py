"""What the provider knows: the events it sent, every version of every object, and its idempotency keys.

Objects exist only because an event the provider really sent (or an API call it executed)
made them: `ObjectStore.emit` takes one event's body and keeps the object its ``data.object``
names — completed as the API returns it — and the objects that implies (`stripe_objects.implied`).
A later event about the same object is a new version; the provider's state is the newest, in
the order the provider emitted them, whatever order they were delivered in. A charge whose
``amount_refunded`` grew implies a refund for the difference, so ``GET /v1/refunds?charge=``
lists what the charge's events say.

`Idempotency` keeps what Stripe keeps per ``Idempotency-Key``: the first request's method, path
and parameters, and the answer it got once the endpoint began executing; a key in flight is
refused with 409 (https://docs.stripe.com/api/idempotent_requests).

Shared by the API's thread and the lab's loop: one lock guards each.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from acklab.harness.sinks.provider_api import stripe_objects as so


@dataclass(frozen=True)
class Version:
    """One version of an object: its body, and the event that made it (None: an API call)."""

    doc: Mapping[str, Any]
    event_id: str | None


@dataclass
class ObjectStore:
    """The provider's objects and events, by id."""

    _lock: threading.Lock = field(default_factory=threading.Lock)
    _versions: dict[str, list[Version]] = field(default_factory=dict)
    _events: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    _objects_of: dict[str, list[str]] = field(default_factory=dict)  # event id -> objects it made or changed
    _created: dict[str, str] = field(default_factory=dict)  # object id -> the event that first made it

    def emit(self, event_id: str, document: Mapping[str, Any], *, created: int) -> tuple[str, ...]:
        """Keep one event the provider sent and the objects it names; its objects' ids. Emitting an
        event twice changes nothing (a retry is the same event)."""
        with self._lock:
            if event_id in self._events:
                return tuple(self._objects_of.get(event_id, ()))
            self._events[event_id] = document
            data = document.get("data")
            given = data.get("object") if isinstance(data, Mapping) else None
            if not isinstance(given, Mapping):
                return ()
            current = self._current(str(given.get("id", "")))
            obj = so.complete({**(current.doc if current else {}), **given}, created=created)
            if obj is None:
                return ()
            touched = [self._put(obj, event_id)]
            for implied in so.implied(obj, created=created):
                if self._current(implied["id"]) is None:
                    touched.append(self._put(implied, event_id))
            if obj["object"] == "charge":
                touched += self._refunds_implied(obj, event_id, created)
            self._objects_of[event_id] = touched
            return tuple(touched)

    def _current(self, object_id: str) -> Version | None:
        versions = self._versions.get(object_id)
        return versions[-1] if versions else None

    def _put(self, doc: Mapping[str, Any], event_id: str | None) -> str:
        object_id = str(doc["id"])
        self._versions.setdefault(object_id, []).append(Version(dict(doc), event_id))
        if event_id is not None:
            self._created.setdefault(object_id, event_id)
        return object_id

    def _refunds_implied(self, charge: Mapping[str, Any], event_id: str, created: int) -> list[str]:
        """A refund for what the charge's ``amount_refunded`` says beyond the refunds known."""
        known = sum(r["amount"] for r in self._refunds(charge=str(charge["id"])))
        missing = int(charge.get("amount_refunded") or 0) - known
        if missing <= 0:
            return []
        made = so.refund(
            {
                "id": so.derived_id("re_", event_id),
                "amount": missing,
                "charge": charge["id"],
                "payment_intent": charge.get("payment_intent"),
                "currency": charge.get("currency"),
            },
            created=created,
        )
        return [self._put(made, event_id)]

    def put(self, doc: Mapping[str, Any], *, cause: str | None = None) -> None:
        """A new version made by an API call (a refund, a capture), or by the event `cause` it emitted."""
        with self._lock:
            self._put(doc, cause)
            if cause is not None:
                self._objects_of.setdefault(cause, []).append(str(doc["id"]))

    def record_event(self, event_id: str, document: Mapping[str, Any], objects: tuple[str, ...]) -> None:
        """An event the provider made itself (an API call's consequence), about `objects`."""
        with self._lock:
            self._events[event_id] = document
            self._objects_of.setdefault(event_id, []).extend(objects)

    def current(self, object_id: str) -> Version | None:
        with self._lock:
            return self._current(object_id)

    def previous(self, object_id: str) -> dict[str, Any] | None:
        """The version before the current one (a lagging replica's), or the state before its first event."""
        with self._lock:
            versions = self._versions.get(object_id) or []
        if len(versions) > 1:
            return dict(versions[-2].doc)
        return so.before(versions[-1].doc) if versions else None

    def event(self, event_id: str) -> Mapping[str, Any] | None:
        with self._lock:
            return self._events.get(event_id)

    def objects_of(self, event_id: str) -> tuple[str, ...]:
        with self._lock:
            return tuple(self._objects_of.get(event_id, ()))

    def created_by(self, object_id: str) -> str | None:
        """The event that first made `object_id` (None: an API call made it, or it does not exist)."""
        with self._lock:
            return self._created.get(object_id)

    def events_about(self, object_id: str) -> tuple[str, ...]:
        """Every event that made or changed `object_id`, in the order the provider emitted them."""
        with self._lock:
            return tuple(e for e, objects in self._objects_of.items() if object_id in objects)

    def _refunds(
        self, *, charge: str | None = None, payment_intent: str | None = None
    ) -> list[dict[str, Any]]:
        found = []
        for versions in self._versions.values():
            doc = versions[-1].doc
            if doc.get("object") != "refund":
                continue
            if (charge is None or doc.get("charge") == charge) and (
                payment_intent is None or doc.get("payment_intent") == payment_intent
            ):
                found.append(dict(doc))
        return found

    def refunds(
        self, *, charge: str | None = None, payment_intent: str | None = None
    ) -> list[dict[str, Any]]:
        """The refunds of a charge or payment intent, newest first (as ``GET /v1/refunds`` lists them)."""
        with self._lock:
            found = self._refunds(charge=charge, payment_intent=payment_intent)
        return sorted(found, key=lambda r: (r.get("created", 0), r["id"]), reverse=True)


@dataclass(frozen=True)
class Saved:
    """The first request made with one idempotency key, and the answer it got."""

    method: str
    path: str
    params: Mapping[str, Any]
    status: int | None = None  # None: still executing
    body: Mapping[str, Any] | None = None


@dataclass
class Idempotency:
    """Stripe's idempotency layer: one saved answer per key (keys are never pruned within a run)."""

    _lock: threading.Lock = field(default_factory=threading.Lock)
    _saved: dict[str, Saved] = field(default_factory=dict)

    def begin(self, key: str, method: str, path: str, params: Mapping[str, Any]) -> Saved | None:
        """None: `key` is new and now executing; else what the key already holds."""
        with self._lock:
            found = self._saved.get(key)
            if found is None:
                self._saved[key] = Saved(method, path, dict(params))
            return found

    def finish(self, key: str, status: int, body: Mapping[str, Any]) -> None:
        with self._lock:
            found = self._saved[key]
            self._saved[key] = Saved(found.method, found.path, found.params, status, dict(body))

    def forget(self, key: str) -> None:
        """No answer is saved when the endpoint never began executing (a fault, a refused request)."""
        with self._lock:
            self._saved.pop(key, None)
