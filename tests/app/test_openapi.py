"""The OpenAPI document is honest: schemathesis finds no 5xx and no response that breaks it.

Cases are drawn with ``operation.as_strategy()`` under Hypothesis directly, because
schemathesis' lazy pytest loader (``from_fixture``) does not run under pytest 9.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import SecretStr
from schemathesis import GenerationMode

from acklab.app.main import create_app
from acklab.app.schemes import sign
from acklab.app.settings import Settings
from tests.app.conftest import SECRET

OPERATIONS = [
    ("/webhooks/orders", "POST"),
    ("/health", "GET"),
    ("/orders/{order_id}", "GET"),
    ("/events/{event_id}/effects", "GET"),
    ("/orders/{order_id}/effects", "GET"),
    ("/checkout/{order_id}/complete", "POST"),
]
BOUNDED = settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), database=None)


@pytest.fixture
def fixture_app(sqlite_url: str) -> Iterator[Any]:
    app = create_app(Settings(database_url=sqlite_url, secret=SecretStr(SECRET)))
    yield app
    app.state.fixture.engine.dispose()


@pytest.fixture
def api_schema(fixture_app: Any) -> Any:
    return schemathesis.openapi.from_asgi("/openapi.json", fixture_app)


# Negative data needs an input that can be wrong: only the webhook has one (paths take any string).
CASES = [(path, method, GenerationMode.POSITIVE) for path, method in OPERATIONS] + [
    ("/webhooks/orders", "POST", GenerationMode.NEGATIVE)
]


@pytest.mark.parametrize(("path", "method", "mode"), CASES, ids=[f"{m} {p} {g.value}" for p, m, g in CASES])
def test_the_api_conforms_to_its_document(
    api_schema: Any, path: str, method: str, mode: GenerationMode
) -> None:
    @BOUNDED
    @given(case=api_schema[path][method].as_strategy(generation_mode=mode))
    def check(case: Any) -> None:
        case.call_and_validate()

    check()


def test_signed_deliveries_reach_the_handler_and_conform(api_schema: Any) -> None:
    """Sign what schemathesis generates, so its bodies get past the signature into the database."""
    operation = api_schema["/webhooks/orders"]["POST"]
    seen: set[int] = set()

    @BOUNDED
    @given(case=operation.as_strategy(), repeat=st.booleans())
    def check(case: Any, repeat: bool) -> None:
        body = json.dumps(case.body).encode()
        # Header values must be latin-1 on the wire: derive an ASCII webhook-id from the body's id.
        body_id = case.body.get("id") if isinstance(case.body, dict) else None
        event_id = "evt_" + hashlib.sha256(repr(body_id).encode()).hexdigest()[:24]
        headers = {**sign("standard", SECRET, event_id, body), "content-type": "application/json"}
        for _ in range(2 if repeat else 1):
            response = case.call(headers=headers, data=body)
            assert response.status_code < 500, response.text
            case.validate_response(response)
            seen.add(response.status_code)

    check()
    assert 200 in seen  # the generated valid events were fulfilled, not just refused


def test_the_document_describes_every_endpoint(fixture_app: Any) -> None:
    document = fixture_app.openapi()
    assert set(document["paths"]) == {path for path, _ in OPERATIONS}
    webhook = document["paths"]["/webhooks/orders"]["post"]
    assert set(webhook["responses"]) >= {"200", "202", "401", "409", "413", "422", "503"}
    assert webhook["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/OrderPaidEvent"
    }
    assert document["components"]["securitySchemes"]["webhookSignature"]["name"] == "webhook-signature"
    assert {p["name"] for p in webhook["parameters"]} == {"webhook-id", "webhook-timestamp"}
    required = document["components"]["schemas"]["OrderPaidData"]["required"]
    assert set(required) == {"order_id", "amount_cents", "currency"}


@pytest.mark.parametrize(
    ("scheme", "signature", "others"),
    [
        ("stripe", "Stripe-Signature", set()),
        ("github", "X-Hub-Signature-256", {"X-GitHub-Delivery"}),
        ("gitlab", "X-Gitlab-Token", {"Idempotency-Key"}),
        ("shopify", "X-Shopify-Hmac-Sha256", {"X-Shopify-Webhook-Id"}),
    ],
)
def test_the_document_names_the_configured_schemes_headers(
    sqlite_url: str, scheme: str, signature: str, others: set[str]
) -> None:
    app = create_app(Settings(database_url=sqlite_url, secret=SecretStr(SECRET), scheme=scheme))
    document = app.openapi()
    app.state.fixture.engine.dispose()
    assert document["components"]["securitySchemes"]["webhookSignature"]["name"] == signature
    assert {p["name"] for p in document["paths"]["/webhooks/orders"]["post"]["parameters"]} == others
