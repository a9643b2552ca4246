"""The provider's API the lab serves, driven by the real stripe library (unmodified) over real HTTP."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest
import stripe

from acklab.harness.ports import free_port
from acklab.harness.sinks.provider_api import Echo, ProviderApi, ProviderApiConfig
from acklab.harness.sinks.provider_api.faults import Lag, Stale, Throttle, Unavailable
from acklab.harness.sinks.provider_api.stripe_api import decode_form
from acklab.harness.sinks.records import EventKeys, Ledger, SinkLimits

KEY = "sk_test_provider_api_4b1d9e02c7aa51f3"
CREATED = 1_700_000_000


def session_completed(event_id: str, order: str, amount: int = 4200) -> dict:
    """A checkout.session.completed as a spec's template renders it: a paid session naming its intent."""
    return {
        "id": event_id,
        "object": "event",
        "type": "checkout.session.completed",
        "created": CREATED,
        "data": {
            "object": {
                "id": f"cs_test_{order}",
                "object": "checkout.session",
                "payment_intent": f"pi_{order}",
                "payment_status": "paid",
                "amount_total": amount,
                "currency": "eur",
                "metadata": {"order_id": order},
            }
        },
    }


@pytest.fixture
def api() -> Iterator[ProviderApi]:
    ledger = Ledger(SinkLimits())
    served = ProviderApi(ProviderApiConfig("127.0.0.1", free_port()), ledger)
    served.start()
    try:
        yield served
    finally:
        served.stop()


def client(api: ProviderApi, retries: int = 0) -> stripe.StripeClient:
    return stripe.StripeClient(KEY, base_addresses={"api": api.url}, max_network_retries=retries)


def sent(api: ProviderApi, event_id: str, order: str, amount: int = 4200) -> None:
    api.ledger.register(EventKeys(event_id, order, order))
    api.emit(event_id, session_completed(event_id, order, amount), created=CREATED)


def test_the_stripe_library_reads_what_the_events_made_and_nothing_else(api):
    sent(api, "evt_paid_1", "ord1")
    stripe_client = client(api)
    session = stripe_client.v1.checkout.sessions.retrieve("cs_test_ord1")
    assert (session.status, session.payment_status, session.payment_intent) == ("complete", "paid", "pi_ord1")
    intent = stripe_client.v1.payment_intents.retrieve("pi_ord1", params={"expand": ["latest_charge"]})
    assert (intent.status, intent.amount_received, intent.currency) == ("succeeded", 4200, "eur")
    assert intent.metadata["order_id"] == "ord1"
    charge = intent.latest_charge
    assert isinstance(charge, stripe.Charge)
    assert (charge.id, charge.paid, charge.payment_intent) == ("ch_ord1", True, "pi_ord1")
    assert stripe_client.v1.events.retrieve("evt_paid_1").type == "checkout.session.completed"
    # an object no event made: the 404 the real API gives
    with pytest.raises(stripe.InvalidRequestError) as missing:
        stripe_client.v1.payment_intents.retrieve("pi_invented")
    assert (missing.value.http_status, missing.value.code) == (404, "resource_missing")
    assert "No such payment_intent: 'pi_invented'" in str(missing.value)
    # the legacy module-level configuration works the same
    saved = (stripe.api_key, stripe.api_base)
    stripe.api_key, stripe.api_base = KEY, api.url
    try:
        assert stripe.Charge.retrieve("ch_ord1").amount == 4200
    finally:
        stripe.api_key, stripe.api_base = saved
    calls = api.calls()
    assert all(c.headers.get("authorization") == "[redacted]" for c in calls)
    assert calls[0].events == ("evt_paid_1",)
    assert calls[-1].events == ("evt_paid_1",)


def test_refunds_follow_the_charge_and_an_idempotency_key_is_executed_once(api):
    sent(api, "evt_paid_2", "ord2", amount=1000)
    stripe_client = client(api)
    first = stripe_client.v1.refunds.create(
        params={"payment_intent": "pi_ord2", "amount": 300, "metadata": {"order_id": "ord2"}},
        options={"idempotency_key": "refund-ord2-a"},
    )
    again = stripe_client.v1.refunds.create(
        params={"payment_intent": "pi_ord2", "amount": 300, "metadata": {"order_id": "ord2"}},
        options={"idempotency_key": "refund-ord2-a"},
    )
    assert again.id == first.id  # the saved answer, not a second refund
    assert again.last_response is not None
    assert again.last_response.headers["Idempotent-Replayed"] == "true"
    with pytest.raises(stripe.IdempotencyError):
        stripe_client.v1.refunds.create(
            params={"payment_intent": "pi_ord2", "amount": 400}, options={"idempotency_key": "refund-ord2-a"}
        )
    # the library's own key: a new refund
    rest = stripe_client.v1.refunds.create(params={"charge": "ch_ord2"})
    assert rest.amount == 700
    listed = stripe_client.v1.refunds.list(params={"charge": "ch_ord2"})
    assert sorted(r.amount for r in listed.data) == [300, 700]
    charge = stripe_client.v1.charges.retrieve("ch_ord2")
    assert (charge.amount_refunded, charge.refunded) == (1000, True)
    with pytest.raises(stripe.InvalidRequestError) as done:
        stripe_client.v1.refunds.create(params={"charge": "ch_ord2", "amount": 1})
    assert done.value.code == "charge_already_refunded"
    effects = [c for c in api.calls() if c.effect]
    assert len(effects) == 2  # two refunds executed; the replay and the refusals changed nothing
    assert {c.idempotency_key for c in effects} >= {"refund-ord2-a"}
    assert all(c.events == ("evt_paid_2",) for c in effects)
    events = {stripe_client.v1.events.retrieve(e).type for c in effects for e in c.echoed} | {"x"}
    assert events == {"x"}  # no echo hook: nothing was sent back


def test_a_charge_refunded_lifecycle_implies_its_refunds():
    from acklab.harness.sinks.provider_api.store import ObjectStore

    store = ObjectStore()
    for k, total in enumerate((300, 700)):
        store.emit(
            f"evt_r{k}",
            {"id": f"evt_r{k}", "type": "charge.refunded",
             "data": {"object": {"id": "ch_x", "object": "charge", "amount": 1000, "amount_refunded": total}}},
            created=CREATED + k,
        )  # fmt: skip
    assert sorted(r["amount"] for r in store.refunds(charge="ch_x")) == [300, 400]
    current, previous = store.current("ch_x"), store.previous("ch_x")
    assert current is not None
    assert previous is not None
    assert (current.doc["amount_refunded"], previous["amount_refunded"]) == (700, 300)


def test_faults_answer_for_one_event_until_lifted(api):
    sent(api, "evt_lag", "ord3")
    sent(api, "evt_other", "ord4")
    stripe_client = client(api)
    api.arm("evt_lag", Lag())
    with pytest.raises(stripe.InvalidRequestError) as lagging:
        stripe_client.v1.payment_intents.retrieve("pi_ord3")
    assert lagging.value.http_status == 404
    with pytest.raises(stripe.InvalidRequestError):
        stripe_client.v1.events.retrieve("evt_lag")
    # another event's objects: untouched
    assert stripe_client.v1.payment_intents.retrieve("pi_ord4").status == "succeeded"
    api.disarm("evt_lag")
    assert stripe_client.v1.payment_intents.retrieve("pi_ord3").status == "succeeded"
    assert [r.served for r in api.served("evt_lag")] == ["lag", "lag"]

    api.arm("evt_lag", Stale())
    assert stripe_client.v1.payment_intents.retrieve("pi_ord3").status == "processing"
    api.arm("evt_lag", Throttle(retry_after_s=2))
    with pytest.raises(stripe.RateLimitError) as limited:
        stripe_client.v1.charges.retrieve("ch_ord3")
    assert (limited.value.headers or {})["Retry-After"] == "2"
    api.arm("evt_lag", Unavailable())
    assert stripe_client.v1.payment_intents.retrieve("pi_ord3").status == "succeeded"  # reads pass
    with pytest.raises(stripe.APIError) as down:
        client(api, retries=1).v1.refunds.create(params={"payment_intent": "pi_ord3"})
    assert down.value.http_status == 503
    api.disarm("evt_lag")
    assert client(api).v1.refunds.create(params={"payment_intent": "pi_ord3"}).amount == 4200
    served = [r.served for r in api.served("evt_lag")]
    assert served == ["lag", "lag", "stale", "throttled", "unavailable", "unavailable"]


def test_a_refund_is_echoed_while_the_call_is_open(api):
    sent(api, "evt_paid_5", "ord5")
    heard: list[tuple[str, dict]] = []

    async def scenario() -> stripe.Refund:
        async def echo(event: Echo) -> None:
            # the refund call is still open: the charge already says refunded
            heard.append((event.document["type"], event.document["data"]["object"]))
            await asyncio.sleep(0.05)

        with api.echoing(echo):
            return await asyncio.to_thread(
                lambda: client(api).v1.refunds.create(
                    params={"charge": "ch_ord5"}, options={"idempotency_key": "k5"}
                )
            )

    refund = asyncio.run(scenario())
    assert [(t, o["id"], o["amount_refunded"]) for t, o in heard] == [("charge.refunded", "ch_ord5", 4200)]
    (call,) = [c for c in api.calls() if c.effect]
    echoed = client(api).v1.events.retrieve(call.echoed[0])
    assert echoed.request is not None
    assert echoed.request.idempotency_key == "k5"
    assert refund.charge == "ch_ord5"
    record = json.loads(json.dumps(call.as_dict()))
    assert record["echoed"] == list(call.echoed)
    assert record["effect"] is True


def test_stripe_form_encoding_decodes_nested_parameters():
    assert decode_form("metadata[order_id]=o1&expand[0]=charge&expand[1]=x&amount=5") == {
        "metadata": {"order_id": "o1"},
        "expand": ["charge", "x"],
        "amount": "5",
    }
    assert decode_form("expand[]=a&expand[]=b") == {"expand": ["a", "b"]}
