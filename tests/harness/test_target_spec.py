"""The target spec is one typed value: `TargetSpec` and the published schema agree, both ways, and
every spec the docs and the README show reads into it unchanged.

* Every section model mirrors its schema object (the same field names, the same required
  ones, the same JSON types, closed like the schema, all the way down), as the evidence
  documents do (`tests/evidence/test_documents.py`, whose checker this uses).
* A spec read and dumped again is the document that was written (nothing added, nothing lost).
* Errors keep naming the field, the value and the fix.
"""

from __future__ import annotations

import inspect
import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from acklab.harness.errors import SpecError
from acklab.harness.specs import experiment as experiment_module
from acklab.harness.specs import service as service_module
from acklab.harness.specs import target as target_module
from acklab.harness.specs.sections import Section
from acklab.harness.specs.target import load_target_spec, read_target
from tests.evidence.test_documents import Schema, agreement

ROOT = Path(__file__).resolve().parents[2]
SECTIONS = [
    value
    for module in (target_module, service_module, experiment_module)
    for _, value in inspect.getmembers(module, inspect.isclass)
    if issubclass(value, Section)
    and value is not Section
    and value.SCHEMA
    and value.__module__ == module.__name__
]


@pytest.mark.parametrize("model", SECTIONS, ids=lambda m: m.__name__)
def test_each_section_mirrors_its_schema_object(model: type[Section]):
    assert agreement(model, Schema.at(model.SCHEMA), model.__name__) == []


def test_every_property_of_the_schema_has_a_model():
    mirrored = {model.SCHEMA for model in SECTIONS}
    schema = Schema.at("target").node
    for name, prop in schema["properties"].items():
        if prop.get("type") == "object" and "properties" in prop:
            assert f"target#/properties/{name}" in mirrored, name


def _shown_specs() -> list[tuple[str, dict[str, Any]]]:
    """Every ``kind: target`` YAML block of the README and the docs pages."""
    found = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for k, block in enumerate(re.findall(r"```yaml\n(.*?)```", page.read_text("utf-8"), re.S)):
            try:
                doc = yaml.safe_load(block)
            except yaml.YAMLError:  # GitLab CI's !reference tags: not a spec
                continue
            if isinstance(doc, dict) and doc.get("kind") == "target":
                found.append((f"{page.relative_to(ROOT)}#{k}", doc))
    return found


SHOWN = _shown_specs()


def test_the_docs_show_specs():
    assert {where.split("#")[0] for where, _ in SHOWN} >= {"docs/targets.md", "docs/placeholders.md"}


@pytest.mark.parametrize(("where", "doc"), SHOWN, ids=[where for where, _ in SHOWN])
def test_a_shown_spec_reads_unchanged(where: str, doc: dict[str, Any]):
    spec = read_target(doc, source=where)
    assert spec.dump() == doc
    assert spec.signing.scheme == doc["signing"]["scheme"]


def _spec_files() -> list[Path]:
    """Every ``kind: target`` YAML file of the repository (tests' specs, examples)."""
    # Pruned while walking, not filtered after: .venv and .tools alone hold tens of thousands
    # of files, and every pytest worker collects this module.
    skip = {".venv", ".tools", "out", ".acklab", "node_modules", ".git", "site", ".hypothesis"}  # and *_cache
    found = []
    for where, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in skip and not d.endswith("_cache")]
        for name in files:
            if not name.endswith((".yml", ".yaml")):
                continue
            path = Path(where, name)
            try:
                doc = yaml.safe_load(path.read_text("utf-8"))
            except (yaml.YAMLError, UnicodeDecodeError):
                continue
            if isinstance(doc, dict) and doc.get("kind") == "target":
                found.append(path)
    return sorted(found)


SPEC_FILES = _spec_files()


def test_the_repository_holds_spec_files():
    assert SPEC_FILES  # most tests write their specs where they run them (and load them as every spec is)


@pytest.mark.parametrize("path", SPEC_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_spec_file_reads_unchanged(path: Path):
    spec = load_target_spec(path)
    assert spec.dump() == yaml.safe_load(path.read_text("utf-8"))


FULL = """
apiVersion: acklab/v1
kind: target
name: shop
endpoint: "http://127.0.0.1:{{port}}/webhooks/orders"
headers: {X-Api-Key: env:SHOP_KEY}
signing: {scheme: stripe, secret: env:SHOP_SECRET}
delivery: {timeout_s: 2, event_type: order.paid}
command:
  argv: [python, -m, shop, --port, "{{port}}"]
  env: {DB: "sqlite:///{{scratch}}/shop.db"}
  ready: {url: "http://127.0.0.1:{{port}}/health", status: [200]}
setup: {argv: [python, -m, shop.migrate]}
services: [redis]
topology: {replicas: 2}
event: {id: "{{event_id}}", type: order.paid, data: {object: {id: "{{order_id}}", amount: 1200}}}
conflict: {set: {data.object.amount: 9900}}
effects:
  sql: {url: "sqlite:///{{scratch}}/shop.db", count: "SELECT count(*) FROM f WHERE e = :event_id",
        state: "SELECT s FROM o WHERE id = :object_id"}
  smtp: {listen: "127.0.0.1:{{smtp_port}}"}
  outbound:
    listen: "127.0.0.1:{{outbound_port}}"
    idempotency_header: Idempotency-Key
    routes: [{path: /v1/refunds, respond: {status: 201, json: {id: "re_{{seq}}"}}, first: {drop: true}}]
lifecycle:
  object: "sub_{{order_id}}"
  events: [{type: a, state: 1}, {type: b, set: {data.object.status: active}, state: active}]
siblings: [{type: invoice.paid}]
competitor: {url: "http://127.0.0.1:{{port}}/checkout/{{order_id}}", body: {order_id: "{{order_id}}"}}
expect: {max_effects: 1, max_emails: 2, conflict: reject, conflict_status: [409], effects_within_s: 0.5,
         order: arrival}
"""


def test_every_section_reads_typed_and_dumps_as_written(tmp_path):
    path = tmp_path / "shop.target.yaml"
    path.write_text(FULL)
    spec = load_target_spec(path)
    assert spec.dump() == yaml.safe_load(FULL)
    assert spec.delivery.timeout_s == 2.0
    assert isinstance(spec.delivery.timeout_s, float)
    assert spec.command is not None
    assert spec.command.argv[-1] == "{{port}}"
    assert spec.command.ready.status == (200,)
    assert spec.command.ready_timeout_s == 15.0
    assert spec.effects.outbound is not None
    assert spec.effects.outbound.routes[0].first is not None
    assert spec.effects.outbound.routes[0].respond.json_body == {"id": "re_{{seq}}"}
    assert spec.effects.smtp is not None
    assert spec.effects.smtp.match == "{{order_id}}"
    assert spec.lifecycle is not None
    assert spec.lifecycle.events[0].state == 1
    assert spec.expect.order == "arrival"
    assert spec.services == ("redis",)
    assert spec.topology.replicas == 2
    assert spec.expect.max_calls == 1
    assert spec.expect.conflict_status == (409,)
    assert "conflict_status" in spec.expect.model_fields_set
    with pytest.raises(Exception, match="frozen"):
        spec.name = "other"


def test_filled_placeholders_read_again(tmp_path):
    spec = read_target(yaml.safe_load(FULL), source="shop")
    filled = spec.filled({"port": "4321", "scratch": "/tmp/x", "smtp_port": "1", "outbound_port": "2"})
    assert filled.endpoint == "http://127.0.0.1:4321/webhooks/orders"
    assert filled.effects.sql is not None
    assert filled.effects.sql.url == "sqlite:////tmp/x/shop.db"
    assert filled.event == spec.event  # the body is filled per event, not per run


def test_merged_keywords_replace_sections_and_are_checked():
    spec = read_target(yaml.safe_load(FULL), source="shop")
    merged = spec.merged({"signing": "github", "conflict": {"data.object.amount": 1}}, secret="s3cret-value")
    assert merged.signing.scheme == "github"
    assert merged.signing.secret == "s3cret-value"
    assert merged.conflict is not None
    assert merged.conflict.set == {"data.object.amount": 1}
    assert merged.command is None  # the caller serves the app itself
    with pytest.raises(SpecError, match=r"signing.scheme: got 'githbu'.*did you mean 'github'"):
        spec.merged({"signing": "githbu"}, secret="s3cret-value")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"delivery": {"timeout": 2}}, r"delivery: got .*remove 'timeout' \(did you mean 'timeout_s'\?\)"),
        ({"expect": {"conflict": "rejct"}}, r"expect.conflict: got 'rejct'.*did you mean 'reject'"),
        (
            {"effects": {"sql": {"url": "sqlite://", "count": "SELECT 1"}}},
            r"effects.sql.count: got 'SELECT 1'",
        ),
    ],
)
def test_errors_name_the_field_the_value_and_the_fix(change: dict[str, Any], message: str):
    doc = {**yaml.safe_load(FULL), **change}
    with pytest.raises(SpecError, match=message):
        read_target(doc, source="shop.yaml")
