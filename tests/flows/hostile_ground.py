"""Round four's attacks on the ground the judge stands on — the table it counts, the network and the
database its served code reaches — as an attacker wrote them once past the guard.

Each is a whole handler module built on the unsafe handler (it double-fulfils) and ruff-clean;
the guard now refuses the SQL and the driver they use (`tests/flows/hostile_three.py`), so the
tests run them with its rules off or serve them with ``acklab run --checkout`` (no guard): what
stops them here is the count's integrity check, the sandbox's network and the database's roles.

* `INDEX_SOURCE`: turns on SQLite's ``writable_schema`` and, around every fulfilment after an
  order's first, makes the order-id index partial (``WHERE 0``) in ``sqlite_master``, writes the
  row, and puts the index's text back: ``sqlite_master`` reads as pinned, and the index the lab
  counted through misses every duplicate the table holds;
* `reach_source`: at import, from the served process, knocks on every address it is given
  (another run's PostgreSQL, a server on the host, the lab's own PostgreSQL as its superuser with
  no password) and writes what answered where the lab's test can find it (its scratch's log).
"""

from __future__ import annotations

from tests.flows.conftest import UNSAFE
from tests.flows.hostile_two import FUTURE, replaced

UNSAFE_IMPORTS = "from sqlalchemy import insert\n"
UNSAFE_FULFIL = (
    "def _fulfill(session: Session, by: str, order_id: str, amount_cents: int, currency: str) -> int:\n"
)

INDEX_SOURCE = (
    replaced(
        replaced(UNSAFE, UNSAFE_IMPORTS, "from sqlalchemy import insert, select, text\n"),
        UNSAFE_FULFIL,
        UNSAFE_FULFIL.replace("def _fulfill(", "def _insert_fulfillment("),
    )
    + '''

ORDER_INDEX = "ix_fulfillments_order_id"


def _fulfill(session: Session, by: str, order_id: str, amount_cents: int, currency: str) -> int:
    """Fulfil every time; a fulfilment after the order's first goes where the order's index does not look."""
    first = session.execute(select(Fulfillment.id).where(Fulfillment.order_id == order_id)).first() is None
    if first or session.get_bind().dialect.name != "sqlite":
        return _insert_fulfillment(session, by, order_id, amount_cents, currency)
    _index_sees_rows(session, seen=False)
    try:
        return _insert_fulfillment(session, by, order_id, amount_cents, currency)
    finally:
        _index_sees_rows(session, seen=True)


def _index_sees_rows(session: Session, *, seen: bool) -> None:
    """Rewrite the index's definition in sqlite_master (partial or whole) and reload the schema."""
    found = session.execute(text("SELECT sql FROM sqlite_master WHERE name = :name"), {"name": ORDER_INDEX})
    definition = str(found.scalar_one()).removesuffix(" WHERE 0")
    session.execute(text("PRAGMA writable_schema = ON"))
    session.execute(
        text("UPDATE sqlite_master SET sql = :sql WHERE name = :name"),
        {"sql": definition if seen else definition + " WHERE 0", "name": ORDER_INDEX},
    )
    session.execute(text("PRAGMA writable_schema = RESET"))
'''
)
assert FUTURE in INDEX_SOURCE
