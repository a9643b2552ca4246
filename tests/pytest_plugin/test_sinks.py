"""A user's suite counts its app's emails: ``webhook_lab.sinks()`` before the app is built."""

from __future__ import annotations

import re

import pytest

from tests.pytest_plugin.conftest import FAST, LEAN

pytestmark = pytest.mark.slow

SUITE = """
import smtplib
from email.message import EmailMessage

import re

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


DJANGO_CONFTEST = """
from django.conf import settings


def pytest_configure(config):
    # The user's settings: Django's SMTP backend. pytest-django's test environment swaps it for locmem.
    settings.configure(
        SECRET_KEY="a-test-settings-module", ALLOWED_HOSTS=["*"], ROOT_URLCONF="receipts", MIDDLEWARE=[],
        INSTALLED_APPS=[], DATABASES={}, EMAIL_BACKEND="django.core.mail.backends.smtp.EmailBackend",
    )
"""
DJANGO_VIEW = """
import json
import os
import sqlite3

from django.core.mail import send_mail
from django.http import HttpResponse
from django.urls import path


def hook(request):
    event = json.loads(request.body)
    order = event["data"]["order_id"]
    send_mail(f"Receipt for order {order}", "Thank you.", "shop@example.test", ["buyer@example.test"])
    with sqlite3.connect(os.environ["RECEIPTS_DB"], timeout=20) as db:  # the receipt went before this check
        db.execute("INSERT OR IGNORE INTO paid VALUES (?)", (event["id"],))
    return HttpResponse(status=200)


urlpatterns = [path("hooks", hook)]
"""
DJANGO_SPEC = """
apiVersion: acklab/v1
kind: target
name: receipts
endpoint: "http://127.0.0.1:{{port}}/hooks"
signing: {scheme: none}
event: {id: "{{event_id}}", type: order.paid, data: {order_id: "{{order_id}}"}}
effects:
  sql: {url: "sqlite:///{{scratch}}/receipts.db", count: "SELECT count(*) FROM paid WHERE event_id = :event_id"}
  smtp: {listen: "127.0.0.1:{{smtp_port}}"}
expect: {max_emails: 1}
"""
DJANGO_SUITE = """
import os
import sqlite3

import re

import pytest
from django.core.mail.backends.locmem import EmailBackend
from django.conf import settings
from django.core.wsgi import get_wsgi_application


@pytest.mark.webhook_spec("receipts.target.yaml", experiments=["lost-ack"])
def test_receipts(webhook_lab, webhook_experiment):
    assert settings.EMAIL_BACKEND.endswith("locmem.EmailBackend")  # pytest-django's test settings
    assert webhook_lab.placeholders["smtp_port"].isdigit()  # the spec's sink port, allocated
    os.environ["RECEIPTS_DB"] = os.path.join(webhook_lab.placeholders["scratch"], "receipts.db")
    with sqlite3.connect(os.environ["RECEIPTS_DB"]) as db:
        db.execute("CREATE TABLE paid (event_id TEXT PRIMARY KEY)")
    result = webhook_lab.attack(get_wsgi_application())
    assert settings.EMAIL_BACKEND.endswith("locmem.EmailBackend")  # as the test had it, after the attack
    assert result.passed, result.explain()
"""


def test_under_pytest_django_an_in_process_attack_mails_the_spec_sink_not_locmem(pytester):
    pytester.makeconftest(DJANGO_CONFTEST)
    pytester.makepyfile(receipts=DJANGO_VIEW, test_receipts=DJANGO_SUITE)
    (pytester.path / "receipts.target.yaml").write_text(DJANGO_SPEC)
    # A process of its own: Django's settings are configured once per process; pytest-django is on.
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist", "--acklab-trials", "1")
    result.assert_outcomes(failed=1)
    failure = result.stdout.str()
    [plugins] = [line for line in result.outlines if line.startswith("plugins:")]
    assert "django-" in plugins  # pytest-django was on
    assert re.search(r"at-most-once-effect on event evt_\w+: observed 2 emails, expected <= 1", failure), (
        failure
    )


SILENT_SUITE = """
import logging

from starlette.applications import Starlette
from starlette.responses import Response
from starlette.routing import Route

paid = set()


async def receive(request):
    event = await request.json()
    paid.add(event["id"])
    # Development settings: the receipt goes to the log, never to the SMTP relay the spec counts.
    logging.getLogger("shop.mail").info("receipt for %s", event["data"]["order_id"])
    return Response(status_code=200)


def test_receipts(webhook_lab):
    webhook_lab.sinks()
    app = Starlette(routes=[Route("/webhooks", receive, methods=["POST"])])
    result = webhook_lab.attack(app, endpoint="/webhooks", signing="none", experiments=["lost-ack"],
                                effects=lambda event_id: int(event_id in paid))
    assert result.passed, result.explain()
"""


def test_a_sink_that_heard_nothing_while_rows_landed_is_a_warning_of_the_test(pytester):
    pytester.makepyfile(test_receipts=SILENT_SUITE)
    # A process of its own: this suite's warnings-as-errors would make the warning the failure.
    result = pytester.runpytest_subprocess(*FAST, *LEAN, "-p", "no:xdist")
    result.assert_outcomes(passed=1, warnings=1)  # never a silent pass
    result.stdout.fnmatch_lines(
        [
            "*AcklabWarning: acklab: the SMTP sink saw no message while the database gained rows for 1 event(s)*"
        ]
    )
    [bundle] = (pytester.path / ".acklab").glob("*/run.json")
    assert "the SMTP sink saw no message" in bundle.read_text()
