"""``acklab demo``: what ``make demo`` shows.

Part 1 — the fixture by hand: one signed event, a retry of it, a conflicting body, and how
many fulfillments exist afterwards. Part 2 — every experiment against ``fixture:unsafe``
and ``fixture:live``, side by side: one plan (one seed) for both, in one comparison bundle,
so the console compares them delivery by delivery. Part 3 — the deeper faults on the live
handler: one crash-after-commit trial, and, when PostgreSQL is installed, one db-reset trial
on a temporary server. The unsafe handler failing (two fulfillments for one event under
lost-ack) is the expected outcome; the demo exits 0 when every part shows what it should.
Part 2 includes what goes wrong beyond one event: the fixture's order lifecycle delivered out
of order, its sibling payment.succeeded, the browser return racing the webhook — the unsafe
handler breaks all three, the live one keeps them.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from datetime import UTC, datetime
from pathlib import Path

import click
import httpx
from rich.table import Table

from acklab.evidence.documents.verdicts import ExperimentName
from acklab.evidence.exitcodes import ExitCode
from acklab.harness.cli.progress import STYLE, ProgressDisplay, output_console
from acklab.harness.engine.comparison import run_comparison
from acklab.harness.engine.runner import RunOptions, RunResult, run
from acklab.harness.procs import pgtemp
from acklab.harness.targets import Needs
from acklab.harness.targets.fixture import fixture_target
from acklab.harness.wire.signing import SIGNERS, Attempt
from acklab.harness.wire.templates import conflicting, render

console = output_console()
# What the unsafe handler must fail beyond one event (and the live one pass).
BEYOND: tuple[ExperimentName, ...] = ("out-of-order", "sibling-events", "race-with-request")


async def _by_hand(db_url: str | None) -> None:
    target = fixture_target("fixture:live", db_url=db_url)
    try:
        # The lab's SMTP and warehouse sinks: the fixture emails and ships each fulfilment.
        sinks = await asyncio.to_thread(target.start_sinks)
        async with target.serve(Needs(socket=True)) as endpoint:
            event = render(
                target.template,
                event_id="evt_demo_0001",
                order_id="ord_demo_0001",
                seq=1,
                created=datetime.now(UTC),
            )
            sinks.register(event.event_id, event.order_id, event.object_id)
            signer = SIGNERS[target.scheme]
            async with httpx.AsyncClient(transport=endpoint.transport, timeout=10.0) as client:

                async def deliver(what: str, body: bytes) -> None:
                    attempt = Attempt(event.event_id, event.event_type, body, int(time.time()), "demo")
                    headers = {"Content-Type": "application/json", **signer.headers(attempt, target.secret)}
                    response = await client.post(endpoint.url, content=body, headers=headers)
                    answer = response.json() if response.content else {}
                    said = answer.get("status") or answer.get("error") or ""
                    replayed = ", replayed" if response.headers.get("Idempotent-Replayed") else ""
                    console.print(f"  {what:<37} -> [bold]{response.status_code}[/] {said}{replayed}")

                console.print(f"[bold]Part 1[/] — the live fixture ({target.scheme} signatures), by hand")
                await deliver("order.paid, first delivery", event.body)
                await deliver("the same event again (a retry)", event.body)
                await deliver(
                    "same id, amount changed (a conflict)", conflicting(event, target.conflict_set).body
                )
            effects = await endpoint.probe.count(event.event_id, event.object_id)
            told = sinks.tally(event.event_id)
            console.print(
                f"  fulfillments for {event.event_id}: [bold]{effects}[/] · emails: [bold]{told.counts.get('emails')}[/] · "
                f"warehouse requests: [bold]{told.counts.get('calls')}[/] (one event, one side effect — in the database "
                "and outside it)\n"
            )
    finally:
        await target.aclose()


def _lost_ack_effects(result: RunResult) -> int | None:
    experiment = result.document.experiment("lost-ack")
    if experiment is not None and experiment.violations:
        observed = experiment.violations[0].observed
        return observed if isinstance(observed, int) else None
    return None


def _side_by_side(unsafe: RunResult, live: RunResult) -> Table:
    table = Table(title="Part 2 — every experiment, side by side", title_justify="left")
    for column in ("experiment", "fixture:unsafe", "fixture:live"):
        table.add_column(column)

    def cell(result: RunResult, name: str) -> str:
        entry = result.document.experiment(name)
        if entry is None:
            return "—"
        text = f"[{STYLE.get(entry.verdict, '')}]{entry.verdict}[/]"
        if entry.violations:
            v = entry.violations[0]
            text += f" ({v.invariant}: {v.observed}, expected {v.expected})"
        return text

    for entry in live.document.experiments:
        table.add_row(entry.name, cell(unsafe, entry.name), cell(live, entry.name))
    return table


def _deeper_faults(out: Path) -> list[RunResult]:
    """Part 3: the live handler survives a crash after commit and a reset database link."""
    results = []
    console.print("[bold]Part 3[/] — deeper faults on fixture:live, one trial each")
    results.append(
        run(RunOptions(target="fixture:live", experiments=("crash-after-commit",), trials=1, out=out), [])
    )
    if not pgtemp.available():
        console.print("  db-reset: skipped in the demo — PostgreSQL is not installed (make test installs it)")
    else:
        server = pgtemp.start_postgres()
        try:
            options = RunOptions(
                target="fixture:live",
                experiments=("db-reset",),
                trials=1,
                out=out,
                db=server.create_database(),
            )
            results.append(run(options, []))
        finally:
            server.stop()
    for result in results:
        entry = result.document.experiments[0]
        style = STYLE.get(entry.verdict, "")
        console.print(f"  {entry.name:<20} [{style}]{entry.verdict}[/]  ({result.bundle})")
    return results


@click.command("demo", context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--trials", type=click.IntRange(min=1), default=3, show_default=True, help="Trials per experiment."
)
@click.option(
    "--out", type=click.Path(file_okay=False, path_type=Path), default=Path("out"), show_default=True
)
@click.option("--db", default=None, metavar="URL", help="Fixture database URL (default: temporary SQLite).")
@click.option(
    "--seed",
    type=int,
    default=None,
    help="The plan's seed, shared by both handlers (default: random, printed).",
)
def demo(trials: int, out: Path, db: str | None, seed: int | None) -> int:
    """The guided demo: the fixture by hand, then every experiment on the unsafe and the live handler."""
    asyncio.run(_by_hand(db))
    # One plan for both handlers: the same seed, so the console compares them delivery by delivery.
    seed = seed if seed is not None else secrets.randbits(32)
    console.print(
        f"[bold]Part 2[/] — all experiments on fixture:unsafe and fixture:live: one plan "
        f"(seed {seed}, {trials} trials each)"
    )
    options = RunOptions(target="fixture:unsafe", trials=trials, db=db, out=out, seed=seed)
    compared = run_comparison(options, ("fixture:unsafe", "fixture:live"), [ProgressDisplay(console)])
    unsafe, live = compared.runs
    console.print(_side_by_side(unsafe, live))
    deeper = _deeper_faults(out)
    double = _lost_ack_effects(unsafe)
    if double is not None:
        console.print(
            f"The unsafe handler fulfilled one event [bold red]{double}[/] times when its acknowledgement was lost."
        )
    console.print(
        f"Evidence: {compared.bundle} (both runs; compare them with `acklab console --evidence {out}`)"
    )
    console.print(
        "What this proves: at most one side effect per event in the fixture's own database under these "
        "faults — not exactly-once delivery across systems."
    )
    if ExitCode.LAB_ERROR in (unsafe.exit_code, live.exit_code, *(r.exit_code for r in deeper)):
        return int(ExitCode.LAB_ERROR)
    deeper_ok = all(r.verdict == "pass" for r in deeper)
    beyond = [unsafe.document.experiment(name) for name in BEYOND]
    beyond_ok = all(entry is not None and entry.verdict == "fail" for entry in beyond)
    if beyond_ok:
        console.print(
            "Beyond one event, the unsafe handler let a late order event take a refunded order back, "
            "fulfilled an order on both of its payment events, and again when the browser came back."
        )
    if live.verdict == "pass" and deeper_ok and beyond_ok and double is not None and double >= 2:
        console.print(
            "[green]demo ok[/]: the unsafe handler fails as expected, the live handler passes everything."
        )
        return int(ExitCode.OK)
    console.print("[red]demo did not show the expected outcome[/] (see the table above).")
    return int(ExitCode.VERDICT_FAILED)
