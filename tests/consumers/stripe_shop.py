"""What the Stripe consumers share: their SQLite database (``SHOP_DB``) and a stripe client pointed at
the lab's provider API (``STRIPE_API_BASE``, ``STRIPE_API_KEY``), as a shop's settings would."""

from __future__ import annotations

import os
import sqlite3

import stripe


def connect(schema: str) -> sqlite3.Connection:
    """The shop's database, its table made (the lab reads it from the first delivery on)."""
    conn = sqlite3.connect(os.environ["SHOP_DB"], timeout=30, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(schema)
    return conn


def client(*, retries: int = 2) -> stripe.StripeClient:
    """The stripe library, unmodified, at the lab's API (`retries`: the library's own on 5xx and 409)."""
    return stripe.StripeClient(
        os.environ["STRIPE_API_KEY"],
        base_addresses={"api": os.environ["STRIPE_API_BASE"]},
        max_network_retries=retries,
    )
