"""Spec files (YAML, ``apiVersion: acklab/v1``): loaded once, checked against their JSON Schema.

The kind is read from the file's ``kind:`` and the schema of that name is used
(``evidence/schemas/<kind>.schema.json``), so a new spec kind needs only its schema. An
error names the field, the value and the fix.
"""

from __future__ import annotations

import difflib
import math
from pathlib import Path
from typing import Any

from jsonschema import ValidationError
from jsonschema.exceptions import best_match

from acklab.evidence.errors import EvidenceInvalid
from acklab.evidence.loading import SPEC, DocumentError
from acklab.evidence.loading import load_yaml as load_bounded_yaml
from acklab.evidence.validate import schema, schema_kinds, validator
from acklab.harness.errors import SpecError


def _is_spec_schema(kind: str) -> bool:
    doc = schema(kind)
    properties = doc.get("properties", {}) if isinstance(doc, dict) else {}
    kind_rule = properties.get("kind", {})
    return "apiVersion" in properties and isinstance(kind_rule, dict) and kind_rule.get("const") == kind


def spec_kinds() -> list[str]:
    """The kinds a spec file may have: every schema with ``apiVersion`` and ``kind: <its name>``."""
    return [kind for kind in schema_kinds() if _is_spec_schema(kind)]


def load_yaml(path: Path) -> Any:
    """A spec file's document, read within the SPEC limits (size, depth, aliases; exit 3 beyond)."""
    path = Path(path)
    if not path.is_file():
        raise SpecError(f"spec file {str(path)!r} does not exist; check the path (relative to {Path.cwd()})")
    try:
        return load_bounded_yaml(path, limits=SPEC)
    except DocumentError as exc:
        raise SpecError(str(exc)) from exc


def _value(instance: Any) -> str:
    text = repr(instance)
    return text if len(text) <= 80 else text[:77] + "..."


def _short(message: str, limit: int = 300) -> str:
    """jsonschema's messages quote the whole value; a hostile one may be megabytes."""
    return message if len(message) <= limit else message[: limit - 3] + "..."


def _fix(error: ValidationError) -> str:
    schema = error.schema if isinstance(error.schema, dict) else {}
    keyword = error.validator
    if keyword == "required":
        missing = error.message.split("'")[1] if "'" in error.message else "the missing field"
        return f"add the field {missing!r}"
    if keyword == "additionalProperties":
        allowed = sorted(schema.get("properties", {}))
        extra = sorted(set(error.instance) - set(allowed)) if isinstance(error.instance, dict) else []
        hint = ""
        if extra and allowed:
            close = difflib.get_close_matches(extra[0], allowed, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
        return f"remove {', '.join(map(repr, extra))}{hint}; allowed here: {', '.join(allowed)}"
    if keyword == "enum":
        options = [str(v) for v in schema.get("enum", [])]
        close = difflib.get_close_matches(str(error.instance), options, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        return f"{hint}use one of: {', '.join(options)}"
    if keyword == "const":
        return f"set it to {schema.get('const')!r}"
    description = schema.get("description")
    return f"expected {description}" if description else _short(error.message)


def describe(error: ValidationError) -> str:
    """'field: got value; what is wrong (fix: ...)' for one schema error."""
    where = _short(".".join(str(p) for p in error.absolute_path) or "(the document)", 120)
    if error.validator == "required":
        return f"{where}: {_short(error.message)} (fix: {_fix(error)})"
    return f"{where}: got {_value(error.instance)}; {_short(error.message)} (fix: {_fix(error)})"


def check(kind: str, doc: Any, *, source: str) -> None:
    """Raise SpecError naming the field, the value and the fix when `doc` is not a valid `kind`."""
    try:
        errors = list(validator(kind).iter_errors(doc))
    except EvidenceInvalid as exc:
        raise SpecError(f"{source}: {exc}") from exc
    if errors:
        worst = best_match(errors)
        others = len(errors) - 1
        more = (
            f" ({others} more problem{'s' if others != 1 else ''}: run `acklab validate {source}`)"
            if others
            else ""
        )
        raise SpecError(f"{source}: invalid {kind} spec: {describe(worst)}{more}")


def _non_finite(doc: Any, where: str = "") -> tuple[str, float] | None:
    """The first number of `doc` that is NaN or infinite (YAML's ``.nan``, ``.inf``), with its field."""
    if isinstance(doc, float) and not math.isfinite(doc):
        return where or "(the document)", doc
    if isinstance(doc, dict):
        items: Any = ((f"{where}.{k}" if where else str(k), v) for k, v in doc.items())
    elif isinstance(doc, list):
        items = ((f"{where}[{i}]", v) for i, v in enumerate(doc))
    else:
        return None
    for field_name, value in items:
        found = _non_finite(value, field_name)
        if found is not None:
            return found
    return None


def check_finite(doc: Any, *, source: str) -> None:
    """Refuse (exit 3 naming the field) NaN and infinities: every comparison with NaN is false, so
    a bound like ``timeout_s: .nan`` would pass every range check and bound nothing."""
    found = _non_finite(doc)
    if found is not None:
        raise SpecError(
            f"{source}: {found[0]}: got {found[1]!r}; a number in a spec is finite (not NaN, not infinite)"
        )


def load_spec(path: Path, *, expected_kind: str | None = None) -> tuple[str, dict[str, Any]]:
    """Load a spec file and validate it against the schema named by its ``kind``."""
    doc = load_yaml(path)
    if not isinstance(doc, dict):
        raise SpecError(
            f"{path}: got {type(doc).__name__}; a spec is a YAML mapping with apiVersion and kind"
        )
    kind = doc.get("kind")
    kinds = spec_kinds()
    if not isinstance(kind, str) or kind not in kinds:
        close = difflib.get_close_matches(str(kind), kinds, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise SpecError(f"{path}: kind: got {kind!r}; {hint}expected one of: {', '.join(kinds)}")
    if expected_kind is not None and kind != expected_kind:
        raise SpecError(f"{path}: kind: got {kind!r}; this option takes a spec of kind {expected_kind!r}")
    check_finite(doc, source=str(path))
    check(kind, doc, source=str(path))
    return kind, doc


def spec_name(path: Path) -> tuple[str, str]:
    """A valid spec file's kind and ``name`` (every kind has one)."""
    kind, doc = load_spec(path)
    return kind, str(doc.get("name", ""))


def all_problems(path: Path) -> list[str]:
    """Every problem of a spec file (for `acklab validate`), empty when valid."""
    doc = load_yaml(path)
    if not isinstance(doc, dict) or doc.get("kind") not in spec_kinds():
        try:
            load_spec(path)
        except SpecError as exc:
            return [str(exc)]
    kind = doc["kind"]
    found = _non_finite(doc)
    finite = (
        []
        if found is None
        else [f"{found[0]}: got {found[1]!r}; a number in a spec is finite (not NaN, not infinite)"]
    )
    return finite + [
        describe(e)
        for e in sorted(validator(kind).iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))
    ]
