"""Emails and outbound calls (docs/sinks.md): what the sinks cost, and the correct twins' verdicts over many runs.

* Cost: the smtplib receipt mailer (``after-commit``: correct) attacked with the six default
  experiments, once with ``effects.smtp`` (the lab runs aiosmtpd; the consumer mails it; every
  count also tallies the emails) and once without (no SMTP configured: it sends nothing), the
  two alternating, median wall time of each. Target: the sinks cost <= 1.10x.
* Reliability: each correct twin of `tests.consumers.test_sinks` (receipts after the commit
  on Django, the worker that mails later, refunds keyed by the event id) passes 20 of 20 runs,
  and so do those of `tests.consumers.test_sink_encodings` (receipts sent plain, base64,
  quoted-printable and multipart in turn; refunds whose JSON escapes the order id).

``python -m bench.sinks [--quick]`` prints the figures.
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from bench.figures import Figure, in_scratch, print_figure
from bench.runs import described, each, mismatches
from tests.consumers import sink_scenarios
from tests.consumers.scenarios import DEFAULT_SET, Scenario

COST_TARGET = 1.10
RUNS = 20
# Four experiments, at least four events: each receipt in the next of the four encodings.
ENCODED = ("lost-ack", "lost-ack-reset", "timeout-overlap", "concurrent-duplicates")


def _without_sinks(scenario: Scenario) -> Scenario:
    doc = yaml.safe_load(scenario.spec.read_text())
    del doc["effects"]["smtp"]
    for name in ("SMTP_PORT", "SMTP_USER", "SMTP_PASSWORD"):
        doc["command"]["env"].pop(name)
    plain = scenario.spec.with_name(scenario.spec.stem + "-plain.yaml")
    plain.write_text(yaml.safe_dump(doc, sort_keys=False))
    return Scenario(scenario.name + " (no sinks)", plain, scenario.experiments, scenario.expected)


def cost_figure(quick: bool, root: Path) -> Figure:
    # Seven rounds: the overhead is ~0.08 s of a 1 s run (the consumer's SMTP exchanges with the
    # sink), and the median of five wandered 1.04-1.12x between runs of the same code.
    rounds = 1 if quick else 7
    experiments = ("lost-ack",) if quick else DEFAULT_SET
    with_sinks = sink_scenarios.receipt_mailer(
        root, "after-commit", experiments, dict.fromkeys(experiments, "pass")
    )
    plain = _without_sinks(with_sinks)
    walls: dict[str, list[float]] = {"sinks": [], "plain": []}
    wrong: list[str] = []
    for n in range(rounds):
        order = (("sinks", with_sinks), ("plain", plain))
        for label, scenario in order if n % 2 == 0 else order[::-1]:
            started = time.perf_counter()
            result = scenario.run(root / f"out-{label}-{n}")
            walls[label].append(time.perf_counter() - started)
            wrong += scenario.mismatches(result)
    value, baseline = statistics.median(walls["sinks"]), statistics.median(walls["plain"])
    ratio = value / baseline
    return Figure(
        "sinks: a default run with effects.smtp" + (" (quick)" if quick else ""),
        value,
        "s",
        baseline=baseline,
        ratio=ratio,
        target=None if quick else f"<= {COST_TARGET:g}x the run without sinks",
        met=None if quick else ratio <= COST_TARGET and not wrong,
        note=f"median of {rounds}, {len(experiments)} experiment(s) x 1 trial, the smtplib receipt mailer "
        "(after-commit); baseline: the same consumer and spec without effects.smtp (it sends no mail)"
        + (f"; WRONG VERDICTS: {wrong[:3]}" if wrong else ""),
    )


# name -> (scenario builder, its mode, experiments, keywords): each correct twin, built anew for every run.
TWINS: dict[str, tuple[Callable[..., Scenario], str, tuple[str, ...], dict[str, str]]] = {
    "django receipts after the commit": (sink_scenarios.django_receipts, "after-commit",
                                         ("lost-ack", "concurrent-duplicates"), {}),
    "worker that mails later": (sink_scenarios.receipt_mailer, "worker", ("lost-ack",), {}),
    "refunds keyed by the event id": (sink_scenarios.refunds, "event-key", ("lost-ack",), {}),
    "receipts in every encoding": (sink_scenarios.receipt_mailer, "after-commit", ENCODED, {"encoding": "rotate"}),
    "refunds with escaped JSON": (sink_scenarios.refunds, "event-key", ("lost-ack",), {"body": "escaped"}),
}  # fmt: skip


def twin_run(case: tuple[str, Path]) -> bool:
    """One run of the twin named in `case`, in its own folder: whether every experiment passed."""
    name, tmp = case
    make, mode, experiments, keywords = TWINS[name]
    tmp.mkdir(parents=True)
    scenario = make(tmp, mode, experiments, dict.fromkeys(experiments, "pass"), **keywords)
    return not mismatches(scenario, tmp / "out")


def reliability_figures(quick: bool, root: Path) -> list[Figure]:
    runs = 1 if quick else RUNS
    cases = [(name, root / f"{name.replace(' ', '-')}-{n}") for name in TWINS for n in range(runs)]
    passed = dict.fromkeys(TWINS, 0)
    for (name, _), ok in zip(cases, each(twin_run, cases), strict=True):
        passed[name] += ok
    return [
        Figure(
            f"sinks: {name} passes" + (" (quick)" if quick else ""),
            float(passed[name]),
            f"of {runs} runs",
            target=None if quick else f"{runs}/{runs}",
            met=None if quick else passed[name] == runs,
            note=f"each run a fresh database and fresh sinks; {described(len(cases))}",
        )
        for name in TWINS
    ]


def figures(quick: bool = False) -> list[Figure]:
    """What the sinks cost a run (it measures time: run alone)."""
    root = Path(tempfile.mkdtemp(prefix="acklab-bench-sinks-"))
    try:
        return [cost_figure(quick, root)]
    finally:
        shutil.rmtree(root, ignore_errors=True)


def reliability(quick: bool = False) -> list[Figure]:
    """Every run of each consumer with sinks gets its verdicts (no figure here is a time)."""
    return in_scratch("acklab-bench-sinks-", lambda root: reliability_figures(quick, root))


def main() -> None:
    quick = "--quick" in sys.argv[1:]
    for figure in [*figures(quick), *reliability(quick)]:
        print_figure(figure)


if __name__ == "__main__":
    main()
