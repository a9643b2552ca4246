"""Verdicts beyond one event (docs/beyond-one-event.md): how reliably the lab judges consumers of an
object's several events — a subscription store on out-of-order events, an invoice consumer on
sibling events, a checkout racing its browser return — each served by the lab from its spec
(tests/consumers/object_scenarios.py), 20 runs each (19 of 20 for the race).

A module of its own beside ``bench.verdict_trust``: its runs take as long as that module's, and
``python -m bench`` runs the two modules' reliability parts side by side (nothing here is a time).

``python -m bench.beyond_one_event [--quick]`` prints the figures.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from acklab.harness.engine.runner import RunResult
from acklab.harness.procs.pgtemp import PostgresServer, start_postgres
from bench.figures import Figure, print_measured
from bench.verdict_trust import Check, no_trial_erred, share_right, trials_of
from tests.consumers.scenarios import Scenario


@dataclass(frozen=True)
class VariantsFailing:  # a check like the functions beside it, an object so that it pickles
    """out-of-order: exactly the `expected` variants fail newest-state-wins, and no trial erred."""

    expected: frozenset[str]

    def __call__(self, result: RunResult) -> list[str]:
        found: set[str] = set()
        for trial in trials_of(result):
            objects = {c.object_id: c.variant for c in trial.objects or []}
            for violation in trial.violations:
                if violation.invariant == "newest-state-wins":
                    found |= {v for o, v in objects.items() if f"object {o} " in violation.detail}
        return (
            []
            if found == self.expected
            else [f"newest-state-wins failed on {sorted(found)}, expected {sorted(self.expected)}"]
        )


# The figures in pieces that share nothing, each measured in a process of its own beside the others
# by ``python -m bench`` (only the checkouts on PostgreSQL need its server); in the order of the figures.
PIECES = ("subscriptions", "invoices", "checkout-sqlite", "checkout-postgresql")


def beyond_one_event_figures(
    quick: bool, root: Path, pg_server: Callable[[], str], piece: str | None = None
) -> list[Figure]:
    """The consumers beyond one event (tests/consumers/object_scenarios.py), each served by the lab
    from its spec: 20 runs each (19 of 20 for the race); of one of `PIECES` only when `piece` names it."""
    from tests.consumers import object_scenarios as o
    from tests.consumers.scenarios import SECRETS

    os.environ.update(SECRETS)
    runs = 2 if quick else 20
    arrival = sorted(o.SUBSCRIPTION_EXPECTED["arrival"])
    plan: list[tuple[str, str, Callable[[Path], Scenario], tuple[Check, ...], float]] = [
        (
            "subscriptions",
            f"a subscription store applying events in arrival order fails newest-state-wins on {', '.join(arrival)}",
            lambda tmp: o.subscriptions(tmp, "arrival"),
            (VariantsFailing(frozenset(arrival)), no_trial_erred),
            1.0,
        )
    ]
    plan += [
        (
            "subscriptions",
            "a subscription store with a >= watermark on seconds fails only same-second",
            lambda tmp: o.subscriptions(tmp, "watermark-ge"),
            (VariantsFailing(frozenset({"same-second"})), no_trial_erred),
            1.0,
        ),
        (
            "subscriptions",
            "a correct subscription store passes every out-of-order variant",
            lambda tmp: o.subscriptions(tmp, "correct"),
            (no_trial_erred,),
            1.0,
        ),
        (
            "invoices",
            "an invoice consumer fulfilling on both invoice.paid and invoice.payment_succeeded fails sibling-events",
            lambda tmp: o.invoices(tmp, "both"),
            (no_trial_erred,),
            1.0,
        ),
        (
            "invoices",
            "its correct twin (one provision per invoice) passes sibling-events",
            lambda tmp: o.invoices(tmp, "correct"),
            (no_trial_erred,),
            1.0,
        ),
    ]
    for label, db in (("SQLite", "sqlite"), ("PostgreSQL", "postgresql")):
        plan += [
            (
                f"checkout-{db}",
                f"a checkout whose webhook and browser return both create the order fails race-with-request "
                f"(last-byte, {label})",
                lambda tmp, db=db: o.checkout(tmp, "racy", db),
                (),
                0.95,
            ),
            (
                f"checkout-{db}",
                f"its locked twin passes race-with-request ({label})",
                lambda tmp, db=db: o.checkout(tmp, "locked", db),
                (no_trial_erred,),
                1.0,
            ),
        ]
    if {entry[0] for entry in plan} != set(PIECES):  # a figure no piece runs would vanish from the bench
        raise ValueError(f"the plan's pieces {sorted({entry[0] for entry in plan})} are not PIECES {PIECES}")
    figures = []
    for k, (label, name, build, checks, at_least) in enumerate(plan):
        if piece is not None and label != piece:
            continue
        if label == "checkout-postgresql":
            os.environ[o.PG_SERVER_ENV] = pg_server()
        tmp = root / f"beyond-{k}"
        tmp.mkdir()
        figures.append(
            # Every serve gets its own database ({{scratch}}, or one the lab makes on the server): the
            # runs share nothing, so they run several at once.
            share_right(
                name,
                build(tmp),
                runs,
                root / "evidence-beyond" / str(k),
                *checks,
                at_least=at_least,
                apart=True,
            )
        )
    return figures


# -- cost --------------------------------------------------------------------------------------


def reliability(quick: bool = False, piece: str | None = None) -> list[Figure]:
    """How many runs of each consumer got the verdicts it must get (no figure here is a time); of
    one of `PIECES` only when `piece` names it."""
    root = Path(tempfile.mkdtemp(prefix="acklab-bench-beyond-"))
    server: PostgresServer | None = None

    def pg_server() -> str:
        # Specs that make their databases on the server (database:) get its own URL.
        nonlocal server
        if server is None:
            server = start_postgres()
        return server.url("postgres")

    try:
        return beyond_one_event_figures(quick, root, pg_server, piece)
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    print_measured(reliability)
