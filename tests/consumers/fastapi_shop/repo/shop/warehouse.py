"""The warehouse's API (``WAREHOUSE_API_URL``): it ships what it is asked to, once per request."""

import os

import httpx


def ship(order_id: str, lines: list[dict], *, key: str | None = None) -> str:
    headers = {"Idempotency-Key": key} if key else {}
    answer = httpx.post(
        f"{os.environ.get('WAREHOUSE_API_URL', 'http://127.0.0.1:9100')}/v1/shipments",
        json={"order_id": order_id, "lines": lines},
        headers=headers,
        timeout=10,
    )
    answer.raise_for_status()
    return str(answer.json()["id"])
