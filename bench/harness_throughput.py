"""Harness delivery throughput vs a hand-written httpx loop, and race detection rate.

    python -m bench.harness_throughput [--deliveries 300] [--rounds 5] [--trials 40] [--work-ms 5]

1. Throughput: plain signed deliveries of fresh events to the live fixture on uvicorn +
   SQLite, sequentially, through the harness (`TrialContext.send`: signing, the fault
   transport, both-sided delivery records) and through a hand-written httpx loop, against
   the same server in the same run, alternating rounds. Target: ratio >= 0.85.
2. Transports: the same harness deliveries in-process over ASGI vs over the real socket,
   against two instances of the fixture on one database, alternating rounds.
3. Detection: `concurrent-duplicates` against a check-then-insert handler (tests/harness
   handlers) served over a real socket; the share of trials that catch the race.
   Target: >= 95 %. (`bench.detection` measures it by burst size, SQLite and PostgreSQL.)

`figures(quick)` gives 1 and 2 to ``python -m bench``.

Not a timed test: it prints figures (this machine is shared; compare ratios, not times).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import hmac
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from acklab.harness.core.lab import Lab
from acklab.harness.core.plan import RunSettings, TrialPlan, event_ids
from acklab.harness.core.trial import TrialContext
from acklab.harness.engine.runner import RunOptions, run
from acklab.harness.targets import Endpoint, Needs
from acklab.harness.targets.fixture import fixture_target
from acklab.harness.targets.server import ThreadedServer
from acklab.harness.wire.providers import profile
from acklab.harness.wire.signing import SIGNERS, whsec_key
from acklab.harness.wire.transports import FaultTransport

if TYPE_CHECKING:
    from bench.figures import Figure


async def hand_written(client: httpx.AsyncClient, url: str, secret: str, ids: tuple[str, ...]) -> float:
    """The baseline: what a careful person would write with httpx, nothing recorded."""
    key = whsec_key(secret)
    started = time.perf_counter()
    for event_id in ids:
        body = json.dumps(
            {
                "id": event_id,
                "type": "order.paid",
                "timestamp": "2026-01-01T00:00:00Z",
                "data": {"order_id": "ord_" + event_id[4:], "amount_cents": 1200, "currency": "EUR"},
            },
            separators=(",", ":"),
        ).encode()
        stamp = int(time.time())
        signature = base64.b64encode(
            hmac.new(key, f"{event_id}.{stamp}.".encode() + body, hashlib.sha256).digest()
        )
        headers = {
            "Content-Type": "application/json",
            "webhook-id": event_id,
            "webhook-timestamp": str(stamp),
            "webhook-signature": "v1," + signature.decode(),
        }
        response = await client.post(url, content=body, headers=headers)
        if response.status_code != 200:
            raise SystemExit(f"baseline delivery answered {response.status_code}: {response.text}")
    return len(ids) / (time.perf_counter() - started)


async def through_harness(lab: Lab, ids: tuple[str, ...], orders: tuple[str, ...]) -> float:
    plan = TrialPlan("bench-0000", "bench", 0, ids, orders, ())
    trial = TrialContext(lab, plan)
    started = time.perf_counter()
    for k in range(len(ids)):
        record = await trial.send(trial.event(k), kind="original")
        if record.sender_status != 200:
            raise SystemExit(f"harness delivery answered {record.sender_status}: {record.error}")
    return len(ids) / (time.perf_counter() - started)


async def throughput(deliveries: int, rounds: int) -> tuple[float, float]:
    target = fixture_target("fixture:live", db_url=None)
    settings = RunSettings()
    try:
        async with target.serve(Needs(socket=True)) as endpoint:
            transport = FaultTransport(endpoint.transport)
            async with (
                httpx.AsyncClient(transport=transport, timeout=30.0, trust_env=False) as lab_client,
                httpx.AsyncClient(timeout=30.0, trust_env=False) as baseline_client,
            ):
                lab = Lab(
                    target,
                    endpoint,
                    transport,
                    lab_client,
                    profile(target.scheme),
                    SIGNERS[target.scheme],
                    settings,
                    30.0,
                )
                hand, ours = [], []
                for n in range(rounds):
                    ids_a, _ = event_ids(1, "hand", n, deliveries)
                    ids_b, orders_b = event_ids(1, "harness", n, deliveries)
                    # Alternate which goes first, so a warming cache or a noisy neighbour hits both.
                    if n % 2 == 0:
                        hand.append(await hand_written(baseline_client, endpoint.url, target.secret, ids_a))
                        ours.append(await through_harness(lab, ids_b, orders_b))
                    else:
                        ours.append(await through_harness(lab, ids_b, orders_b))
                        hand.append(await hand_written(baseline_client, endpoint.url, target.secret, ids_a))
                return statistics.median(hand), statistics.median(ours)
    finally:
        await target.aclose()


def _lab(target: Any, endpoint: Endpoint, client: httpx.AsyncClient, transport: FaultTransport) -> Lab:
    prof = profile(target.scheme)
    return Lab(target, endpoint, transport, client, prof, SIGNERS[target.scheme], RunSettings(), 30.0)


async def transports(deliveries: int, rounds: int) -> tuple[float, float]:
    """(in-process ASGI, real socket) harness throughput: median deliveries/s, alternating rounds."""
    target = fixture_target("fixture:live", db_url=None)
    try:
        async with (
            target.serve(Needs()) as in_process,
            target.serve(Needs(socket=True)) as over_socket,
        ):
            asgi_transport = FaultTransport(in_process.transport)
            socket_transport = FaultTransport(over_socket.transport)
            async with (
                httpx.AsyncClient(transport=asgi_transport, timeout=30.0, trust_env=False) as asgi_client,
                httpx.AsyncClient(transport=socket_transport, timeout=30.0, trust_env=False) as socket_client,
            ):
                labs = {
                    "asgi": _lab(target, in_process, asgi_client, asgi_transport),
                    "socket": _lab(target, over_socket, socket_client, socket_transport),
                }
                rates: dict[str, list[float]] = {"asgi": [], "socket": []}
                for n in range(rounds):
                    for name in ("asgi", "socket") if n % 2 == 0 else ("socket", "asgi"):
                        ids, orders = event_ids(1, f"transport-{name}", n, deliveries)
                        rates[name].append(await through_harness(labs[name], ids, orders))
                return statistics.median(rates["asgi"]), statistics.median(rates["socket"])
    finally:
        await target.aclose()


def figures(quick: bool = False) -> list[Figure]:
    """Throughput figures for ``python -m bench`` (detection: see ``bench.detection``)."""
    from bench.figures import Figure

    # Many short rounds rather than a few long ones: a neighbour's burst of load then spoils a
    # round or two, which the median drops, instead of a third of the sample.
    deliveries, rounds = (50, 3) if quick else (100, 15)
    hand, ours = asyncio.run(throughput(deliveries, rounds))
    asgi, over_socket = asyncio.run(transports(deliveries, rounds))
    how = f"median of {rounds} alternating rounds x {deliveries} sequential deliveries"
    return [
        Figure(
            "harness throughput vs plain httpx loop",
            ours,
            "deliveries/s",
            baseline=hand,
            ratio=ours / hand,
            target=">= 0.85x",
            met=ours / hand >= 0.85,
            note=f"live fixture on uvicorn + SQLite over loopback; {how}",
        ),
        Figure(
            "harness throughput, in-process ASGI vs socket",
            asgi,
            "deliveries/s",
            baseline=over_socket,
            ratio=asgi / over_socket,
            note=f"the same harness deliveries to the live fixture in-process vs over uvicorn; {how}",
        ),
    ]


def detection(trials: int, work_ms: float) -> tuple[int, int]:
    from tests.harness.conftest import SECRET, SECRET_ENV, target_doc, write_spec
    from tests.harness.handlers import CheckThenInsert, handler_app

    os.environ[SECRET_ENV] = SECRET
    with tempfile.TemporaryDirectory(prefix="acklab-bench-") as tmp:
        db_url = f"sqlite:///{tmp}/check-then-insert.db"
        with ThreadedServer(handler_app(CheckThenInsert(work_s=work_ms / 1000), db_url, SECRET)) as server:
            spec = write_spec(
                Path(tmp) / "target.yaml", target_doc("check-then-insert", f"{server.url}/hooks", db_url)
            )
            result = run(
                RunOptions(
                    target=str(spec),
                    experiments=("concurrent-duplicates",),
                    trials=trials,
                    out=Path(tmp) / "out",
                    journal=False,
                )
            )
    (entry,) = result.document.experiments
    caught = len({v.trial for v in entry.violations})
    return caught, entry.trials


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deliveries", type=int, default=300, help="deliveries per round and side")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--trials", type=int, default=40, help="concurrent-duplicates trials")
    parser.add_argument(
        "--work-ms", type=float, default=5.0, help="the racy handler's work between check and insert"
    )
    args = parser.parse_args(argv)

    hand, ours = asyncio.run(throughput(args.deliveries, args.rounds))
    ratio = ours / hand
    print(
        f"throughput: hand-written httpx loop {hand:.0f}/s, harness {ours:.0f}/s (median of {args.rounds} rounds "
        f"x {args.deliveries}); ratio {ratio:.2f} target >= 0.85 {'ok' if ratio >= 0.85 else 'MISSED'}",
        flush=True,
    )
    caught, total = detection(args.trials, args.work_ms)
    rate = caught / total
    print(
        f"detection: concurrent-duplicates caught the check-then-insert race ({args.work_ms:g} ms window) in "
        f"{caught}/{total} trials = {rate:.0%}; target >= 95% {'ok' if rate >= 0.95 else 'MISSED'}",
        flush=True,
    )


if __name__ == "__main__":
    main()
