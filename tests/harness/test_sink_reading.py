"""What the sinks read of a message or a call: decoded as its reader decodes it, matched by whole
identifiers (`harness.sinks.reading`). Messages are built by the standard library's own mail
classes, as a consumer's code builds them."""

from __future__ import annotations

import json
from email.header import Header
from email.message import EmailMessage
from email.mime.multipart import MIMEMultipart
from email.mime.text import MIMEText

import pytest

from acklab.harness.sinks.reading import Text, call_text, email_text
from tests.consumers.receipt_mailer import quoted_printable

ORDER = "ord_5f2a9c0e71d4b836"


@pytest.mark.parametrize(
    ("text", "named"),
    [
        (f"order {ORDER}.", True),
        (f"<b>{ORDER}</b>", True),
        (f"/v1/orders/{ORDER}?x=1", True),
        (f'"{ORDER}"', True),
        (f"{ORDER}lc", False),  # the explorer's lifecycle object is another order
        (f"x{ORDER}", False),
        (f"{ORDER}_2", False),
        (f"{ORDER}-lc0", False),  # a hyphen continues an identifier (uuids, derived ids)
        (f"in_{ORDER}", True),  # a type prefix tags the id (Stripe's in_, cus_, ch_)
        (f"re-{ORDER}", True),
        (f"x_y{ORDER}", False),
        (ORDER[:-1], False),
    ],
)
def test_an_id_is_named_only_as_a_whole_identifier(text, named):
    assert Text(text).names(ORDER) is named


def test_the_rule_holds_both_ways_between_an_id_and_one_it_prefixes():
    longer = f"{ORDER}lc"
    assert Text(f"refund {longer}").names(ORDER) is False
    assert Text(f"refund {ORDER}").names(longer) is False
    both = Text(f"refund {ORDER} and {longer}")
    assert both.names(ORDER)
    assert both.names(longer)


def test_a_match_with_punctuation_is_bound_by_its_own_text_where_it_has_it():
    assert Text(f"Order #{ORDER}: paid").names(f"#{ORDER}:")
    assert Text(f"Order x#{ORDER}: paid").names(f"#{ORDER}:")  # '#' needs no boundary before it
    assert not Text(f"Order #{ORDER}x: paid").names(f"#{ORDER}")  # the id's end still does
    assert Text(f"/orders/{ORDER}/refund").names(f"{ORDER}/")
    assert not Text(f"/orders/x{ORDER}/refund").names(f"{ORDER}/")
    assert not Text("").names(ORDER)
    assert not Text(ORDER).names("")


def test_every_transfer_encoding_charset_and_part_is_read_as_the_customer_reads_it():
    base64 = MIMEText(f"Commande {ORDER} payée", "plain", "utf-8")
    qp = quoted_printable("x" * 69 + f" {ORDER} payée")  # soft-broken inside the id
    latin = quoted_printable(f"Commande n°{ORDER} réglée", "iso-8859-1")  # "n=B0ord_..." on the wire
    html = MIMEText(
        f"<p>Commande&nbsp;<a href='/o/{ORDER}'>&#111;rd_5f2a9c0e71d4b836</a></p>", "html", "utf-8"
    )
    nested = MIMEMultipart("mixed")
    inner = MIMEMultipart("alternative")
    inner.attach(MIMEText(f"Commande {ORDER}", "plain", "utf-8"))
    nested.attach(inner)
    subject = MIMEText("merci", "plain", "utf-8")
    subject["Subject"] = Header(f"Reçu {ORDER}", "utf-8").encode()
    for message in (base64, qp, latin, html, nested, subject):
        raw = message.as_bytes()
        assert not Text(raw.decode("ascii")).names(ORDER)  # the wire does not show it whole
        assert email_text(raw).names(ORDER)
    # the HTML's entity-written id is the id (its href alone would not be removed by decoding)
    only_entities = MIMEText("<p>&#111;rd_5f2a9c0e71d4b836</p>", "html", "utf-8")
    assert email_text(only_entities.as_bytes()).names(ORDER)


def test_a_message_names_no_id_it_only_prefixes_and_a_broken_message_is_read_as_sent():
    message = EmailMessage()
    message["Subject"] = f"Receipt {ORDER}lc"
    message.set_content(f"for {ORDER}lc", cte="base64")
    assert not email_text(message.as_bytes()).names(ORDER)
    assert email_text(message.as_bytes()).names(f"{ORDER}lc")
    # a charset nobody knows, a header that does not parse: the bytes are still read
    odd = (
        f"Subject: =?x-unknown?q?{ORDER}?=\r\nContent-Type: text/plain; charset=x-unknown\r\n\r\n{ORDER}\r\n"
    )
    assert email_text(odd.encode()).names(ORDER)
    assert email_text(b"\xff\xfe\x00garbage " + ORDER.encode()).names(ORDER)


def test_a_call_is_read_as_the_api_reads_it():
    escaped = "".join(c if c.isalnum() else f"\\u{ord(c):04x}" for c in ORDER)
    assert call_text("/v1/refunds", "", f'{{"order": "{escaped}"}}'.encode()).names(ORDER)
    assert call_text("/v1/refunds", "", json.dumps({"n": [{"id": ORDER}]}).encode()).names(ORDER)
    assert call_text("/v1/refunds", "", json.dumps({"amount": 450789469}).encode()).names("450789469")
    assert call_text("/v1/refunds", "", f"metadata%5Border%5D={ORDER.replace('_', '%5F')}".encode()).names(
        ORDER
    )
    assert call_text("/v1/refunds", f"order={ORDER.replace('_', '%5F')}", b"").names(ORDER)
    assert call_text(f"/v1/orders/{ORDER.replace('_', '%5F')}", "", b"").names(ORDER)
    assert not call_text("/v1/refunds", "", json.dumps({"order": f"{ORDER}lc"}).encode()).names(ORDER)
    deep = b"[" * 100_000 + b"]" * 100_000  # past the JSON parser's depth: read as text, no crash
    assert not call_text("/v1/refunds", "", deep).names(ORDER)
