"""A FastAPI shop as a new user of acklab has one, whose webhook calls a downstream API.

``repo/`` is the user's repository: the FastAPI app ``shop/main.py`` (uvicorn serves
``shop.main:app``), Shopify's ``orders/paid`` at ``/webhooks/shopify`` (HMAC verified by hand,
as Shopify documents it), the handler ``shop/hooks.py`` asking the warehouse's API at
``WAREHOUSE_API_URL`` to ship the order (``shop/warehouse.py``, httpx), SQLAlchemy on
``SHOP_DB_URL`` with its tables made by ``create_all`` at startup. It imports nothing of acklab.

The handler checks for the order's row and, when there is none, asks for a shipment and then
inserts it: concurrent copies of one delivery each ship the order. ``fixed/shop/hooks.py``
claims the order with its row first and asks only when its claim committed, under an
idempotency key.
"""

from __future__ import annotations

from pathlib import Path

from tests.consumers.shop_repo import ShopRepo

HERE = Path(__file__).resolve().parent
SECRET = "shpss_fastapi_shop_0123456789abcdef"
SHOP = ShopRepo(HERE, "shop/hooks.py", "FastAPI Shop <dev@fastapi-shop.example>", "shop: ship paid orders")
