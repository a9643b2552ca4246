"""Running totals (``expect.totals``): the provider's cumulative amount, and the consumer's sum of what it recorded.

Partial refunds carry the charge's cumulative ``amount_refunded``; a consumer that adds each
event's amount to its ledger double-debits under a duplicate or a reorder::

    expect:
      totals: {field: data.object.amount_refunded,
               sum: "SELECT coalesce(sum(amount), 0) FROM refunds WHERE charge_id = :object_id"}

`field` is where each event's body holds the provider's running total; `sum` reads the
consumer's (``:object_id``, ``:event_id`` bound; on effects.sql's read-only connection). The
invariant ``totals-match``: once settled, the consumer's sum equals the total of the newest
event in the provider's order — whatever order and however many times they arrived.
"""

from __future__ import annotations

import json
from typing import Any

from acklab.harness.specs.target import Totals
from acklab.harness.targets.state import SqlState

__all__ = ["TotalProbe", "Totals", "number_of"]

Number = int | float


def number_of(text: str) -> Number | None:
    """The one number a sum query returned (its rows as canonical JSON), None when it returned none."""
    value: Any = json.loads(text)
    while isinstance(value, list) and len(value) == 1:
        value = value[0]
    if isinstance(value, str):
        try:
            value = float(value) if "." in value else int(value)
        except ValueError:
            return None
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


class TotalProbe:
    """``expect.totals.sum`` read on effects.sql's database: the consumer's total for one object."""

    def __init__(self, url: str, query: str) -> None:
        self._rows = SqlState(url, query, field_name="expect.totals.sum")

    async def read(self, event_id: str, object_id: str | None) -> Number | None:
        return number_of(await self._rows.read(event_id, object_id))

    async def aclose(self) -> None:
        await self._rows.aclose()
