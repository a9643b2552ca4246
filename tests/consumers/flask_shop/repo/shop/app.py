"""The shop's Flask app: ``gunicorn shop.app:app``; its webhook at ``/hooks/payments``."""

import os

from flask import Flask, request
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from .hooks import order_paid

app = Flask(__name__)


@app.post("/hooks/payments")
def payments():
    try:
        event = Webhook(os.environ["SHOP_WEBHOOK_SECRET"]).verify(request.get_data(), dict(request.headers))
    except WebhookVerificationError:
        return {"error": "bad signature"}, 400
    order_paid(request.headers["webhook-id"], event)
    return {"ok": True}


@app.get("/health")
def health():
    return {"ok": True}
