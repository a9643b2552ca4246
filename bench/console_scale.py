"""Console at scale: overview latency over 10,000 incidents, snapshot build time of 1,000.

    python -m bench.console_scale [--incidents 10000] [--snapshot-incidents 1000] [--keep DIR]

Targets: the overview answers in <= 300 ms server-side with 10,000 incidents and
stays paginated; a snapshot of 1,000 incidents builds in <= 20 s. Peak memory is reported
for both. Each measured phase runs in a fresh subprocess, so its peak RSS is its own and
not the generator's. Not a timed test: it prints figures.
"""

from __future__ import annotations

import argparse
import functools
import json
import multiprocessing
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from bench.figures import Figure, print_figure
from bench.runs import shares

EXPERIMENTS_PER_BUNDLE = 5
GENERATORS = 2  # processes writing the bundles (the machines this runs on have 2 cores)


def _share(evidence: Path, numbers: range, trials: int) -> None:
    """The run bundles numbered `numbers` (one generating process's share)."""
    from tests.console.samples import BASE_TIME, make_run_bundle

    for n in numbers:
        target = "fixture:unsafe" if n % 2 == 0 else "fixture:live"
        make_run_bundle(
            evidence,
            run_id=f"run-{n:05d}-{target.rsplit(':', 1)[-1]}",
            target=target,
            seed=7 + n // 2,
            trials=trials,
            created=BASE_TIME + timedelta(minutes=n),
            pipeline=5000 + n // 2,
            validate=n < 2,  # the first pair is schema-checked; the rest are the same shape
        )


def generate(evidence: Path, incidents: int, *, trials: int = 2) -> float:
    """Write `incidents` incidents as run bundles of 5 (alternating unsafe/live), in `GENERATORS`
    processes side by side (each bundle is written and fsynced file by file: one process leaves a
    core idle while it waits on the disk); returns seconds. What is written does not depend on how
    many processes wrote it."""
    started = time.perf_counter()
    bundles = max(1, incidents // EXPERIMENTS_PER_BUNDLE)
    width = min(GENERATORS, bundles)
    with ProcessPoolExecutor(width, mp_context=multiprocessing.get_context("spawn")) as pool:
        for done in [pool.submit(_share, evidence, numbers, trials) for numbers in shares(bundles, width)]:
            done.result()
    return time.perf_counter() - started


def peak_rss_mb() -> float:
    """This process's own peak RSS. Not ru_maxrss: Linux keeps that across fork and execve, so a
    phase subprocess would report the generator's peak (its parent's) whenever that is higher."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def phase_overview(evidence: Path, requests: int) -> dict[str, Any]:
    """Build the app (index warm-up) and time overview requests in-process."""
    import httpx
    from anyio.from_thread import start_blocking_portal

    from acklab.console.app import create_app

    started = time.perf_counter()
    app = create_app(evidence, refresh_interval=1.0)
    warmup = time.perf_counter() - started
    index = app.state.index
    with start_blocking_portal() as portal:
        # The console answers only requests whose Host names an address it serves.
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1")

        def get(url: str) -> tuple[float, httpx.Response]:
            t0 = time.perf_counter()
            response = portal.call(functools.partial(client.get, url))
            return (time.perf_counter() - t0) * 1000, response

        first_ms, response = get("/")
        assert response.status_code == 200, response.status_code
        pages = response.text.count('class="nowrap"')
        warm = [get("/")[0] for _ in range(requests)]
        page_40 = [get("/?page=40")[0] for _ in range(5)]
        during, rescans = [], []
        for _ in range(5):
            index._checked_at = 0.0  # the periodic rescan starts in the background with this request
            during.append(get("/")[0])
            with index._refresh_lock:  # let that background rescan finish before timing one
                pass
            t0 = time.perf_counter()
            index._refresh()  # what that rescan costs, off the request path
            rescans.append((time.perf_counter() - t0) * 1000)
        portal.call(client.aclose)
    return {
        "incidents": sum(1 for i in index.snapshot().incidents if i.path),
        "bundles": len(index.snapshot().bundles),
        "rows_on_page": pages,
        "warmup_s": warmup,
        "first_ms": first_ms,
        "warm_median_ms": statistics.median(warm),
        "warm_p95_ms": sorted(warm)[int(len(warm) * 0.95) - 1],
        "page40_median_ms": statistics.median(page_40),
        "during_rescan_median_ms": statistics.median(during),
        "rescan_median_ms": statistics.median(rescans),
        "peak_rss_mb": peak_rss_mb(),
    }


def phase_snapshot(evidence: Path, out: Path) -> dict[str, Any]:
    from acklab.console.export import build_snapshot

    result = build_snapshot(evidence, out, env={})
    return {
        "seconds": result.seconds,
        "pages": result.pages,
        "raw_files": result.raw_files,
        "peak_rss_mb": peak_rss_mb(),
    }


def run_phase(*args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "bench.console_scale", "--phase", *args],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--incidents", type=int, default=10_000)
    parser.add_argument("--snapshot-incidents", type=int, default=1_000)
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--keep", type=Path, help="generate into (and keep) this directory")
    parser.add_argument("--phase", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.phase:
        kind, *rest = args.phase
        result = (
            phase_overview(Path(rest[0]), int(rest[1]))
            if kind == "overview"
            else phase_snapshot(Path(rest[0]), Path(rest[1]))
        )
        print(json.dumps(result))
        return 0

    measured = measure(args.incidents, args.snapshot_incidents, args.requests, args.keep)
    for figure in measured:
        print_figure(figure)
    return 0 if all(f.met is not False for f in measured) else 1


def figures(quick: bool = False) -> list[Figure]:
    """For ``python -m bench``; the quick variant is a tenth of the size and claims no target."""
    if not quick:
        return measure(10_000, 1_000, 30, None)
    return [replace(f, target=None, met=None) for f in measure(1_000, 100, 5, None)]


def measure(incidents: int, snapshot_incidents: int, requests: int, keep: Path | None) -> list[Figure]:
    with tempfile.TemporaryDirectory(prefix="acklab-bench-") as tmp:
        root = keep or Path(tmp)
        big, small = root / "evidence-big", root / "evidence-small"
        print(f"generating {incidents} incidents ...", file=sys.stderr, flush=True)
        made = generate(big, incidents)
        print(f"generating {snapshot_incidents} incidents for the snapshot ...", file=sys.stderr, flush=True)
        generate(small, snapshot_incidents)
        overview = run_phase("overview", str(big), str(requests))
        # The baseline, in the same run: the same overview over the snapshot's tenth of the incidents.
        smaller = run_phase("overview", str(small), str(requests))
        snapshot = run_phase("snapshot", str(small), str(root / "public"))

    return [
        Figure("console.generate_seconds", made, "s", note=f"{overview['incidents']} incidents in {overview['bundles']} bundles, written by {GENERATORS} processes"),
        Figure("console.index_warmup_seconds", overview["warmup_s"], "s", note="app start: discovery + every bundle summarised"),
        Figure("console.overview_first_ms", overview["first_ms"], "ms", note="first request: verifies the bundles on page 1"),
        Figure("console.overview_ms", overview["warm_median_ms"], "ms", target="<= 300", met=overview["warm_median_ms"] <= 300,
               baseline=smaller["warm_median_ms"], ratio=overview["warm_median_ms"] / smaller["warm_median_ms"],
               note=f"{overview['incidents']} incidents (baseline: {smaller['incidents']}); median of {requests}; p95 {overview['warm_p95_ms']:.1f} ms; {overview['rows_on_page']} rows per page"),
        Figure("console.overview_page40_ms", overview["page40_median_ms"], "ms", target="<= 300", met=overview["page40_median_ms"] <= 300),
        Figure("console.overview_during_rescan_ms", overview["during_rescan_median_ms"], "ms", target="<= 300",
               met=overview["during_rescan_median_ms"] <= 300, note="a request that starts the periodic rescan (it runs in a thread)"),
        Figure("console.rescan_ms", overview["rescan_median_ms"], "ms", note="one rescan of the evidence directory, off the request path"),
        Figure("console.overview_peak_rss_mb", overview["peak_rss_mb"], "MiB"),
        Figure("console.snapshot_seconds", snapshot["seconds"], "s", target="<= 20", met=snapshot["seconds"] <= 20,
               note=f"{snapshot_incidents} incidents: {snapshot['pages']} pages, {snapshot['raw_files']} raw files"),
        Figure("console.snapshot_peak_rss_mb", snapshot["peak_rss_mb"], "MiB"),
    ]  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
