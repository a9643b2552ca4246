"""One source for each list of names: `evidence.documents.verdicts` holds the experiment
names (`ExperimentName`) and the invariants (`Invariant`); the harness's registry, the
published schemas, the console and the docs agree with them."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

from acklab.console.overview import EXPERIMENT_ORDER, experiment_key
from acklab.evidence.documents.verdicts import EXPERIMENT_NAMES, INVARIANTS
from acklab.harness.experiments import EXPERIMENTS

ROOT = Path(__file__).resolve().parents[1]


def schema(kind: str) -> Any:
    text = resources.files("acklab.evidence").joinpath("schemas", f"{kind}.schema.json").read_text("utf-8")
    return json.loads(text)


def test_the_registry_holds_every_name_in_the_lists_order() -> None:
    assert list(EXPERIMENTS) == list(EXPERIMENT_NAMES), (
        "harness/experiments/__init__.py registers an experiment whose name is not in "
        "evidence/documents/verdicts.py's ExperimentName, or misses one that is"
    )
    assert all(name == experiment.name for name, experiment in EXPERIMENTS.items())


def test_an_experiment_spec_may_use_exactly_the_listed_names() -> None:
    uses = schema("experiment")["properties"]["uses"]["enum"]
    assert uses == list(EXPERIMENT_NAMES), "experiment.schema.json's `uses` enum differs from ExperimentName"


def test_a_violation_names_exactly_the_listed_invariants() -> None:
    invariant = schema("common")["$defs"]["violation"]["properties"]["invariant"]["enum"]
    assert invariant == list(INVARIANTS), "common.schema.json's violation invariants differ from Invariant"
    for experiment in EXPERIMENTS.values():
        assert set(experiment.invariants) <= set(INVARIANTS), experiment.name


def test_the_console_shows_experiments_in_the_lists_order() -> None:
    assert EXPERIMENT_ORDER == EXPERIMENT_NAMES
    backwards = list(EXPERIMENT_NAMES)[::-1]
    assert sorted(backwards, key=experiment_key) == list(EXPERIMENT_NAMES)
    assert experiment_key("an-unknown-one") > experiment_key(EXPERIMENT_NAMES[-1])


def test_the_docs_describe_every_experiment() -> None:
    docs = "".join(
        (ROOT / "docs" / page).read_text(encoding="utf-8")
        for page in ("experiments.md", "beyond-one-event.md")
    )
    missing = [name for name in EXPERIMENT_NAMES if f"`{name}`" not in docs]
    assert missing == [], "add them to docs/experiments.md"


def test_run_and_plan_help_name_every_experiment_whole() -> None:
    """`acklab run --help` is where a user looks a name up: none may be broken at a hyphen."""
    import re

    from click.testing import CliRunner

    from acklab.harness.cli.run import plan, run

    for command in (run, plan):
        shown = CliRunner().invoke(command, ["--help"], terminal_width=80).output
        words = set(re.findall(r"[a-z0-9]+(?:-[a-z0-9]+)*", shown))
        missing = [name for name in EXPERIMENT_NAMES if name not in words]
        assert not missing, f"{command.name} --help breaks or omits {missing}"
