"""A shop's order webhook as a Django view, in one module: minimal settings, one URL, raw SQL
through Django's connection. The view is correct: it claims the event with a unique receipt
in the same transaction as the fulfillment. ``SHOP_DB`` names the SQLite file."""

from __future__ import annotations

import hashlib
import os

import django
from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.http import HttpRequest, JsonResponse
from django.urls import path
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

if not settings.configured:
    settings.configure(
        DEBUG=False,
        SECRET_KEY="not-secret-a-test-settings-module",
        ALLOWED_HOSTS=["testserver"],
        ROOT_URLCONF=__name__,
        MIDDLEWARE=[],
        INSTALLED_APPS=[],
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ["SHOP_DB"]}},
    )
    django.setup()

verifier = Webhook(SECRET)


def orders(request: HttpRequest) -> JsonResponse:
    body = request.body
    try:
        event = verifier.verify(body, dict(request.headers))
    except WebhookVerificationError:
        return JsonResponse({"error": "bad signature"}, status=401)
    digest = hashlib.sha256(body).hexdigest()
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("INSERT INTO receipts VALUES (%s, %s)", [event["id"], digest])
            cursor.execute(
                "INSERT INTO fulfillments VALUES (%s, %s)", [event["id"], event["data"]["amount_cents"]]
            )
    except IntegrityError:
        with connection.cursor() as cursor:
            cursor.execute("SELECT body_sha256 FROM receipts WHERE event_id = %s", [event["id"]])
            (stored,) = cursor.fetchone()
        if stored != digest:
            return JsonResponse({"error": "conflict"}, status=409)
        return JsonResponse({"status": "duplicate"})
    return JsonResponse({"status": "fulfilled"})


urlpatterns = [path("hooks/orders", orders)]


def create_tables() -> None:
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE IF NOT EXISTS receipts (event_id TEXT PRIMARY KEY, body_sha256 TEXT)")
        cursor.execute("CREATE TABLE IF NOT EXISTS fulfillments (event_id TEXT, amount_cents INTEGER)")


def count_fulfillments(event_id: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM fulfillments WHERE event_id = %s", [event_id])
        (count,) = cursor.fetchone()
    return int(count)
