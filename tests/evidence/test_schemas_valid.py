"""Every schema the package publishes is a valid draft 2020-12 schema whose `$ref`s resolve.

The processes that validate documents do not check the schemas themselves again
(`acklab.evidence.validate.validator`): this is where that is proven, once.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from acklab.evidence.validate import BASE_URI, _registry, schema, schema_kinds


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        if isinstance(node.get("$ref"), str):
            yield node["$ref"]
        for value in node.values():
            yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


@pytest.mark.parametrize("kind", schema_kinds())
def test_every_published_schema_is_valid_against_its_metaschema_and_its_refs_resolve(kind: str) -> None:
    doc = schema(kind)
    assert doc["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(doc)
    resolver = _registry().resolver(base_uri=f"{BASE_URI}{kind}.schema.json")
    for ref in _refs(doc):
        resolver.lookup(ref)  # raises when it names nothing


def test_the_check_refuses_a_schema_that_is_not_one() -> None:
    broken = {**schema("trial"), "type": 5}
    with pytest.raises(SchemaError):
        Draft202012Validator.check_schema(broken)


def test_there_are_schemas_to_check() -> None:
    assert {"incident", "run", "trial", "manifest", "target"} <= set(schema_kinds())


def test_a_ref_that_names_nothing_does_not_resolve() -> None:
    from referencing.exceptions import Unresolvable

    resolver = _registry().resolver(base_uri=f"{BASE_URI}trial.schema.json")
    with pytest.raises(Unresolvable):
        resolver.lookup("common.schema.json#/$defs/no-such-definition")
