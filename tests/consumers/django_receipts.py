"""A Django receipt view that mails through Django's own SMTP backend (``django.core.mail``).

Settings in this one module: the order table in SQLite (``RECEIPTS_DB``), ``EMAIL_BACKEND`` the
SMTP backend at ``127.0.0.1:$SMTP_PORT`` with ``EMAIL_HOST_USER``/``EMAIL_HOST_PASSWORD``. One
order row per event (``INSERT ... ON CONFLICT DO NOTHING`` in an atomic block); with
``RECEIPTS_MODE``:

* ``every-delivery``: ``send_mail`` on every delivery — one row, two receipts on a redelivery;
* ``after-commit``: ``transaction.on_commit(send_mail)`` only when this delivery inserted the
  row (Django's documented way to send after the commit; correct).

    python -m tests.consumers.django_receipts migrate
    gunicorn tests.consumers.django_receipts:application
"""

from __future__ import annotations

import os
import sys

import django
from django.conf import settings

settings.configure(
    DEBUG=False,
    SECRET_KEY="acklab-test-django-receipts",
    ROOT_URLCONF=__name__,
    ALLOWED_HOSTS=["127.0.0.1", "localhost"],
    DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ["RECEIPTS_DB"]}},
    EMAIL_BACKEND="django.core.mail.backends.smtp.EmailBackend",
    EMAIL_HOST="127.0.0.1",
    EMAIL_PORT=int(os.environ.get("SMTP_PORT", "25")),
    EMAIL_HOST_USER=os.environ.get("SMTP_USER", ""),
    EMAIL_HOST_PASSWORD=os.environ.get("SMTP_PASSWORD", ""),
    EMAIL_USE_TLS=False,
    EMAIL_TIMEOUT=10,
    MIDDLEWARE=[],
    INSTALLED_APPS=[],
)
django.setup()

from django.core.mail import send_mail  # noqa: E402 - after settings
from django.core.wsgi import get_wsgi_application  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.http import HttpRequest, HttpResponse  # noqa: E402
from django.urls import path  # noqa: E402
from django.views.decorators.csrf import csrf_exempt  # noqa: E402
from standardwebhooks import Webhook  # noqa: E402
from standardwebhooks.webhooks import WebhookVerificationError  # noqa: E402


def mail(order_id: str) -> None:
    send_mail(f"Receipt for order {order_id}", f"Thanks for order {order_id}.", "shop@example.test",
              ["buyer@example.test"])  # fmt: skip


@csrf_exempt
def webhook(request: HttpRequest) -> HttpResponse:
    try:
        event = Webhook(os.environ["ACKLAB_TEST_WEBHOOK_SECRET"]).verify(request.body, dict(request.headers))
    except WebhookVerificationError:
        return HttpResponse(status=400)
    event_id, order_id = str(event["id"]), str(event["data"]["order_id"])
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO orders (event_id, order_id) VALUES (%s, %s) ON CONFLICT DO NOTHING",
            [event_id, order_id],
        )
        inserted = cursor.rowcount == 1
        if os.environ["RECEIPTS_MODE"] == "after-commit" and inserted:
            transaction.on_commit(lambda: mail(order_id))
    if os.environ["RECEIPTS_MODE"] == "every-delivery":
        mail(order_id)
    return HttpResponse(status=200)


urlpatterns = [path("webhooks", webhook)]
application = get_wsgi_application()

if __name__ == "__main__" and sys.argv[1:] == ["migrate"]:
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(
            "CREATE TABLE IF NOT EXISTS orders (event_id TEXT PRIMARY KEY, order_id TEXT NOT NULL)"
        )
