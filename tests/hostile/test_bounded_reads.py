"""Hostile input (docs/hostile-input.md): a target that answers without end, or not at all, costs the lab a bounded amount.

A handler streaming a huge body is read up to 1 MiB (2 KiB kept), the body hash covers what
was read and the delivery says it was truncated; an effects endpoint answering megabytes is a
lab error naming the cap; a hanging target is bounded per delivery (--handler-timeout) and
per run (--deadline, exit 6, resumable). Memory against a 1 GB body is measured in
bench/hostile_inputs.py.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from acklab.harness.targets.server import ThreadedServer
from acklab.harness.wire.bodies import KEEP_BYTES, LIMIT_BYTES
from tests.hostile.conftest import write

pytestmark = pytest.mark.slow

CHUNK = b"x" * 65536


class Streamer:
    """A webhook consumer that records each event once and answers with `body_bytes` of body."""

    def __init__(self, db: Path, *, body_bytes: int = 0, effects_bytes: int = 0, hang: bool = False) -> None:
        self.db, self.body_bytes, self.effects_bytes, self.hang = db, body_bytes, effects_bytes, hang
        self.sent = 0
        self.release = threading.Event()
        with sqlite3.connect(db) as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS effects (event_id TEXT PRIMARY KEY)")

    async def hooks(self, request: Request) -> Response:
        event = json.loads(await request.body())
        with sqlite3.connect(self.db) as conn:
            conn.execute("INSERT OR IGNORE INTO effects VALUES (?)", (event["id"],))
        if self.hang:
            for _ in range(200):  # at most 20 s: the test releases it at teardown
                if self.release.is_set():
                    break
                await asyncio.sleep(0.1)

        async def body() -> AsyncIterator[bytes]:
            left = self.body_bytes
            while left > 0:
                piece = CHUNK[: min(left, len(CHUNK))]
                left -= len(piece)
                self.sent += len(piece)
                yield piece

        return StreamingResponse(body(), media_type="application/octet-stream")

    async def effects(self, request: Request) -> Response:
        if self.effects_bytes:
            return Response(b'{"count": 1, "pad": "' + b"y" * self.effects_bytes + b'"}')
        with sqlite3.connect(self.db) as conn:
            (count,) = conn.execute(
                "SELECT count(*) FROM effects WHERE event_id = ?", (request.path_params["event_id"],)
            ).fetchone()
        return JSONResponse({"count": count})

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/hooks", self.hooks, methods=["POST"]),
                Route("/effects/{event_id}", self.effects),
            ]
        )


def spec_for(tmp_path: Path, server: ThreadedServer, *, timeout_s: float = 2.0) -> Path:
    return write(
        tmp_path / "streamer.yaml",
        "apiVersion: acklab/v1\nkind: target\nname: streamer\n"
        f"endpoint: {server.url}/hooks\nsigning: {{scheme: none}}\ndelivery: {{timeout_s: {timeout_s}}}\n"
        'event: {id: "{{event_id}}", type: order.paid, data: {amount_cents: 1200}}\n'
        f'effects: {{http: {{url: "{server.url}/effects/{{{{event_id}}}}", json_path: count}}}}\n'
        "expect: {max_effects: 1}\n",
    )


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[object]:
    running: list[tuple[ThreadedServer, Streamer]] = []

    def start(**kwargs: object) -> tuple[ThreadedServer, Streamer]:
        handler = Streamer(tmp_path / "effects.db", **kwargs)  # type: ignore[arg-type]
        server = ThreadedServer(handler.app()).start()
        running.append((server, handler))
        return server, handler

    yield start
    for server, handler in running:
        handler.release.set()
        server.stop()


def test_a_huge_response_body_is_read_bounded_hashed_and_marked_truncated(tmp_path, serve, acklab):
    server, handler = serve(body_bytes=64 << 20)  # 64 MiB per answer
    spec = spec_for(tmp_path, server)
    out = tmp_path / "out"
    code, _, err = acklab("run", "--target", spec, "--experiment", "lost-ack", "--trials", "1", "--out", out)
    assert code in (0, 1), err  # a verdict: the lab ran to the end
    [trial_file] = (out).glob("*/trials/*.json")
    deliveries = json.loads(trial_file.read_text())["deliveries"]
    answered = [d for d in deliveries if d["status"] == 200]
    assert answered
    for delivery in answered:
        assert delivery["response_bytes"] == LIMIT_BYTES
        assert delivery["response_truncated"] is True
        # The hash covers exactly what was read: the body's first MiB.
        assert delivery["response_sha256"] == hashlib.sha256(b"x" * LIMIT_BYTES).hexdigest()
        assert len(delivery["response_excerpt"]) <= KEEP_BYTES
    assert handler.sent > LIMIT_BYTES  # the target did stream more than the lab read


def test_a_small_body_is_read_whole_and_not_marked(tmp_path, serve, acklab):
    server, _ = serve(body_bytes=100)
    out = tmp_path / "out"
    code, _, err = acklab(
        "run",
        "--target",
        spec_for(tmp_path, server),
        "--experiment",
        "lost-ack",
        "--trials",
        "1",
        "--out",
        out,
    )
    assert code in (0, 1), err
    [trial_file] = out.glob("*/trials/*.json")
    delivery = next(d for d in json.loads(trial_file.read_text())["deliveries"] if d["status"] == 200)
    assert delivery["response_bytes"] == 100
    assert delivery["response_truncated"] is False
    assert delivery["response_excerpt"] == "x" * 100


def test_an_effects_endpoint_answering_megabytes_is_a_lab_error_not_a_buffer(tmp_path, serve, acklab):
    server, _ = serve(effects_bytes=3 << 20)
    code, out, err = acklab(
        "run",
        "--target",
        spec_for(tmp_path, server),
        "--experiment",
        "lost-ack",
        "--trials",
        "1",
        "--out",
        tmp_path / "out",
        "--json",
    )
    assert code == 4, err
    assert "answered more than 1.0 MiB" in out + err


def test_a_hanging_target_is_bounded_per_delivery_and_per_run(tmp_path, serve, acklab):
    server, _ = serve(hang=True)
    spec = spec_for(tmp_path, server, timeout_s=0.2)
    out = tmp_path / "out"
    code, _, err = acklab(
        "run",
        "--target",
        spec,
        "--experiment",
        "lost-ack",
        "--trials",
        "50",
        "--handler-timeout",
        "1",
        "--deadline",
        "3",
        "--out",
        out,
    )
    assert code == 6, err
    assert "the run reached its --deadline of 3 s" in err
    assert "acklab run --resume" in err
    assert acklab.seconds < 30  # 50 trials of a handler that never answers: bounded all the same
    [run_json] = out.glob("*/run.json")
    assert json.loads(run_json.read_text())["status"] == "interrupted"
