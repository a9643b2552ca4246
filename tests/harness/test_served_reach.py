"""What served code can reach from its sandbox: its own database as its own role, nothing else.

Round four's patch reached psycopg from the served handler, logged in to the lab's PostgreSQL as
its superuser (the server trusted loopback), ran ``COPY ... TO PROGRAM``, deleted another run's
rows and knocked on other jobs' servers. Here the same handler is served from a checkout by
`acklab run --checkout --db` (no guard in the way) and reports what answered.
"""

from __future__ import annotations

import hashlib
import json
import socket
import threading
from pathlib import Path

from sqlalchemy import create_engine, text

from acklab.flows.sandbox import choose
from acklab.harness.engine.runner import RunOptions, run
from acklab.harness.targets.schema_pin import create_schema, models_of
from tests.flows import hostile_ground
from tests.harness.test_checkout_target import checkout

ROOT = Path(__file__).resolve().parents[2]


def test_served_code_reaches_its_own_database_as_its_own_role_and_nothing_else(tmp_path, postgres_server):
    mark = str(int(hashlib.sha256(str(tmp_path).encode()).hexdigest()[:12], 16))
    other = postgres_server.create_database()  # another run's, on the same server
    create_schema(other, models_of(ROOT, choose()))
    engine = create_engine(other)
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO orders VALUES ('ord_other', 'paid', 1, 'EUR', now(), NULL)"))
        conn.execute(text("INSERT INTO fulfillments VALUES (1, 'evt_other', 'ord_other', 1, 'EUR', now())"))
    knocked: list[bytes] = []
    host = socket.create_server(("127.0.0.1", 0))  # another job's server on this machine
    threading.Thread(target=_count_knocks, args=(host, knocked), daemon=True).start()
    source = hostile_ground.reach_source(mark, other.rsplit("/", 1)[1], host.getsockname()[1])
    own = postgres_server.create_database()
    result = run(
        RunOptions(
            target="fixture:live",
            checkout=checkout(tmp_path / "checkout", source),
            db=own,
            experiments=("lost-ack",),
            trials=1,
            out=tmp_path / "out",
            confinement=choose(),
        )
    )
    assert int(result.exit_code) == 1  # the unsafe handler under the probe: it ran, and was judged
    served = create_engine(own)
    with served.connect() as conn:
        found = json.loads(
            conn.execute(
                text("SELECT response_body FROM receipts WHERE event_id = :id"), {"id": f"probe-{mark}"}
            ).scalar_one()
        )
    served.dispose()
    assert [line.split(":")[0] for line in found] == ["superuser", "program", "other run", "host"]
    assert all(": refused (" in line for line in found), found
    assert not Path(f"/tmp/acklab-pwned-{mark}").exists()  # no program ran as the server's user
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM fulfillments")).scalar() == 1  # the other run's rows
    engine.dispose()
    host.close()
    assert knocked == []


def _count_knocks(server: socket.socket, knocked: list[bytes]) -> None:
    """Note every connection `server` accepts, until it is closed."""
    while True:
        try:
            conn, _ = server.accept()
        except OSError:  # closed: the test is over
            return
        knocked.append(b"knock")
        conn.close()
