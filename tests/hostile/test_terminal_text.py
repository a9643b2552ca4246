"""Text a target controls reaches the terminal as text: no rich markup, no escape sequences.

A consumer's effects endpoint answers a count that is a string of rich markup and terminal
control sequences. The lab quotes it in the experiment's error; the run's closing table must
print it literally (rich would read ``[/]`` as a closing tag and raise, and a terminal would
obey ``ESC ]8`` or clear the screen) and still end with its verdict line and exit 4.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from acklab.harness.targets.server import ThreadedServer
from tests.hostile.conftest import write

pytestmark = pytest.mark.slow

HOSTILE = "[/] [link=https://evil.example]approved[/link] \x1b]8;;https://evil.example\x07 \x1b[2J"


def consumer(db: Path) -> Starlette:
    """Records each event once; its effects endpoint answers a hostile string for the count
    of every event but the lab's preflight probe."""
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS effects (event_id TEXT PRIMARY KEY)")

    async def hooks(request: Request) -> Response:
        event = json.loads(await request.body())
        with sqlite3.connect(db) as conn:
            conn.execute("INSERT OR IGNORE INTO effects VALUES (?)", (event["id"],))
        return Response(status_code=204)

    async def effects(request: Request) -> Response:
        if request.path_params["event_id"] == "acklab-preflight":  # passes the lab's preflight
            return JSONResponse({"count": 0})
        return JSONResponse({"count": HOSTILE})

    return Starlette(routes=[Route("/hooks", hooks, methods=["POST"]), Route("/effects/{event_id}", effects)])


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ThreadedServer]:
    running = ThreadedServer(consumer(tmp_path / "effects.db")).start()
    yield running
    running.stop()


def test_a_targets_markup_and_escape_sequences_are_printed_as_text(tmp_path, server, acklab, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # the table's cell holds the error on one line
    spec = write(
        tmp_path / "hostile.yaml",
        "apiVersion: acklab/v1\nkind: target\nname: hostile\n"
        f"endpoint: {server.url}/hooks\nsigning: {{scheme: none}}\n"
        'event: {id: "{{event_id}}", type: order.paid, data: {amount_cents: 1200}}\n'
        f'effects: {{http: {{url: "{server.url}/effects/{{{{event_id}}}}", json_path: count}}}}\n',
    )
    code, out, err = acklab(
        "run", "--target", spec, "--experiment", "lost-ack", "--trials", "1", "--out", tmp_path / "out"
    )
    assert code == 4, err  # the effects could not be counted: the lab failed, not the handler
    assert "verdict: error" in err  # the closing lines were printed: the table did not raise
    assert "\x1b" not in out + err
    assert "\x07" not in out + err
    assert "[/] [link=https://evil.example]approved" in err  # the markup, shown as written
    assert "\\x1b]8;;https://ev" in err  # the sequence, quoted (the cell keeps 160 characters)
