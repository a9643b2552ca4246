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

    shop = make_django_shop(tmp_path / "shop")            # the buggy view, committed on main
    shop = make_django_shop(tmp_path / "shop", fixed=True)
    diff = fix_diff(shop)                                  # what a model answers
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.consumers.user_repos import commit_all, git

__all__ = ["FIXED_VIEW", "SECRET", "TARGET", "VIEW", "fix_diff", "git", "make_django_shop"]

HERE = Path(__file__).resolve().parent
REPO = HERE / "repo"
FIXED = HERE / "fixed"
VIEW = "orders/views.py"
TARGET = "shop.target.yaml"
SECRET = "whsec_" + "ZGphbmdvLXNob3Atc2lnbmluZy1zZWNyZXQtMDEyMw=="
FIXED_VIEW = (FIXED / VIEW).read_text(encoding="utf-8")


def make_django_shop(directory: Path, *, fixed: bool = False) -> Path:
    """Copy the shop into `directory` (the fixed view with `fixed`) and commit it on ``main``."""
    shutil.copytree(REPO, directory, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "db.sqlite3"))
    if fixed:
        (directory / VIEW).write_text(FIXED_VIEW, encoding="utf-8")
    return commit_all(
        directory,
        "Shop Maintainer <maintainer@shop.example>",
        "shop: ship paid checkouts and mail the receipt",
    )


def fix_diff(directory: Path) -> str:
    """The unified diff (as git writes it) that turns the shop's view into the fixed twin."""
    path = directory / VIEW
    original = path.read_text(encoding="utf-8")
    try:
        path.write_text(FIXED_VIEW, encoding="utf-8")
        return git(directory, "diff", "--", VIEW) + "\n"
    finally:
        path.write_text(original, encoding="utf-8")
