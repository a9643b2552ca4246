"""A user's suite attacks its app beyond one event: ``webhook_lab.attack(lifecycle=, siblings=,
competitor=)``, the competitor a path of the app itself, effects and state read by object."""

from __future__ import annotations

import re

import pytest

from tests.pytest_plugin.conftest import RACES

pytestmark = pytest.mark.slow

SUITE = """
import pytest
from shop_orders import SECRET, count_fulfillments, create_app, order_status

EVENT = {"id": "{{event_id}}", "type": "order.paid", "created": "{{event_time}}",
         "data": {"order_id": "{{order_id}}"}}
LIFECYCLE = {"object": "{{order_id}}", "events": [
    {"type": "order.created", "state": "created"},
    {"type": "order.paid", "state": "paid"},
    {"type": "order.refunded", "state": "refunded"},
]}


@pytest.mark.parametrize("careful", [False, True], ids=["careless", "careful"])
def test_orders_beyond_one_event(webhook_lab, tmp_path, careful):
    db = f"sqlite:///{tmp_path / 'shop.db'}"
    result = webhook_lab.attack(
        create_app(db, careful=careful),
        endpoint="/webhooks",
        secret=SECRET,
        event=EVENT,
        lifecycle=LIFECYCLE,
        siblings=[{"type": "payment.succeeded"}],
        competitor={"url": "/orders/{{order_id}}/complete"},
        effects=lambda event_id, object_id: count_fulfillments(db, event_id, object_id),
        state=lambda event_id, object_id: order_status(db, event_id, object_id),
        experiments=["out-of-order", "sibling-events", "race-with-request"],
    )
    assert result.passed, result.explain()
"""


def test_attack_takes_the_lifecycle_the_siblings_and_a_competitor_path_of_the_app(user_suite):
    pytester = user_suite("shop_orders")
    pytester.makepyfile(test_orders=SUITE)
    result = pytester.runpytest(*RACES, "--acklab-out", "evidence")
    result.assert_outcomes(failed=1, passed=1)
    failure = "\n".join(result.outlines)
    for experiment in ("out-of-order", "sibling-events", "race-with-request"):
        assert f"{experiment}: FAIL" in failure, experiment
    assert re.search(r"newest-state-wins on event evt_\w+: observed \w+, expected == 'refunded'", failure)
    assert re.search(r"at-most-once-per-object on event evt_\w+: observed 2, expected <= 1", failure)
