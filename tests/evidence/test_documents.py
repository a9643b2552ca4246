"""The typed documents and the published JSON Schemas agree, both ways.

* Every model mirrors one schema object (its ``SCHEMA``): the same field names, the same
  required ones, the same JSON types, closed like the schema, all the way down.
* Every document a builder makes validates against its schema (the bundle writer checks
  that again before any write).
"""

from __future__ import annotations

import importlib
import inspect
import json
import types
from importlib import resources
from typing import Any, Union, get_args, get_origin

import pytest
from jsonschema import Draft202012Validator
from pydantic import BaseModel, TypeAdapter

from acklab.evidence.documents.base import OMIT, Document
from acklab.evidence.validate import BASE_URI, _registry, validate

MODULES = (
    "records",
    "objects",
    "trial",
    "incident",
    "run",
    "result",
    "comparison",
    "sweep",
    "trail",
    "latency",
    "sinks",
)
JSON_TYPES = {"string", "integer", "number", "boolean", "null", "object", "array"}


def models() -> list[type[Document]]:
    found: dict[str, type[Document]] = {}
    for name in MODULES:
        module = importlib.import_module(f"acklab.evidence.documents.{name}")
        for _, value in inspect.getmembers(module, inspect.isclass):
            if issubclass(value, Document) and value is not Document and value.__module__ == module.__name__:
                found[value.__qualname__] = value
    return list(found.values())


MIRRORS = [m for m in models() if m.SCHEMA and m.__name__ != "IncidentHead"]


def schema_document(kind: str) -> dict[str, Any]:
    text = resources.files("acklab.evidence").joinpath("schemas", f"{kind}.schema.json").read_text("utf-8")
    doc: dict[str, Any] = json.loads(text)
    return doc


class Schema:
    """A schema object and the document it lives in (to resolve its $refs)."""

    def __init__(self, node: Any, document: dict[str, Any], kind: str) -> None:
        self.node, self.document, self.kind = node, document, kind

    @classmethod
    def at(cls, pointer: str) -> Schema:
        kind, _, path = pointer.partition("#")
        document = schema_document(kind)
        return cls(document, document, kind).walk(path)

    def walk(self, path: str) -> Schema:
        node: Any = self.document
        for part in [p for p in path.split("/") if p]:
            node = node[int(part)] if isinstance(node, list) else node[part]
        return Schema(node, self.document, self.kind).resolved()

    def resolved(self) -> Schema:
        ref = self.node.get("$ref") if isinstance(self.node, dict) else None
        if ref is None:
            return self
        where, _, path = ref.partition("#")
        if where:
            return Schema.at(f"{where.removesuffix('.schema.json')}#{path}")
        return self.walk(path)

    def branches(self) -> list[Schema]:
        """The non-null alternatives of an anyOf/oneOf (or the schema itself: a typed object whose
        oneOf only says which of its own properties are required)."""
        options = self.node.get("anyOf") or self.node.get("oneOf")
        if not options or "properties" in self.node:
            return [self]
        found = [Schema(o, self.document, self.kind).resolved() for o in options]
        return [s for s in found if s.node.get("type") != "null"]


def json_types(schema: Schema) -> set[str]:
    node = schema.node
    if node is True or node == {}:
        return set(JSON_TYPES)
    if "const" in node:
        return {_type_of(node["const"])}
    if "enum" in node:
        return {_type_of(v) for v in node["enum"]}
    if ("anyOf" in node or "oneOf" in node) and "properties" not in node:
        found: set[str] = set()
        for option in node.get("anyOf") or node.get("oneOf"):
            found |= json_types(Schema(option, schema.document, schema.kind).resolved())
        return found
    declared = node.get("type")
    if declared is None:
        return set(JSON_TYPES)
    return {declared} if isinstance(declared, str) else set(declared)


def _type_of(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    return {str: "string", float: "number", list: "array", dict: "object"}[type(value)]


def model_types(annotation: Any, *, omit: bool) -> set[str]:
    generated = TypeAdapter(annotation).json_schema(ref_template="#/$defs/{model}")
    found = json_types(Schema(generated, generated, "model").resolved())
    return found - {"null"} if omit else found


def nested_models(annotation: Any) -> tuple[str, type[BaseModel]] | None:
    """('object' | 'array', Model) when the field holds a model or a list of them."""
    origin = get_origin(annotation)
    if origin is Union or origin is types.UnionType:
        inner = [a for a in get_args(annotation) if a is not type(None)]
        return nested_models(inner[0]) if len(inner) == 1 else None
    if origin is list or origin is tuple:
        item = get_args(annotation)[0]
        found = nested_models(item)
        return ("array", found[1]) if found and found[0] == "object" else None
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        return ("object", annotation)
    return None


def agreement(
    model: type[BaseModel], schema: Schema, where: str, seen: set[tuple[Any, int]] | None = None
) -> list[str]:
    """Every way `model` and `schema` disagree (empty when they mirror each other)."""
    node = schema.node
    seen = set() if seen is None else seen
    if (model, id(node)) in seen:  # a recursive document (--json's compared runs)
        return []
    seen.add((model, id(node)))
    problems = []
    if "object" not in json_types(schema) or "properties" not in node:
        return [f"{where}: the schema is not an object with properties"]
    if node.get("additionalProperties") is not False or model.model_config.get("extra") != "forbid":
        problems.append(f"{where}: one of schema and model is open to unknown fields")
    fields = {info.alias or name: info for name, info in model.model_fields.items()}
    properties: dict[str, Any] = node["properties"]
    for name in sorted(set(properties) - set(fields)):
        problems.append(f"{where}: the schema knows {name!r}, the model does not")
    for name in sorted(set(fields) - set(properties)):
        problems.append(f"{where}: the model has {name!r}, the schema does not")
    required = {name for name, info in fields.items() if info.is_required()}
    if required != set(node.get("required", [])):
        problems.append(
            f"{where}: required differ: schema {sorted(node.get('required', []))}, model {sorted(required)}"
        )
    for name in sorted(set(fields) & set(properties)):
        info = fields[name]
        prop = Schema(properties[name], schema.document, schema.kind).resolved()
        expected = json_types(prop)
        got = model_types(
            info.annotation if not info.metadata else _annotated(info), omit=OMIT in info.metadata
        )
        if expected != got:
            problems.append(f"{where}/{name}: schema types {sorted(expected)}, model types {sorted(got)}")
        inner = nested_models(info.annotation)
        if inner is None:
            continue
        shape, child = inner
        for branch in prop.branches():
            if shape != "array" and "object" not in json_types(branch):
                continue  # a string form beside the model's (a spec's match, queues)
            target = branch
            if shape == "array":
                target = Schema(branch.node.get("items", {}), branch.document, branch.kind).resolved()
            problems += agreement(child, target, f"{where}/{name}", seen)
    return problems


def _annotated(info: Any) -> Any:
    from typing import Annotated

    return Annotated[(info.annotation, *info.metadata)]


@pytest.mark.parametrize("model", MIRRORS, ids=lambda m: m.__name__)
def test_each_model_mirrors_its_schema_object(model: type[Document]):
    assert agreement(model, Schema.at(model.SCHEMA), model.__name__) == []


def test_every_schema_of_a_document_acklab_writes_has_its_model():
    mirrored = {m.SCHEMA for m in MIRRORS}
    for kind in ("trial", "incident", "run", "run-result", "comparison", "sweep", "trail", "sinks"):
        assert kind in mirrored, f"no model mirrors {kind}.schema.json"


def test_the_incident_head_is_the_incident_without_its_trials():
    from acklab.evidence.documents.incident import Incident, IncidentHead

    assert set(Incident.model_fields) - set(IncidentHead.model_fields) == {"trials"}


def test_the_checker_sees_a_field_the_model_lacks_and_a_type_that_differs():
    from acklab.evidence.documents.records import Observation

    schema = Schema.at(Observation.SCHEMA)
    schema.node = {**schema.node, "properties": {**schema.node["properties"], "extra": {"type": "string"}}}
    schema.node["properties"]["effects"] = {"type": "string"}
    found = agreement(Observation, schema, "Observation")
    assert "Observation: the schema knows 'extra', the model does not" in found
    assert any(p.startswith("Observation/effects: schema types ['string']") for p in found)


def fragment_validator(pointer: str) -> Draft202012Validator:
    kind, _, path = pointer.partition("#")
    return Draft202012Validator({"$ref": f"{BASE_URI}{kind}.schema.json#{path}"}, registry=_registry())


def test_the_run_result_schema_is_a_kind():
    validate("run-result", {"run_id": None, "verdict": "error", "target": "t", "error": "why",
                            "experiments": [], "bundle": None})  # fmt: skip
    assert fragment_validator("run-result#/$defs/violation").is_valid(
        {
            "invariant": "at-most-once-effect",
            "event_id": "e",
            "observed": 2,
            "expected": "<= 1",
            "detail": "d",
        }
    )
