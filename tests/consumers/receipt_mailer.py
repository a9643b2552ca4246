"""A receipt mailer on the standard library: ``http.server``, ``sqlite3`` and ``smtplib``.

One order row per event (``INSERT OR IGNORE``: a duplicate delivery never adds a row); the
customer gets a receipt email by SMTP at ``SMTP_PORT`` on loopback, logged in with
``SMTP_USER``/``SMTP_PASSWORD`` as a provider's relay asks. Where it sends the email is the
difference between the modes:

* ``every-delivery``: after the commit, on every delivery — one row, but a duplicate delivery
  mails the customer twice (pay #612, pretix #1166);
* ``after-commit``: after the commit, only when this delivery inserted the row (correct);
* ``before-commit``: checks for the row, sends the email, renders the invoice (300 ms), then
  inserts — two deliveries racing both mail the customer while neither has committed, and the
  loser's insert is rolled back;
* ``worker``: acknowledges first and hands the event to a worker thread that writes the row
  and mails 200 ms later (correct, with ``expect.effects_within_s``);
* ``swallow-refusal``: commits the row, then mails; a refused email is logged and the event
  acknowledged — the customer never gets the receipt, and the provider never retries;
* ``fail-on-refusal``: the row and the email in one transaction: a refused email rolls the row
  back and answers 503, so the provider retries (correct);
* ``swallow-timeout``: as ``fail-on-refusal`` for a refused email, but its relay is "just slow":
  a send that times out (after ``SWALLOW_TIMEOUT_S``) is logged, the row committed and the event
  acknowledged — the message the relay never took is never sent again.

``--encoding`` is how the receipt travels, as real mailers send it: ``plain`` (7bit, the order
id readable on the wire); ``base64`` (``MIMEText`` in UTF-8, as Django and most libraries do
for non-ASCII text, its subject one RFC 2047 encoded word); ``quoted-printable`` (one long
line, soft-broken inside the order id); ``multipart`` (an HTML and a text alternative and a
PDF invoice, every part base64); ``rotate`` (each receipt in the next of the four). In none
but ``plain`` does the order id appear on the wire as written.

    SMTP_PORT=2525 python -m tests.consumers.receipt_mailer --port 9000 --db /tmp/r.sqlite --mode after-commit
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import queue
import smtplib
import sqlite3
import threading
import time
from email.charset import QP, Charset
from email.header import Header
from email.message import EmailMessage, Message
from email.mime.application import MIMEApplication
from email.mime.multipart import MIMEMultipart
from email.mime.nonmultipart import MIMENonMultipart
from email.mime.text import MIMEText
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

SCHEMA = "CREATE TABLE IF NOT EXISTS orders (event_id TEXT PRIMARY KEY, order_id TEXT NOT NULL)"
EFFECTS_QUERY = "SELECT count(*) FROM orders WHERE event_id = :event_id"
# Before-commit renders an invoice between the email and the insert. Without it a duplicate's
# email could land after the first delivery's commit, and the sinks (which stamp each email with
# the event's committed rows) could not tell it from a second email sent after a commit.
INVOICE_S = 0.3
SMTP_TIMEOUT_S = 10.0
SWALLOW_TIMEOUT_S = 1.0  # swallow-timeout gives up on the relay within the sender's timeout
ENCODINGS = ("plain", "base64", "quoted-printable", "multipart")
# The quoted-printable receipt's one line puts the order id at column 70 (the lead is ASCII,
# so encoded as written): the encoder's soft break at column 75 falls inside it.
QP_LEAD = "Thank you for shopping with us; the reference of your paid order is:  "


def connect(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=30, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    return conn


def quoted_printable(text: str, charset_name: str = "utf-8") -> Message:
    """`text` as a ``text/plain`` part sent quoted-printable in `charset_name`."""
    charset = Charset(charset_name)
    charset.body_encoding = QP
    part = MIMENonMultipart("text", "plain")
    part.set_payload(text, charset)
    return part


def receipt(order_id: str, encoding: str) -> Message:
    """The receipt for `order_id`, encoded as `encoding` says."""
    if encoding == "plain":
        plain = EmailMessage()
        plain["Subject"] = f"Your receipt for order {order_id}"
        plain.set_content(f"Thank you for your order {order_id}.")
        message: Message = plain
    elif encoding == "base64":
        message = MIMEText(f"Merci ! Votre commande {order_id} est payée.", "plain", "utf-8")
    elif encoding == "quoted-printable":
        message = quoted_printable(f"{QP_LEAD}{order_id}, payée.")
    else:
        message = MIMEMultipart("mixed")
        alternative = MIMEMultipart("alternative")
        alternative.attach(MIMEText(f"Votre commande {order_id} est payée.", "plain", "utf-8"))
        alternative.attach(
            MIMEText(f"<p>Votre commande <strong>{order_id}</strong> est payée.</p>", "html", "utf-8")
        )
        message.attach(alternative)
        invoice = MIMEApplication(b"%PDF-1.4\n% the invoice\n", "pdf")
        invoice.add_header("Content-Disposition", "attachment", filename="facture.pdf")
        message.attach(invoice)
    if encoding != "plain":
        message["Subject"] = Header(f"Reçu de votre commande {order_id}", "utf-8").encode()
    message["From"], message["To"] = "shop@example.test", "buyer@example.test"
    return message


def send_receipt(order_id: str) -> None:
    if "SMTP_PORT" not in os.environ:
        return  # no mail server configured: the shop sends no receipts (the bench's baseline)
    encoding = Handler.encoding
    if encoding == "rotate":
        encoding = ENCODINGS[next(Handler.sent) % len(ENCODINGS)]
    message = receipt(order_id, encoding)
    timeout = SWALLOW_TIMEOUT_S if Handler.mode == "swallow-timeout" else SMTP_TIMEOUT_S
    with smtplib.SMTP("127.0.0.1", int(os.environ["SMTP_PORT"]), timeout=timeout) as smtp:
        smtp.login(os.environ["SMTP_USER"], os.environ["SMTP_PASSWORD"])
        smtp.send_message(message)


class Handler(BaseHTTPRequestHandler):
    db_path = ""
    mode = "after-commit"
    encoding = "plain"
    sent = itertools.count()
    webhook: Webhook
    work: queue.Queue[tuple[str, str]]

    def log_message(self, format: str, *args: object) -> None:
        return

    def answer(self, status: int) -> None:
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self) -> None:
        payload = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        try:
            event = self.webhook.verify(payload, dict(self.headers.items()))
        except WebhookVerificationError:
            self.answer(400)
            return
        event_id, order_id = str(event["id"]), str(event["data"]["order_id"])
        if self.mode == "worker":
            self.work.put((event_id, order_id))
            self.answer(202)
            return
        if self.mode in ("swallow-refusal", "fail-on-refusal", "swallow-timeout"):
            self.answer(self.mail_once(event_id, order_id))
            return
        conn = connect(self.db_path)
        try:
            if self.mode == "before-commit":
                if conn.execute("SELECT 1 FROM orders WHERE event_id = ?", (event_id,)).fetchone() is None:
                    send_receipt(order_id)
                    time.sleep(INVOICE_S)  # the invoice PDF: the window in which a duplicate mails too
                    conn.execute("BEGIN")
                    conn.execute(
                        "INSERT INTO orders (event_id, order_id) VALUES (?, ?)", (event_id, order_id)
                    )
                    conn.execute("COMMIT")
                self.answer(200)
                return
            inserted = conn.execute(
                "INSERT OR IGNORE INTO orders (event_id, order_id) VALUES (?, ?)", (event_id, order_id)
            ).rowcount
        except sqlite3.Error:
            self.answer(500)  # the losing insert of a race: rolled back (sqlite3 rolls back the statement)
            return
        finally:
            conn.close()
        if self.mode == "every-delivery" or inserted:
            send_receipt(order_id)
        self.answer(200)

    def mail_once(self, event_id: str, order_id: str) -> int:
        """The row and the receipt; what a refused receipt does is the mode's."""
        conn = connect(self.db_path)
        try:
            conn.execute("BEGIN IMMEDIATE")
            inserted = conn.execute(
                "INSERT OR IGNORE INTO orders (event_id, order_id) VALUES (?, ?)", (event_id, order_id)
            ).rowcount
            if self.mode == "swallow-refusal":
                conn.execute("COMMIT")
            if inserted:
                try:
                    send_receipt(order_id)
                except (TimeoutError, smtplib.SMTPServerDisconnected):  # smtplib's read timing out
                    print(f"receipt for {order_id}: the relay is slow, it will get there", flush=True)
                    if self.mode != "swallow-timeout":
                        conn.execute("ROLLBACK")
                        return 503
                except smtplib.SMTPException as exc:
                    print(f"receipt for {order_id} refused: {exc}", flush=True)
                    if self.mode != "swallow-refusal":
                        conn.execute("ROLLBACK")
                        return 503
            if conn.in_transaction:
                conn.execute("COMMIT")
            return 200
        except sqlite3.Error:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            return 500
        finally:
            conn.close()


def worker(db_path: str, work: queue.Queue[tuple[str, str]]) -> None:
    while True:
        event_id, order_id = work.get()
        time.sleep(0.2)
        conn = connect(db_path)
        try:
            inserted = conn.execute(
                "INSERT OR IGNORE INTO orders (event_id, order_id) VALUES (?, ?)", (event_id, order_id)
            ).rowcount
        finally:
            conn.close()
        if inserted:
            send_receipt(order_id)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--db", required=True)
    parser.add_argument(
        "--mode",
        choices=(
            "every-delivery",
            "after-commit",
            "before-commit",
            "worker",
            "swallow-refusal",
            "fail-on-refusal",
            "swallow-timeout",
        ),
    )
    parser.add_argument("--encoding", choices=(*ENCODINGS, "rotate"), default="plain")
    args = parser.parse_args()
    conn = connect(args.db)
    conn.execute(SCHEMA)
    conn.close()
    Handler.db_path, Handler.mode, Handler.encoding = args.db, args.mode, args.encoding
    Handler.webhook = Webhook(os.environ["ACKLAB_TEST_WEBHOOK_SECRET"])
    Handler.work = queue.Queue()
    if args.mode == "worker":
        threading.Thread(target=worker, args=(args.db, Handler.work), daemon=True).start()
    print(json.dumps({"serving": args.port, "mode": args.mode}), flush=True)
    ThreadingHTTPServer(("127.0.0.1", args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
