"""A Flask shop as a new user of acklab has one, receipts sent with the standard library's ``smtplib``.

``repo/`` is the user's repository: the Flask app ``shop/app.py`` (gunicorn serves
``shop.app:app``), its webhook at ``/hooks/payments`` verified with ``standardwebhooks``, the
handler ``shop/hooks.py`` that acts on the payment service's own ``order.paid`` only (no
provider publishes an example of it: ``acklab init --example order_paid.json``), SQLAlchemy on
``SHOP_DATABASE_URL`` with its tables made by ``create_all`` at import, receipts through
``SMTP_HOST``/``SMTP_PORT``. It imports nothing of acklab.

The handler checks for the message's shipment and, when there is none, mails the receipt and
then inserts it: concurrent copies of one message all mail. ``fixed/shop/hooks.py`` inserts
first (the unique message id claims it) and mails only when its claim committed.
"""

from __future__ import annotations

from pathlib import Path

from tests.consumers.shop_repo import ShopRepo

HERE = Path(__file__).resolve().parent
SECRET = "whsec_" + "Zmxhc2stc2hvcC1zaWduaW5nLXNlY3JldC0wMTIz"
EXAMPLE = HERE / "order_paid.json"
SHOP = ShopRepo(
    HERE, "shop/hooks.py", "Flask Shop <dev@flask-shop.example>", "shop: ship paid orders, mail receipts"
)
