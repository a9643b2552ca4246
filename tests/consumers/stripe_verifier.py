"""A Stripe endpoint that verifies ``Stripe-Signature`` three ways (the standard library's ``http.server``).

Every verified event is recorded once (``INSERT OR IGNORE`` on its id); a delivery that fails
verification is answered 400. How it verifies is the difference between the modes:

* ``first-signature``: hand-rolled — it reads the first ``v1=`` of the header and compares it;
  during a key rotation Stripe sends one ``v1=`` per active secret, and when the retiring
  secret's comes first the delivery is rejected (sandbase-harness #325);
* ``reserialised``: the stripe library's verifier, given the body parsed and dumped again
  (``JSON.stringify(req.body)`` in Express): any body written otherwise than its own dump —
  pretty-printed, escaped, ``1.10`` — is rejected (resend-openapi #113);
* ``library``: ``stripe.WebhookSignature.verify_header`` over the raw bytes (correct).

    ACKLAB_TEST_STRIPE_SECRET=whsec_... python -m tests.consumers.stripe_verifier --port 9000 --db /tmp/v.sqlite \\
        --mode library
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import time

import stripe

from tests.consumers.stripe_hooks import ModeHandler, serve

SCHEMA = "CREATE TABLE IF NOT EXISTS orders (event_id TEXT PRIMARY KEY)"
TOLERANCE_S = 300


def first_signature(payload: bytes, header: str, secret: str) -> bool:
    parts = [p.split("=", 1) for p in header.split(",") if "=" in p]
    signature = next((value for key, value in parts if key == "v1"), "")  # the first one only
    stamp = next((value for key, value in parts if key == "t"), "0")
    expected = hmac.new(secret.encode(), f"{stamp}.".encode() + payload, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, signature) and abs(time.time() - int(stamp)) < TOLERANCE_S


def verified(mode: str, payload: bytes, header: str, secret: str) -> bool:
    if mode == "first-signature":
        return first_signature(payload, header, secret)
    if mode == "reserialised":
        payload = json.dumps(json.loads(payload), separators=(",", ":"), ensure_ascii=False).encode()
    try:
        return bool(stripe.WebhookSignature.verify_header(payload, header, secret, TOLERANCE_S))
    except stripe.SignatureVerificationError:
        return False


class Handler(ModeHandler):
    def do_POST(self) -> None:
        payload = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        header = self.headers.get("Stripe-Signature") or ""
        if not verified(self.mode, payload, header, os.environ["ACKLAB_TEST_STRIPE_SECRET"]):
            self.answer(400, {})
            return
        conn = self.connect()
        try:
            conn.execute("INSERT OR IGNORE INTO orders VALUES (?)", (json.loads(payload)["id"],))
        finally:
            conn.close()
        self.answer(200, {})


if __name__ == "__main__":
    serve(Handler, modes=("first-signature", "reserialised", "library"), schema=SCHEMA)
