"""A Django 5 shop as a new user of acklab has one, with the duplicate-receipt bug real shops ship.

``repo/`` is the user's repository, file for file: ``manage.py``, the project ``shop`` (settings
from the environment: ``SHOP_DB``, ``EMAIL_HOST``/``EMAIL_PORT``, ``STRIPE_WEBHOOK_SECRET``;
Django's SMTP email backend), the app ``orders`` (a ``Fulfillment`` model, its migration, and
the Stripe webhook view in ``orders/views.py``), its own tests (pytest-django: its test database,
its locmem ``mailoutbox``) and a target spec ``shop.target.yaml`` (gunicorn on ``{{port}}``, the database in
``{{scratch}}``, ``manage.py migrate`` as setup, rows and receipts counted). It imports nothing
of acklab.

The view verifies the delivery with ``stripe.Webhook.construct_event``, then checks for the
event's row and, when there is none, mails the receipt and inserts the row inside
``transaction.atomic()``: concurrent copies of one event all pass the check and all mail a
receipt before one insert wins. ``fixed/orders/views.py`` is its twin a maintainer would write:
the row first (``get_or_create``), the receipt in ``transaction.on_commit`` — same imports.

``checkout_paid.json`` is one of the shop's own events as its developer would copy it from
Stripe's dashboard (``acklab init --example``): Stripe's published example has no
``metadata.order_id``, which the view reads.

    shop = make_django_shop(tmp_path / "shop")            # the buggy view, committed on main
    shop = make_django_shop(tmp_path / "shop", fixed=True)
    diff = fix_diff(shop)                                  # what a model answers
"""

from __future__ import annotations

from pathlib import Path

from tests.consumers.shop_repo import ShopRepo
from tests.consumers.user_repos import git

__all__ = ["EXAMPLE", "FIXED_VIEW", "SECRET", "SHOP", "TARGET", "VIEW", "fix_diff", "git", "make_django_shop"]

HERE = Path(__file__).resolve().parent
VIEW = "orders/views.py"
TARGET = "shop.target.yaml"
SECRET = "whsec_" + "ZGphbmdvLXNob3Atc2lnbmluZy1zZWNyZXQtMDEyMw=="
SHOP = ShopRepo(
    HERE, VIEW, "Shop Maintainer <maintainer@shop.example>", "shop: ship paid checkouts and mail the receipt"
)
FIXED_VIEW = SHOP.fixed_view
EXAMPLE = HERE / "checkout_paid.json"
make_django_shop = SHOP.make
fix_diff = SHOP.fix_diff
