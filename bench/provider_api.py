"""The provider talks back (docs/provider-api.md, docs/signatures.md): every consumer's verdict over many runs.

Each consumer of `tests.consumers.test_provider_api` beside its correct twin: the twin passes
20 of 20 runs, the consumer with the bug fails 20 of 20 (a verdict that flips on a loaded
machine is worth nothing either way). Each run serves a fresh consumer, database and API.

``python -m bench.provider_api [--quick]`` prints the figures.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from bench.figures import Figure, print_figure
from bench.runs import described, each, mismatches
from tests.consumers import provider_scenarios as ps
from tests.consumers import sink_scenarios
from tests.consumers.scenarios import Scenario

RUNS = 20
FETCHES = ("fetch-lag", "fetch-stale", "fetch-throttled")
Make = Callable[[Path, str, tuple[str, ...], dict[str, str]], Scenario]
# name -> (scenario builder, the bug's mode, the twin's mode, experiments)
PAIRS: dict[str, tuple[Make, str, str, tuple[str, ...]]] = {
    "a re-fetching Stripe consumer (fetch-*)": (ps.stripe_fetch, "drop", "retry-later", FETCHES),
    "a refund flow and its echo (provider-echo)": (ps.stripe_refunds, "check-then-insert", "by-refund-id",
                                                   ("provider-echo",)),
    "a partial-refund ledger (totals-match)": (ps.refund_ledger, "add-cumulative", "difference", ("out-of-order",)),
    "a receipt mailer (effect-failure)": (sink_scenarios.receipt_mailer, "swallow-refusal", "fail-on-refusal",
                                          ("effect-failure",)),
    "a mailer swallowing a relay timeout (effect-failure)": (sink_scenarios.receipt_mailer, "swallow-timeout",
                                                             "fail-on-refusal", ("effect-failure",)),
    "a rotated Stripe verifier (key-rotation)": (ps.stripe_verifier, "first-signature", "library", ("key-rotation",)),
    "a raw-bytes verifier (raw-bytes)": (ps.stripe_verifier, "reserialised", "library", ("raw-bytes",)),
}  # fmt: skip


def verdict_run(case: tuple[str, str, str, Path]) -> bool:
    """One run of the consumer of pair `name` in `mode`: whether every experiment got `verdict`."""
    name, mode, verdict, tmp = case
    make, _, _, experiments = PAIRS[name]
    tmp.mkdir(parents=True)
    scenario = make(tmp, mode, experiments, dict.fromkeys(experiments, verdict))
    return not mismatches(scenario, tmp / "out")


def reliability(quick: bool = False) -> list[Figure]:
    runs = 1 if quick else RUNS
    root = Path(tempfile.mkdtemp(prefix="acklab-bench-provider-"))
    # Each consumer beside its twin: the twin passes, the consumer with the bug fails.
    judged = [
        (name, mode, verdict)
        for name, (_, bug, twin, _) in PAIRS.items()
        for mode, verdict in ((twin, "pass"), (bug, "fail"))
    ]
    cases = [
        (name, mode, verdict, root / f"{k}-{mode}" / f"{mode}-{n}")
        for k, (name, mode, verdict) in enumerate(judged)
        for n in range(runs)
    ]
    try:
        right = dict.fromkeys(((n, m) for n, m, _ in judged), 0)
        for (name, mode, _, _), ok in zip(cases, each(verdict_run, cases), strict=True):
            right[name, mode] += ok
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return [
        Figure(
            f"provider: {name}, {mode}, {'passes' if verdict == 'pass' else 'fails'}"
            + (" (quick)" if quick else ""),
            float(right[name, mode]),
            f"of {runs} runs",
            target=None if quick else f"{runs}/{runs}",
            met=None if quick else right[name, mode] == runs,
            note=f"{', '.join(PAIRS[name][3])}; each run a fresh service, database and provider's API; "
            f"{described(len(cases))}",
        )
        for name, mode, verdict in judged
    ]


def main() -> None:
    for figure in reliability(quick="--quick" in sys.argv[1:]):
        print_figure(figure)


if __name__ == "__main__":
    main()
