"""A GitLab Duo flow file as the service reads it: checked against acklab's schema of the
custom-flow rules (flows/duo/custom-flow.schema.json) and for the references the service
resolves when it builds the flow (entry point, router ends, prompts, response targets).

Every problem names its line: `problems(path)` gives "file:LINE: where: what" strings, the
line of the key at fault (a missing key: the line of the mapping that lacks it).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator, ValidationError

ROOT = Path(__file__).resolve().parents[3]
SCHEMA = ROOT / "flows" / "duo" / "custom-flow.schema.json"
BUILT_IN = ("end", "abort")


class FlowFileInvalid(ValueError):
    """A flow file the service would refuse to build (the message lists every problem)."""


@cache
def validator() -> Draft202012Validator:
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def _node_at(root: yaml.Node | None, path: Sequence[Any]) -> yaml.Node:
    """The key node of the last step of `path` (or the value node when it is a list index)."""
    if root is None:
        raise ValueError("the flow file is empty")
    node, found = root, root
    for step in path:
        if isinstance(node, yaml.MappingNode):
            match = next(((k, v) for k, v in node.value if k.value == step), None)
            if match is None:
                return found
            found, node = match
        elif isinstance(node, yaml.SequenceNode) and isinstance(step, int) and step < len(node.value):
            node = found = node.value[step]
        else:
            return found
    return found


def _message(error: ValidationError) -> str:
    """The validator's message, with the reason the schema gives for the rule."""
    why = error.schema.get("description") if isinstance(error.schema, dict) else None
    if error.validator == "not" and why:
        return str(why)
    message = "none of the items matches" if error.validator == "contains" else error.message
    return f"{message} ({why})" if why else message


def _leaves(error: ValidationError) -> Iterator[ValidationError]:
    """The most specific errors: a oneOf's branches say more than "not valid under any"."""
    if error.context and error.validator in ("oneOf", "anyOf"):
        best = max(len(e.absolute_path) for e in error.context)
        for inner in error.context:
            if len(inner.absolute_path) == best:
                yield from _leaves(inner)
        return
    yield error


def schema_problems(text: str, name: str = "flow") -> list[str]:
    """Every violation of the schema, with its line."""
    doc = yaml.safe_load(text)
    root = yaml.compose(text)
    found = []
    for error in validator().iter_errors(doc):
        for leaf in _leaves(error):
            path = list(leaf.absolute_path)
            line = _node_at(root, path).start_mark.line + 1
            where = "/".join(map(str, path)) or "<top>"
            found.append((line, f"{name}:{line}: {where}: {_message(leaf)}"))
    return [message for _, message in sorted(set(found))]


def reference_problems(text: str, name: str = "flow") -> list[str]:
    """What the service finds when it wires the components (only for a file the schema passed)."""
    doc = yaml.safe_load(text)
    root = yaml.compose(text)
    problems = []

    def at(*path: Any) -> int:
        return _node_at(root, path).start_mark.line + 1

    components = [c.get("name") for c in doc["components"]]
    for index, component in enumerate(components):
        if components.index(component) != index:
            problems.append(
                f"{name}:{at('components', index, 'name')}: component {component!r} is defined twice"
            )
    known = set(components)
    if doc["flow"]["entry_point"] not in known:
        problems.append(f"{name}:{at('flow', 'entry_point')}: entry_point names no component")
    prompts = {p["prompt_id"] for p in doc.get("prompts") or []}
    for index, component in enumerate(doc["components"]):
        local = "prompt_id" in component and component.get("prompt_version") is None
        if local and component["prompt_id"] not in prompts:
            problems.append(
                f"{name}:{at('components', index, 'prompt_id')}: prompt {component['prompt_id']!r} "
                "is not among the flow's prompts (and no prompt_version names a registry one)"
            )
        if "sends_response_to" in component and component["sends_response_to"] not in known:
            problems.append(f"{name}:{at('components', index, 'sends_response_to')}: names no component")
    routed = []
    for index, router in enumerate(doc["routers"]):
        routed.append(router["from"])
        if router["from"] not in known:
            problems.append(f"{name}:{at('routers', index, 'from')}: router from an unknown component")
        ends = [router["to"]] if "to" in router else list(router["condition"]["routes"].values())
        for end in ends:
            if end not in known and end not in BUILT_IN:
                problems.append(f"{name}:{at('routers', index)}: routes to {end!r}, which is no component")
    for index, component in enumerate(components):
        if routed.count(component) != 1:
            problems.append(
                f"{name}:{at('components', index, 'name')}: component {component!r} has "
                f"{routed.count(component)} routers from it; the flow needs exactly one"
            )
    return problems


def problems(path: Path) -> list[str]:
    """Everything the service would refuse in the flow file at `path`, each with its line."""
    text = path.read_text(encoding="utf-8")
    found = schema_problems(text, path.name)
    return found or reference_problems(text, path.name)


def load(path: Path) -> dict[str, Any]:
    """The flow file's document, or FlowFileInvalid listing its problems."""
    found = problems(path)
    if found:
        raise FlowFileInvalid("\n".join(found))
    doc: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return doc
