"""Receivers shaped like real consumers of each provider, verifying as that provider documents.

Every receiver keeps each request exactly as it arrived (headers and raw body bytes) so a
test can run the provider's reference verifier over the very bytes the lab sent. It
verifies inline too (a failed check answers 401, as a real consumer would), dedupes by the
provider's event id with a unique receipt, answers 409 to a different body under a used
id, and counts its effects in SQLite (``effects``) for the lab's probe.

Verifiers, one per provider, each from the provider's own material:

* Standard Webhooks: the reference library ``standardwebhooks``; Svix's ``svix`` agrees.
* Stripe: ``stripe.Webhook.construct_event`` (stripe-python, tolerance 300 s).
* GitHub: the check of "Validating webhook deliveries"
  (https://docs.github.com/en/webhooks/using-webhooks/validating-webhook-deliveries):
  ``"sha256=" + hmac_sha256(secret, body).hexdigest()`` compared in constant time with
  ``X-Hub-Signature-256``; legacy receivers do the same with sha1 and ``X-Hub-Signature``.
* GitLab: ``X-Gitlab-Token`` equals the secret token (docs: "Validate payloads by using a
  secret token"); a signing token verifies as Standard Webhooks.
* Shopify: "Verify webhook deliveries"
  (https://shopify.dev/docs/apps/build/webhooks/verify-deliveries): base64 of
  hmac_sha256(client secret, raw body) compared with ``X-Shopify-Hmac-Sha256``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import stripe
import svix.webhooks
from sqlalchemy import Column, Integer, MetaData, String, Table, create_engine, func, select
from sqlalchemy.exc import IntegrityError
from standardwebhooks import Webhook
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

EFFECTS_QUERY = "SELECT count(*) FROM effects WHERE event_id = :event_id"

metadata = MetaData()
receipts = Table(
    "receipts",
    metadata,
    Column("event_id", String(128), primary_key=True),
    Column("body_sha256", String(64), nullable=False),
)
effects = Table(
    "effects",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("event_id", String(128), nullable=False),
    Column("detail", String(500)),
)


class Rejected(Exception):
    """The request failed the provider's check."""


Headers = Mapping[str, str]  # lower-case names, as Starlette gives them


def verify_standard(secret: str) -> Callable[[Headers, bytes], None]:
    def verify(headers: Headers, body: bytes) -> None:
        Webhook(secret).verify(body, dict(headers))
        svix.webhooks.Webhook(secret).verify(body, dict(headers))

    return verify


def verify_stripe(secret: str) -> Callable[[Headers, bytes], None]:
    def verify(headers: Headers, body: bytes) -> None:
        stripe.Webhook.construct_event(body, headers.get("stripe-signature"), secret, tolerance=300)

    return verify


def github_signature(secret: str, body: bytes, algorithm: str) -> str:
    """GitHub's documented signature: ``<algorithm>=`` + hex HMAC of the raw body."""
    return f"{algorithm}=" + hmac.new(secret.encode("utf-8"), msg=body, digestmod=algorithm).hexdigest()


def verify_github(secret: str, *, algorithm: str = "sha256") -> Callable[[Headers, bytes], None]:
    header = "x-hub-signature-256" if algorithm == "sha256" else "x-hub-signature"

    def verify(headers: Headers, body: bytes) -> None:
        if not hmac.compare_digest(github_signature(secret, body, algorithm), headers.get(header, "")):
            raise Rejected(f"{header} does not match")

    return verify


def verify_gitlab_token(secret: str) -> Callable[[Headers, bytes], None]:
    def verify(headers: Headers, body: bytes) -> None:
        if not hmac.compare_digest(headers.get("x-gitlab-token", ""), secret):
            raise Rejected("X-Gitlab-Token does not match")

    return verify


def shopify_hmac(secret: str, body: bytes) -> str:
    return base64.b64encode(hmac.new(secret.encode("utf-8"), body, hashlib.sha256).digest()).decode()


def verify_shopify(secret: str) -> Callable[[Headers, bytes], None]:
    def verify(headers: Headers, body: bytes) -> None:
        if not hmac.compare_digest(shopify_hmac(secret, body), headers.get("x-shopify-hmac-sha256", "")):
            raise Rejected("X-Shopify-Hmac-Sha256 does not match")

    return verify


def require_headers(expected: Mapping[str, str]) -> Callable[[Headers, bytes], None]:
    """A consumer that also wants its API key(s) (``X-Api-Key: ...``)."""

    def verify(headers: Headers, body: bytes) -> None:
        for name, value in expected.items():
            if not hmac.compare_digest(headers.get(name.lower(), ""), value):
                raise Rejected(f"{name} is missing or wrong")

    return verify


@dataclass
class Captured:
    """One request as it arrived: headers (lower-case names) and the raw body bytes."""

    headers: dict[str, str]
    body: bytes

    @property
    def document(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    """A consumer: `checks` (all must pass), the event id from `event_id_of`, one effect per event."""

    db_url: str
    checks: list[Callable[[Headers, bytes], None]]
    event_id_of: Callable[[Headers, Any], str]
    detail_of: Callable[[Any], str] = lambda doc: ""
    read_headers: dict[str, str] = field(default_factory=dict)  # what its effects API wants
    captured: list[Captured] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.engine = create_engine(self.db_url, connect_args={"timeout": 30})
        metadata.create_all(self.engine)

    def receive(self, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.captured.append(Captured(headers, body))
        try:
            for check in self.checks:
                check(headers, body)
        except Exception as exc:  # every verifier's own error type: all mean "not authentic"
            return 401, {"error": f"{type(exc).__name__}: {exc}"}
        doc = json.loads(body)
        event_id, digest = self.event_id_of(headers, doc), hashlib.sha256(body).hexdigest()
        try:
            with self.engine.begin() as conn:
                conn.execute(receipts.insert().values(event_id=event_id, body_sha256=digest))
                conn.execute(effects.insert().values(event_id=event_id, detail=self.detail_of(doc)))
        except IntegrityError:
            with self.engine.connect() as conn:
                stored = conn.execute(
                    select(receipts.c.body_sha256).where(receipts.c.event_id == event_id)
                ).scalar_one()
            return (200, {"status": "duplicate"}) if stored == digest else (409, {"error": "conflict"})
        return 200, {"status": "processed"}

    def details(self, event_id: str) -> list[str]:
        with self.engine.connect() as conn:
            rows = conn.execute(select(effects.c.detail).where(effects.c.event_id == event_id)).scalars()
            return list(rows)

    def app(self) -> Starlette:
        async def hooks(request: Request) -> JSONResponse:
            body = await request.body()
            status, answer = await run_in_threadpool(self.receive, dict(request.headers), body)
            return JSONResponse(answer, status_code=status)

        def count(event_id: str) -> int:
            with self.engine.connect() as conn:
                return int(
                    conn.execute(
                        select(func.count()).select_from(effects).where(effects.c.event_id == event_id)
                    ).scalar_one()
                )

        async def alerts(request: Request) -> JSONResponse:
            for name, value in self.read_headers.items():
                if request.headers.get(name) != value:
                    return JSONResponse({"error": f"{name} required"}, status_code=401)
            resource = request.query_params.get("resource", "")
            return JSONResponse({"total": await run_in_threadpool(count, resource)})

        return Starlette(
            routes=[Route("/hooks", hooks, methods=["POST"]), Route("/alerts", alerts, methods=["GET"])]
        )
