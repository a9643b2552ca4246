"""The sinks are a registry (`harness.sinks.SINKS`): a sink is declared once, in its module and its
spec section, and everything else iterates it (docs/sinks.md, "Adding a sink")."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from acklab.evidence.documents.records import SINK_SOURCES, Observation
from acklab.harness.sinks import SINKS
from acklab.harness.specs.target import RUN_PLACEHOLDERS, SINK_SECTIONS, STAND_INS, Expect

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
ITERATES = ["harness/core", "harness/engine", "evidence/documents", "console", "acklab/pytest_plugin.py"]
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
