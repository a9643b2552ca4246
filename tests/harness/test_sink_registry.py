"""The sinks are a registry (`harness.sinks.SINKS`): a sink is declared once, in its module and its
spec section, and everything else iterates it (docs/sinks.md, "Adding a sink")."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from acklab.evidence.documents.records import SINK_SOURCES, Observation
from acklab.harness.experiments.effect_failure import EffectFailureExperiment
from acklab.harness.sinks import SINKS
from acklab.harness.specs.target import RUN_PLACEHOLDERS, SINK_SECTIONS, STAND_INS, Expect
from acklab.harness.targets.spec import load_target
from tests.harness.test_provider_spec import spec

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "evidence" / "schemas"
# Where a sink may be named: its own module, its spec section, its count in the evidence (and the
# built-in fixture, which runs both of today's sinks as its demo).
DECLARED_IN = {
    "harness/sinks",
    "harness/specs/target.py",
    "evidence/documents/records.py",
    "harness/targets/fixture.py",
}
# What iterates the registry, and so names no sink.
ITERATES = [
    "harness/core",
    "harness/engine",
    "harness/experiments",
    "evidence/documents",
    "console",
    "acklab/pytest_plugin.py",
]
# idempotent-outbound is a verdict of keyed calls: the console files it under calls.
ALLOWED = {("console/scan.py", "calls")}


def test_every_sink_section_has_its_sink_and_every_sink_its_section():
    assert list(SINKS) == list(SINK_SECTIONS)
    assert {kind.source for kind in SINKS.values()} == set(SINK_SOURCES)


def test_each_sinks_count_expectation_and_placeholder_are_declared_everywhere_they_are_read():
    target = json.loads((SCHEMAS / "target.schema.json").read_text())
    common = json.loads((SCHEMAS / "common.schema.json").read_text())
    observed = common["$defs"]["observation"]["properties"]
    for name, kind in SINKS.items():
        assert kind.source in Observation.model_fields, name
        assert kind.source in observed, name
        assert f"max_{kind.source}" in Expect.model_fields, name
        assert f"max_{kind.source}" in target["properties"]["expect"]["properties"], name
        assert name in target["properties"]["effects"]["properties"], name
        assert kind.placeholder in RUN_PLACEHOLDERS
        # what harness.targets.isolation fills it with: a port it picks, written the sink's way
        assert "{port}" in kind.section.ADDRESS
        assert kind.section.ADDRESS.format(port=1).removeprefix("http://127.0.0.1:") == "1"
        assert Expect().max_of(kind.source) == 1
    assert common["$defs"]["sink_source"]["enum"] == list(SINK_SOURCES)
    assert len(set(STAND_INS.values())) == len(STAND_INS)  # no two stand-ins alike


def _names(path: Path, words: frozenset[str]) -> list[str]:
    """The string constants of `path` (docstrings aside) that are one of `words`."""
    tree = ast.parse(path.read_text("utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and node.value in words and id(node) not in docstrings
    ]


def test_nothing_that_iterates_the_registry_names_a_sink():
    words = frozenset({*SINKS, *SINK_SOURCES, *(f"max_{kind.source}" for kind in SINKS.values())})
    files = [
        p
        for where in ITERATES
        for p in ([ROOT / where] if where.endswith(".py") else (ROOT / where).rglob("*.py"))
    ]
    assert len(files) > 20
    found = []
    for path in files:
        rel = path.relative_to(ROOT).as_posix()
        if any(rel == d or rel.startswith(d + "/") for d in DECLARED_IN):
            continue
        found += [(rel, word) for word in _names(path, words) if (rel, word) not in ALLOWED]
    assert found == []


# Each sink's section as a spec gives it, on a fixed port (nothing is served here).
SECTIONS = {
    "smtp": {"listen": "127.0.0.1:12025"},
    "outbound": {"listen": "127.0.0.1:12080", "routes": [{"path": "/v1/refunds"}]},
    "provider_api": {"listen": "127.0.0.1:12111"},
}


@pytest.mark.parametrize("names", [("outbound",), ("provider_api",), ("smtp",), ("smtp", "outbound")])
def test_effect_failure_stalls_an_event_where_a_sink_the_target_runs_declares_it_can(
    tmp_path, monkeypatch, names
):
    """The stall is the registry's to declare (`SinkKind.stalls`), not a name the experiment knows."""
    assert set(SECTIONS) == set(SINKS)
    target = load_target(
        spec(tmp_path, monkeypatch, effects={name: SECTIONS[name] for name in names}), allow_remote=False
    )
    assert target.capabilities().sinks == tuple(name for name in SINKS if name in names)
    stalls = any(SINKS[name].stalls for name in names)
    assert EffectFailureExperiment().modes(target) == (("refuse", "stall") if stalls else ("refuse",))
    assert stalls == ("smtp" in names)  # today's one sink that can stall: the mail server
