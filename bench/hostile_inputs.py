"""Hostile inputs at scale: the lab against a target streaming 1 GB, the console on a 200 MB incident.

    python -m bench.hostile_inputs [--body-mb 1024] [--incident-mb 200] [--keep DIR]

Targets (docs/hostile-input.md): the lab's peak memory against a target that answers every delivery with
a 1 GB body stays under 200 MB; a 200 MB incident renders its first page in under 2 s. Each
measured phase runs in a process of its own, so its peak RSS is its own; the target serves
from yet another process. Baselines, in the same run: reading the same body whole with
httpx (what the lab did before), and parsing the same incident whole with `json.loads` (the
least the console did before, ahead of rendering every delivery).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from acklab.harness.ports import free_port
from bench.console_scale import peak_rss_mb
from bench.figures import Figure, print_figure

CHUNK = b"x" * (1 << 16)


# --- the target: a process that answers every delivery with a huge body -------------------


def serve_target(port: int, body_bytes: int, db: Path) -> None:
    """A webhook consumer that records each event once and streams `body_bytes` back."""
    import sqlite3

    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route

    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS effects (event_id TEXT PRIMARY KEY)")

    async def hooks(request: Request) -> Response:
        event = json.loads(await request.body())
        with sqlite3.connect(db) as conn:
            conn.execute("INSERT OR IGNORE INTO effects VALUES (?)", (event["id"],))

        async def body() -> AsyncIterator[bytes]:
            for _ in range(body_bytes // len(CHUNK)):
                yield CHUNK

        return StreamingResponse(body(), media_type="application/octet-stream")

    async def effects(request: Request) -> Response:
        with sqlite3.connect(db) as conn:
            (count,) = conn.execute(
                "SELECT count(*) FROM effects WHERE event_id = ?", (request.path_params["event_id"],)
            ).fetchone()
        return JSONResponse({"count": count})

    app = Starlette(routes=[Route("/hooks", hooks, methods=["POST"]), Route("/effects/{event_id}", effects)])
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


def wait_until_up(port: int, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"the streaming target on port {port} did not start")


def phase_lab(spec: Path, out: Path) -> dict[str, Any]:
    """`acklab run` against the streaming target, in this process: its peak RSS and what it read."""
    from acklab.cli import main

    started = time.perf_counter()
    try:
        main(["run", "--target", str(spec), "--experiment", "lost-ack", "--trials", "2", "--out", str(out)])
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    read = [
        d.get("response_bytes", 0)
        for trial in out.glob("*/trials/*.json")
        for d in json.loads(trial.read_text())["deliveries"]
        if d.get("status") == 200
    ]
    return {
        "exit": code,
        "seconds": time.perf_counter() - started,
        "deliveries": len(read),
        "read_bytes": max(read, default=0),
        "peak_rss_mb": peak_rss_mb(),
    }


def phase_whole_body(url: str) -> dict[str, Any]:
    """The baseline: one delivery's answer read whole with httpx, as the lab did before."""
    import httpx

    started = time.perf_counter()
    response = httpx.post(url, json={"id": "evt_baseline", "type": "order.paid"}, timeout=120)
    size = len(response.content)
    return {"seconds": time.perf_counter() - started, "bytes": size, "peak_rss_mb": peak_rss_mb()}


# --- the incident: 200 MB in the form the lab writes --------------------------------------


def write_incident(evidence: Path, megabytes: int) -> tuple[Path, int]:
    """A run bundle whose one incident is about `megabytes` MB, written trial by trial."""
    from acklab.evidence.bundle import BundleWriter
    from tests.evidence.factories import incident, trial

    bundle = evidence / "big"
    writer = BundleWriter(bundle)
    sample = trial("big", "lost-ack", 0)
    delivery = sample["deliveries"][0]
    head = incident("big", "lost-ack", [sample])
    head["trials"] = "@@TRIALS@@"
    before, after = json.dumps(head, indent=2, sort_keys=True, ensure_ascii=False).split('"@@TRIALS@@"')
    path = bundle / "incidents" / "lost-ack.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    deliveries = 0
    with path.open("w", encoding="utf-8") as fh:
        fh.write(before + "[\n")
        index = 0
        while fh.tell() < megabytes * 1_000_000:
            t = trial("big", "lost-ack", index, "fail" if index % 7 == 0 else "pass")
            t["deliveries"] = [
                {**delivery, "seq": seq, "latency_ms": 5.0 + seq % 40, "response_excerpt": "ok " * 60}
                for seq in range(200)
            ]
            deliveries += len(t["deliveries"])
            text = json.dumps(t, indent=2, sort_keys=True, ensure_ascii=False)
            fh.write(("" if index == 0 else ",\n") + "\n".join("    " + line for line in text.splitlines()))
            index += 1
        fh.write("\n  ]" + after + "\n")
    writer.finalize(env={})
    return bundle, deliveries


def phase_incident(evidence: Path) -> dict[str, Any]:
    """Console start (index warm-up, which outlines the incident) and its first and a late page."""
    import functools

    import httpx
    from anyio.from_thread import start_blocking_portal

    from acklab.console.app import create_app

    started = time.perf_counter()
    app = create_app(evidence)
    warmup = time.perf_counter() - started
    with start_blocking_portal() as portal:
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1")

        def get(url: str) -> tuple[float, httpx.Response]:
            t0 = time.perf_counter()
            response = portal.call(functools.partial(client.get, url))
            assert response.status_code == 200, (url, response.status_code)
            return (time.perf_counter() - t0) * 1000, response

        first_ms, first = get("/bundles/big/incidents/lost-ack")
        late_ms, _ = get("/bundles/big/incidents/lost-ack?page=500")
        portal.call(client.aclose)
    return {
        "warmup_s": warmup,
        "first_page_ms": first_ms,
        "late_page_ms": late_ms,
        "page_bytes": len(first.content),
        "peak_rss_mb": peak_rss_mb(),
    }


def phase_cold_page(evidence: Path) -> dict[str, Any]:
    """The first page with nothing cached: the outline pass and the page, in the request."""
    from acklab.console import details
    from acklab.console.index import EvidenceIndex
    from acklab.console.links import LiveLinks
    from acklab.console.render import Site
    from acklab.console.views import Context

    index = EvidenceIndex(evidence)
    snapshot = index.snapshot()
    index._outlines.clear()  # as if the incident appeared after the console started
    started = time.perf_counter()
    html = details.incident(Context(index, snapshot, LiveLinks(), Site(False, "bench")), "big", "lost-ack")
    assert html is not None
    return {"cold_page_ms": (time.perf_counter() - started) * 1000, "peak_rss_mb": peak_rss_mb()}


def phase_json_loads(path: Path) -> dict[str, Any]:
    started = time.perf_counter()
    with path.open("rb") as fh:
        doc = json.load(fh)
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "trials": len(doc["trials"]), "peak_rss_mb": peak_rss_mb()}


def run_phase(*args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "bench.hostile_inputs", "--phase", *args],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def measure_body(root: Path, body_mb: int) -> list[Figure]:
    port = free_port()
    target = subprocess.Popen(
        [sys.executable, "-m", "bench.hostile_inputs", "--phase", "target", str(port), str(body_mb << 20), str(root / "t.db")],
        start_new_session=True,
    )  # fmt: skip
    try:
        wait_until_up(port)
        spec = root / "streaming.yaml"
        spec.write_text(
            "apiVersion: acklab/v1\nkind: target\nname: streaming\n"
            f"endpoint: http://127.0.0.1:{port}/hooks\nsigning: {{scheme: none}}\n"
            'event: {id: "{{event_id}}", type: order.paid}\n'
            f'effects: {{http: {{url: "http://127.0.0.1:{port}/effects/{{{{event_id}}}}", json_path: count}}}}\n'
            "expect: {max_effects: 1}\n"
        )
        lab = run_phase("lab", str(spec), str(root / "out"))
        whole = run_phase("whole-body", f"http://127.0.0.1:{port}/hooks")
    finally:
        target.terminate()
        target.wait(30)
    return [
        Figure(
            "hostile: lab peak RSS, target streaming a huge body",
            lab["peak_rss_mb"],
            "MiB",
            baseline=whole["peak_rss_mb"],
            ratio=lab["peak_rss_mb"] / whole["peak_rss_mb"],
            target="<= 200",
            met=lab["peak_rss_mb"] <= 200,
            note=(
                f"every delivery answered with {body_mb} MiB; {lab['deliveries']} answered deliveries, each read "
                f"to {lab['read_bytes']:,} bytes and closed (exit {lab['exit']}, {lab['seconds']:.1f} s); baseline: "
                f"one answer read whole with httpx ({whole['bytes'] >> 20} MiB in {whole['seconds']:.1f} s)"
            ),
        )
    ]


def measure_incident(root: Path, incident_mb: int) -> list[Figure]:
    evidence = root / "evidence"
    bundle, deliveries = write_incident(evidence, incident_mb)
    path = bundle / "incidents" / "lost-ack.json"
    size_mb = path.stat().st_size / 1e6
    page = run_phase("incident", str(evidence))
    cold = run_phase("cold-page", str(evidence))
    loads = run_phase("json-loads", str(path))
    return [
        Figure(
            "hostile: first page of a huge incident",
            page["first_page_ms"],
            "ms",
            target="<= 2000",
            met=page["first_page_ms"] <= 2000,
            note=(
                f"{size_mb:.0f} MB incident, {deliveries:,} deliveries, 200 a page ({page['page_bytes'] / 1e3:.0f} kB "
                f"of HTML); page 500: {page['late_page_ms']:.0f} ms; console start (outlines it once): "
                f"{page['warmup_s']:.2f} s; console peak RSS {page['peak_rss_mb']:.0f} MiB"
            ),
        ),
        Figure(
            "hostile: first page of a huge incident, nothing cached",
            cold["cold_page_ms"],
            "ms",
            baseline=loads["seconds"] * 1000,
            ratio=cold["cold_page_ms"] / (loads["seconds"] * 1000),
            target="<= 2000",
            met=cold["cold_page_ms"] <= 2000,
            note=(
                f"the outline pass inside the request (an incident that appeared after the console started); "
                f"peak RSS {cold['peak_rss_mb']:.0f} MiB; baseline: json.load of the file alone "
                f"({loads['peak_rss_mb']:.0f} MiB peak), before any of it is rendered"
            ),
        ),
    ]


def figures(quick: bool = False) -> list[Figure]:
    """For ``python -m bench``; the quick variant is smaller and claims no target."""
    with tempfile.TemporaryDirectory(prefix="acklab-bench-") as tmp:
        if not quick:
            return measure_body(Path(tmp), 1024) + measure_incident(Path(tmp), 200)
        measured = measure_body(Path(tmp), 64) + measure_incident(Path(tmp), 20)
    return [replace(f, target=None, met=None) for f in measured]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--body-mb", type=int, default=1024)
    parser.add_argument("--incident-mb", type=int, default=200)
    parser.add_argument("--keep", type=Path, help="generate into (and keep) this directory")
    parser.add_argument("--phase", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.phase:
        kind, *rest = args.phase
        if kind == "target":
            serve_target(int(rest[0]), int(rest[1]), Path(rest[2]))
            return 0
        phases = {
            "lab": lambda: phase_lab(Path(rest[0]), Path(rest[1])),
            "whole-body": lambda: phase_whole_body(rest[0]),
            "incident": lambda: phase_incident(Path(rest[0])),
            "cold-page": lambda: phase_cold_page(Path(rest[0])),
            "json-loads": lambda: phase_json_loads(Path(rest[0])),
        }
        print(json.dumps(phases[kind]()))
        return 0
    with tempfile.TemporaryDirectory(prefix="acklab-bench-") as tmp:
        root = args.keep or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        measured = measure_body(root, args.body_mb) + measure_incident(root, args.incident_mb)
    for figure in measured:
        print_figure(figure)
    return 0 if all(f.met is not False for f in measured) else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
