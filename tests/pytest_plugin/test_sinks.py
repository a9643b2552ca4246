"""A user's suite counts its app's emails: ``webhook_lab.sinks()`` before the app is built."""

from __future__ import annotations

import pytest

from tests.pytest_plugin.conftest import FAST

pytestmark = pytest.mark.slow

SUITE = """
import smtplib
from email.message import EmailMessage

import pytest
from starlette.applications import Starlette
from starlette.responses import Response
from starlette.routing import Route


def create_app(smtp_port, *, every_delivery):
    orders = set()

    async def receive(request):
        event = await request.json()
        new = event["id"] not in orders
        orders.add(event["id"])
        if new or every_delivery:
            message = EmailMessage()
            message["From"], message["To"] = "shop@example.test", "buyer@example.test"
            message["Subject"] = "Receipt for " + event["data"]["order_id"]
            message.set_content("thanks")
            with smtplib.SMTP("127.0.0.1", smtp_port, timeout=5) as smtp:
                smtp.send_message(message)
        return Response(status_code=200)

    app = Starlette(routes=[Route("/webhooks", receive, methods=["POST"])])
    return app, lambda event_id: int(event_id in orders)


@pytest.mark.parametrize("every_delivery", [True, False], ids=["every-delivery", "once"])
def test_receipts(webhook_lab, every_delivery):
    sinks = webhook_lab.sinks(smtp={"match": "{{order_id}}"})
    app, count = create_app(sinks.smtp_port, every_delivery=every_delivery)
    result = webhook_lab.attack(app, endpoint="/webhooks", signing="none", effects=count,
                                experiments=["lost-ack"], expect={"max_emails": 1})
    assert result.passed, result.explain()
"""


def test_webhook_lab_sinks_count_the_apps_emails(pytester):
    pytester.makepyfile(test_receipts=SUITE)
    result = pytester.runpytest(*FAST, "--acklab-out", "evidence")
    result.assert_outcomes(failed=1, passed=1)
    failure = "\n".join(result.outlines)
    assert "at-most-once-effect" in failure
    assert "2 emails" in failure
    smtp_logs = list((pytester.path / "evidence").rglob("sinks/smtp.json"))
    assert len(smtp_logs) == 2
