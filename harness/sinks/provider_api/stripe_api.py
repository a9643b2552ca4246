"""Stripe's API as a consumer calls it: the endpoints, parameters, errors and headers the stripe library relies on.

Served (`ProviderApi`) where the consumer's ``stripe.api_base`` /
``StripeClient(base_addresses={"api": ...})`` points, it answers the calls real consumers make
on a webhook: retrieve an event, a payment intent, a charge, a refund or a checkout session;
list a charge's refunds (``GET /v1/refunds?charge=``); create a refund; capture a payment
intent. Requests are form-encoded (``metadata[order_id]=...``, ``expand[]=...``) and carry
``Authorization: Bearer sk_...``; answers are JSON with a ``Request-Id``; errors have Stripe's
shape (``{"error": {"type", "code", "message", "param"}}``): ``404 resource_missing`` for an
object the provider never made, ``400 charge_already_refunded``, ``429 rate_limit``.

A ``POST`` with an ``Idempotency-Key`` is executed once: the same key again gets the saved
status and body (``Idempotent-Replayed: true``), with other parameters ``400
idempotency_error``, while the first is still executing ``409 idempotency_key_in_use``.

A refund or a capture changes the provider's objects and makes the events Stripe makes
(``charge.refunded`` and ``refund.created``; ``payment_intent.succeeded`` and
``charge.captured``); the first of them is handed to the `echo` hook *before* the call is
answered, so the consumer receives it while its own request is still open.
"""

from __future__ import annotations

import itertools
import re
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import parse_qsl

from acklab.harness.sinks.provider_api import stripe_objects as so
from acklab.harness.sinks.provider_api.faults import Armed, Call, Faults, Stale, Throttle, Unavailable
from acklab.harness.sinks.provider_api.store import Idempotency, ObjectStore, Saved

ERROR_DOCS = "https://stripe.com/docs/error-codes/"
DEFAULT_LIMIT, MAX_LIMIT = 10, 100
_KEY = re.compile(r"^([^\[\]]+)((?:\[[^\[\]]*\])*)$")


@dataclass(frozen=True)
class Echo:
    """An event the provider sends back at once about a call it executed, and what the call touched."""

    event_id: str
    document: Mapping[str, Any]
    objects: tuple[str, ...]


EchoHook = Callable[[Echo], Awaitable[bool]]  # True: the event was sent back


@dataclass(frozen=True)
class Answer:
    """One answer of the API and what the call was: the objects it touched, whether it changed one."""

    status: int
    body: Mapping[str, Any]
    objects: tuple[str, ...] = ()
    headers: Mapping[str, str] = field(default_factory=dict)
    served: Armed | None = None  # the armed fault that answered instead of the API
    effect: bool = False  # the provider's state changed (a refund made, a payment captured)
    replayed: bool = False  # an idempotency key's saved answer
    echoed: tuple[str, ...] = ()


@dataclass(frozen=True)
class Request:
    """What a call asked: method, path, query and its headers (a case-insensitive mapping)."""

    method: str
    path: str
    query: str
    headers: Mapping[str, str]


# How one call runs once no fault answered it: given the armed fault that lets it through (a stale
# replica) and the call's idempotency key.
Run = Callable[[Armed | None, str | None], Awaitable[Answer]]


def decode_form(text: str) -> dict[str, Any]:
    """A form body or query string as the nested parameters Stripe reads (``a[b]=1`` -> ``{"a": {"b": "1"}}``,
    ``expand[]=x`` and ``expand[0]=x`` -> ``{"expand": ["x"]}``)."""
    params: dict[str, Any] = {}
    for key, value in parse_qsl(text, keep_blank_values=True):
        found = _KEY.match(key)
        if found is None:
            continue
        path = [found.group(1), *re.findall(r"\[([^\[\]]*)\]", found.group(2))]
        node = params
        for part, after in itertools.pairwise(path):
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {}
            node = child
            if after == "":
                break
        last = path[-1]
        if last == "":
            node.setdefault("", []).append(value)
        else:
            node[last] = value
    decoded: dict[str, Any] = _lists(params)
    return decoded


def _lists(node: Any) -> Any:
    """Dicts keyed ``""`` (``[]``) or ``0..n`` (``[0]``) made lists, depth first."""
    if not isinstance(node, dict):
        return node
    node = {k: _lists(v) for k, v in node.items()}
    if set(node) == {""}:
        return list(node[""])
    if node and all(k.isdigit() for k in node):
        return [node[k] for k in sorted(node, key=int)]
    return node


def error(
    status: int, kind: str, message: str, *, code: str | None = None, param: str | None = None
) -> Answer:
    body: dict[str, Any] = {"type": kind, "message": message}
    if code is not None:
        body |= {"code": code, "doc_url": ERROR_DOCS + code.replace("_", "-")}
    if param is not None:
        body["param"] = param
    return Answer(status, {"error": body})


def missing(kind: str, object_id: str, param: str = "id") -> Answer:
    return error(
        404, "invalid_request_error", f"No such {kind}: '{object_id}'", code="resource_missing", param=param
    )


def _amount(value: Any) -> int | None:
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


@dataclass
class StripeApi:
    """The ASGI app; `record` is told of every call and its answer, `echo` of every event a call makes."""

    store: ObjectStore
    faults: Faults
    idempotency: Idempotency
    record: Callable[[Request, bytes, Answer], None]
    echo: EchoHook | None = None
    max_bytes: int = 1 << 20

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        from starlette.requests import Request as Incoming
        from starlette.responses import JSONResponse

        if scope["type"] != "http":
            return
        request = Incoming(scope, receive)
        body = bytearray()
        async for chunk in request.stream():
            body += chunk[: self.max_bytes + 1 - len(body)]
            if len(body) > self.max_bytes:
                break
        raw = bytes(body[: self.max_bytes])
        method, path, query = request.method.upper(), request.url.path, request.url.query
        headers = {k.lower(): v for k, v in request.headers.items()}
        if len(body) > self.max_bytes:  # as every sink: past the limit, answered 413 and kept for no event
            answer = error(413, "invalid_request_error", "Request body too large.")
        else:
            answer = await self.answer(method, path, query, headers, raw)
        self.record(Request(method, path, query, request.headers), raw, answer)
        shown = {
            "Request-Id": "req_" + secrets.token_hex(12),
            "Stripe-Version": so.API_VERSION,
            **answer.headers,
        }
        await JSONResponse(dict(answer.body), status_code=answer.status, headers=shown)(scope, receive, send)

    async def answer(
        self, method: str, path: str, query: str, headers: Mapping[str, str], raw: bytes
    ) -> Answer:
        auth = headers.get("authorization", "")
        if not auth.startswith("Bearer ") or len(auth) <= len("Bearer "):
            return error(
                401,
                "invalid_request_error",
                "You did not provide an API key. You need to provide your API key in the Authorization "
                "header, using Bearer auth (e.g. 'Authorization: Bearer YOUR_SECRET_KEY').",
            )
        params = decode_form(raw.decode("utf-8", "replace") if method == "POST" else query)
        route = self._route(method, path)
        if route is None:
            return error(
                404,
                "invalid_request_error",
                f"Unrecognized request URL ({method}: {path}). Please see https://stripe.com/docs "
                "or we can help at https://support.stripe.com/.",
            )
        touched, run = route(params)
        call = Call(method, path, touched, write=method == "POST")
        armed = self.faults.answering(call)
        if armed is not None and not isinstance(armed.fault, Stale):
            return replace(self._fault_answer(armed, call), objects=touched, served=armed)
        key = headers.get("idempotency-key") if method == "POST" else None
        if key:
            saved = self.idempotency.begin(key, method, path, params)
            if saved is not None:
                return self._saved(saved, key, method=method, path=path, params=params, touched=touched)
        try:
            answer = await run(armed, key)
        except Exception as exc:  # the lab's own bug: answered as Stripe answers one, never saved
            if key:
                self.idempotency.forget(key)
            return error(500, "api_error", f"An unknown error occurred ({type(exc).__name__}).")
        if key:
            self.idempotency.finish(key, answer.status, answer.body)
        return replace(answer, objects=answer.objects or touched, served=armed if armed else None)

    @staticmethod
    def _saved(
        saved: Saved, key: str, *, method: str, path: str, params: Mapping[str, Any], touched: tuple[str, ...]
    ) -> Answer:
        if (saved.method, saved.path, dict(saved.params)) != (method, path, dict(params)):
            return error(
                400,
                "idempotency_error",
                f"Keys for idempotent requests can only be used with the same parameters they were "
                f"first used with. Try using a key other than '{key}' if you meant to execute a "
                "different request.",
            )
        if saved.status is None:
            return error(
                409,
                "idempotency_error",
                "There is currently another in-progress request using this Idempotent Key (that "
                "probably means you submitted twice, and the other request is still going through): "
                f"{key}. Please try again later.",
                code="idempotency_key_in_use",
            )
        return Answer(
            saved.status,
            saved.body or {},
            objects=touched,
            headers={"Idempotent-Replayed": "true", "Original-Request": "req_replayed"},
            replayed=True,
        )

    @staticmethod
    def _fault_answer(armed: Armed, call: Call) -> Answer:
        fault = armed.fault
        if isinstance(fault, Throttle):
            answer = error(
                429,
                "invalid_request_error",
                "Request rate limit exceeded. Learn more about rate limits here "
                "https://stripe.com/docs/rate-limits.",
                code="rate_limit",
            )
            return replace(answer, headers={"Retry-After": str(fault.retry_after_s)})
        if isinstance(fault, Unavailable):
            return error(
                fault.status,
                "api_error",
                "An unknown error occurred. The service is temporarily unavailable.",
            )
        # Lag: the object is not on this replica yet
        kind = so.PREFIXES.get(next((o[:3] for o in call.objects if o[:3] in so.PREFIXES), ""), "event")
        return missing(kind, next(iter(call.objects), ""))

    # -- routes: each returns what the call touches, and how to run it -------------------

    def _route(
        self, method: str, path: str
    ) -> Callable[[Mapping[str, Any]], tuple[tuple[str, ...], Run]] | None:
        parts = path.strip("/").split("/")
        if method == "GET" and len(parts) == 3 and parts[:2] == ["v1", "events"]:
            return lambda p: ((parts[2],), self._get_event(parts[2]))
        retrievable = {"payment_intents": "payment_intent", "charges": "charge", "refunds": "refund"}
        if method == "GET" and len(parts) == 3 and parts[0] == "v1" and parts[1] in retrievable:
            return lambda p: ((parts[2],), self._get(retrievable[parts[1]], parts[2], p))
        if method == "GET" and parts[:3] == ["v1", "checkout", "sessions"] and len(parts) == 4:
            return lambda p: ((parts[3],), self._get("checkout.session", parts[3], p))
        if method == "GET" and parts == ["v1", "refunds"]:
            return lambda p: (self._named(p, "charge", "payment_intent"), self._list_refunds(p))
        if method == "POST" and parts == ["v1", "refunds"]:
            return lambda p: (self._named(p, "charge", "payment_intent"), self._refund(p))
        if (
            method == "POST"
            and len(parts) == 4
            and parts[:2] == ["v1", "payment_intents"]
            and parts[3] == "capture"
        ):
            return lambda p: ((parts[2],), self._capture(parts[2], p))
        return None

    @staticmethod
    def _named(params: Mapping[str, Any], *names: str) -> tuple[str, ...]:
        return tuple(str(params[n]) for n in names if isinstance(params.get(n), str) and params[n])

    def _get_event(self, event_id: str) -> Run:
        async def run(armed: Armed | None, key: str | None) -> Answer:
            found = self.store.event(event_id)
            return Answer(200, found) if found is not None else missing("event", event_id)

        return run

    def _get(self, kind: str, object_id: str, params: Mapping[str, Any]) -> Run:
        async def run(armed: Armed | None, key: str | None) -> Answer:
            current = self.store.current(object_id)
            if current is None or current.doc.get("object") != kind:
                return missing(kind, object_id)
            doc = self.store.previous(object_id) if armed is not None else dict(current.doc)
            return Answer(200, self._expanded(doc or dict(current.doc), params))

        return run

    def _expanded(self, doc: Mapping[str, Any], params: Mapping[str, Any]) -> dict[str, Any]:
        """`doc` with each ``expand[]`` field naming a linked object replaced by that object."""
        wanted = params.get("expand")
        shown = dict(doc)
        for name in wanted if isinstance(wanted, list) else ():
            linked = shown.get(str(name))
            if isinstance(linked, str) and str(name) in so.LINKS.get(str(doc.get("object")), ()):
                found = self.store.current(linked)
                if found is not None:
                    shown[str(name)] = dict(found.doc)
        return shown

    def _list_refunds(self, params: Mapping[str, Any]) -> Run:
        async def run(armed: Armed | None, key: str | None) -> Answer:
            charge, intent = params.get("charge"), params.get("payment_intent")
            for name, value in (("charge", charge), ("payment_intent", intent)):
                if isinstance(value, str) and self.store.current(value) is None:
                    return missing(name, value, param=name)
            found = self.store.refunds(
                charge=charge if isinstance(charge, str) else None,
                payment_intent=intent if isinstance(intent, str) else None,
            )
            limit = min(max(_amount(params.get("limit")) or DEFAULT_LIMIT, 1), MAX_LIMIT)
            return Answer(
                200,
                {
                    "object": "list",
                    "data": found[:limit],
                    "has_more": len(found) > limit,
                    "url": "/v1/refunds",
                },
            )

        return run

    def _charge_of(self, params: Mapping[str, Any]) -> tuple[dict[str, Any] | None, Answer | None]:
        """The charge a refund names (directly, or through its payment intent), or the error answer."""
        charge_id, intent_id = params.get("charge"), params.get("payment_intent")
        if not isinstance(charge_id, str) and not isinstance(intent_id, str):
            return None, error(
                400,
                "invalid_request_error",
                "One of the following params should be provided for this request: charge or payment_intent.",
                code="parameter_missing",
            )
        if isinstance(intent_id, str) and not isinstance(charge_id, str):
            intent = self.store.current(intent_id)
            if intent is None or intent.doc.get("object") != "payment_intent":
                return None, missing("payment_intent", intent_id, param="payment_intent")
            charge_id = intent.doc.get("latest_charge")
            if not isinstance(charge_id, str):
                return None, error(
                    400,
                    "invalid_request_error",
                    f"This PaymentIntent ({intent_id}) does not have a successful charge to refund.",
                    code="charge_not_refundable",
                )
        found = self.store.current(str(charge_id))
        if found is None or found.doc.get("object") != "charge":
            return None, missing("charge", str(charge_id), param="charge")
        return dict(found.doc), None

    def _refund(self, params: Mapping[str, Any]) -> Run:
        async def run(armed: Armed | None, key: str | None) -> Answer:
            charge, refused = self._charge_of(params)
            if charge is None:
                return refused or error(400, "invalid_request_error", "no charge")
            left = int(charge["amount_captured"]) - int(charge["amount_refunded"])
            if left <= 0:
                return error(
                    400,
                    "invalid_request_error",
                    f"Charge {charge['id']} has already been refunded.",
                    code="charge_already_refunded",
                )
            wanted = params.get("amount")
            amount = _amount(wanted) if wanted is not None else left
            if amount is None or amount <= 0:
                return error(
                    400,
                    "invalid_request_error",
                    "Invalid positive integer",
                    code="parameter_invalid_integer",
                    param="amount",
                )
            if amount > left:
                return error(
                    400,
                    "invalid_request_error",
                    f"Refund amount ({amount}) is greater than unrefunded amount on charge ({left})",
                    code="amount_too_large",
                    param="amount",
                )
            now = int(time.time())
            refund = so.refund(
                {
                    "id": "re_" + secrets.token_hex(12),
                    "amount": amount,
                    "charge": charge["id"],
                    "payment_intent": charge.get("payment_intent"),
                    "currency": charge["currency"],
                    "metadata": params.get("metadata") or {},
                    "reason": params.get("reason"),
                },
                created=now,
            )
            refunded = int(charge["amount_refunded"]) + amount
            after = {
                **charge,
                "amount_refunded": refunded,
                "refunded": refunded >= int(charge["amount_captured"]),
            }
            previous = {"amount_refunded": charge["amount_refunded"], "refunded": charge["refunded"]}
            echoed = await self._made(
                [("charge.refunded", after, previous), ("refund.created", refund, None)], key, now
            )
            return Answer(200, refund, objects=(refund["id"], charge["id"]), effect=True, echoed=echoed)

        return run

    def _capture(self, intent_id: str, params: Mapping[str, Any]) -> Run:
        async def run(armed: Armed | None, key: str | None) -> Answer:
            found = self.store.current(intent_id)
            if found is None or found.doc.get("object") != "payment_intent":
                return missing("payment_intent", intent_id, param="intent")
            intent = dict(found.doc)
            if intent.get("status") != "requires_capture":
                return error(
                    400,
                    "invalid_request_error",
                    f"This PaymentIntent could not be captured because it has a status of "
                    f"{intent.get('status')}. Only a PaymentIntent with one of the following statuses may "
                    "be captured: requires_capture.",
                    code="payment_intent_unexpected_state",
                )
            amount = _amount(params.get("amount_to_capture")) or int(intent["amount"])
            now = int(time.time())
            after = {**intent, "status": "succeeded", "amount_received": amount, "amount_capturable": 0}
            made: list[tuple[str, dict[str, Any], dict[str, Any] | None]] = [
                ("payment_intent.succeeded", after, {"status": "requires_capture"})
            ]
            charge = self.store.current(str(intent.get("latest_charge")))
            if charge is not None:
                made.append(
                    (
                        "charge.captured",
                        {**charge.doc, "captured": True, "amount_captured": amount},
                        {"captured": False},
                    )
                )
            echoed = await self._made(made, key, now)
            return Answer(200, after, objects=(intent_id,), effect=True, echoed=echoed)

        return run

    async def _made(
        self,
        changes: list[tuple[str, dict[str, Any], dict[str, Any] | None]],
        key: str | None,
        now: int,
    ) -> tuple[str, ...]:
        """Keep the objects a call changed and the events Stripe makes for them; echo the first.

        The echo is awaited before the call is answered: the consumer receives the provider's
        webhook about its own call while that call is still open."""
        events = []
        for event_type, obj, previous in changes:
            event_id = "evt_" + secrets.token_hex(12)
            self.store.put(obj, cause=event_id)
            document = so.event(
                event_id,
                event_type,
                obj,
                created=now,
                previous=previous,
                request_id="req_" + secrets.token_hex(12),
                idempotency_key=key,
            )
            self.store.record_event(event_id, document, (str(obj["id"]),))
            events.append(Echo(event_id, document, (str(obj["id"]),)))
        if self.echo is None or not events or not await self.echo(events[0]):
            return ()
        return (events[0].event_id,)
