"""Schema validation in one place: every schema is loaded once, every document checked here.

Schemas are JSON Schema draft 2020-12 files in `evidence/schemas/`, named
`<kind>.schema.json`; they may `$ref` each other by file name. Schemas written by others
(GitLab's report formats) are vendored byte for byte in `evidence/schemas/vendor/` with their
source in `SOURCES.md`, and validated with the draft their `$schema` declares
(`validate_vendored`).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from datetime import datetime
from functools import cache
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker, validators
from jsonschema.exceptions import ValidationError, best_match
from jsonschema.protocols import Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from .errors import EvidenceInvalid

BASE_URI = "https://acklab.dev/schemas/"
_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")

# jsonschema checks "date-time" only when the optional rfc3339-validator is installed; the
# records must not depend on that, so the rule lives here: RFC 3339, with a timezone.
FORMATS = FormatChecker()


@FORMATS.checks("date-time", raises=ValueError)
def _is_datetime(value: object) -> bool:
    if not isinstance(value, str):
        return True
    if not _RFC3339.match(value):
        return False
    datetime.fromisoformat(value.upper().replace("Z", "+00:00"))
    return True


@cache
def _registry() -> Registry[Any]:
    resources_: list[tuple[str, Resource[Any]]] = []
    for entry in resources.files("acklab.evidence").joinpath("schemas").iterdir():
        if entry.name.endswith(".schema.json"):
            doc = json.loads(entry.read_text(encoding="utf-8"))
            resource = Resource.from_contents(doc, default_specification=DRAFT202012)
            resources_.append((BASE_URI + entry.name, resource))
    return Registry().with_resources(resources_)


def schema_kinds() -> list[str]:
    """The kinds that have a schema (`incident`, `run`, `trial`, `manifest`, ...)."""
    return sorted(uri.removeprefix(BASE_URI).removesuffix(".schema.json") for uri in _registry())


def schema(kind: str) -> Any:
    """The schema of documents of `kind`, as published (EvidenceInvalid naming the known kinds if none)."""
    uri = f"{BASE_URI}{kind}.schema.json"
    try:
        return _registry().contents(uri)
    except LookupError as exc:
        raise EvidenceInvalid(
            f"no schema for kind {kind!r}; known kinds: {', '.join(schema_kinds())}"
        ) from exc


# Sub-documents validated once a process: a trial is checked when its own file is written
# (trials/<id>.json) and again inside every incident that embeds it, and a trial is most of an
# incident's bytes (a third of the CPU a failing run spent on validation went to checking the same
# trials twice). A `$ref` named here remembers the canonical JSON (its sha256) of each instance it
# found valid, and passes an identical one without descending again; anything else (another
# instance, one that was invalid, one that is not plain JSON) is checked in full, every time.
# Validity is a function of the JSON value and the schemas, which are the package's own files.
ONCE_REFS = frozenset({"common.schema.json#/$defs/trial"})
_ONCE_KEPT = 512  # remembered instances (32-byte digests), the oldest forgotten first
_valid_once: OrderedDict[tuple[str, bytes], None] = OrderedDict()
_once_lock = threading.Lock()  # the console validates from several threads
_full_ref = Draft202012Validator.VALIDATORS["$ref"]


def _canonical_digest(instance: Any) -> bytes | None:
    try:
        text = json.dumps(
            instance, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
    except (TypeError, ValueError):
        return None
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


def _ref_once(checker: Validator, ref: str, instance: Any, subschema: Any) -> Iterator[ValidationError]:
    """`$ref`, remembering the instances of the `ONCE_REFS` it found valid."""
    digest = _canonical_digest(instance) if ref in ONCE_REFS else None
    if digest is None:
        yield from _full_ref(checker, ref, instance, subschema)
        return
    key = (ref, digest)
    with _once_lock:
        if key in _valid_once:
            _valid_once.move_to_end(key)
            return
    errors = list(_full_ref(checker, ref, instance, subschema))
    if not errors:
        with _once_lock:
            _valid_once[key] = None
            if len(_valid_once) > _ONCE_KEPT:
                _valid_once.popitem(last=False)
    yield from errors


# draft 2020-12 with that `$ref` (jsonschema leaves `extend` untyped)
_Checker = validators.extend(Draft202012Validator, {"$ref": _ref_once})  # type: ignore[no-untyped-call]


@cache
def validator(kind: str) -> Draft202012Validator:
    """The (cached) validator for documents of `kind`.

    The schemas are the package's own files: that each is a valid draft 2020-12 schema is checked
    by the tests (tests/evidence/test_schemas_valid.py), not again by every process that loads one
    (the check against the metaschema cost 0.2-0.7 CPU-s a process, more than the validations a run makes)."""
    checker: Draft202012Validator = _Checker(schema(kind), registry=_registry(), format_checker=FORMATS)
    return checker


def _problems(checker: Validator, doc: Any) -> list[str]:
    found = []
    for error in sorted(checker.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path))):
        where = "/".join(str(p) for p in error.absolute_path) or "(document)"
        found.append(f"{where}: {error.message}")
    return found


def _raise_if_invalid(checker: Validator, kind: str, doc: Any, what: str | None) -> None:
    errors = list(checker.iter_errors(doc))
    if not errors:
        return
    worst = best_match(errors)
    where = "/".join(str(p) for p in worst.absolute_path) or "(document)"
    raise EvidenceInvalid(
        f"{what or kind} is not a valid {kind}: at {where}: {worst.message}",
        problems=_problems(checker, doc),
    )


def problems(kind: str, doc: Any) -> list[str]:
    """Every validation problem of `doc` as `kind`, as 'path: message' lines (empty when valid)."""
    return _problems(validator(kind), doc)


def validate(kind: str, doc: Mapping[str, Any] | Any, *, what: str | None = None) -> None:
    """Raise EvidenceInvalid naming the field, the value and the rule when `doc` is not a valid `kind`."""
    _raise_if_invalid(validator(kind), kind, doc, what)


def vendored_names() -> list[str]:
    """The vendored schemas, by file name without `.json` (e.g. `gitlab-sast-report-format-15.2.1`)."""
    vendor = resources.files("acklab.evidence").joinpath("schemas", "vendor")
    return sorted(e.name.removesuffix(".json") for e in vendor.iterdir() if e.name.endswith(".json"))


@cache
def vendored_validator(name: str) -> Validator:
    """The (cached) validator of a vendored schema, for the draft its `$schema` declares."""
    if name not in vendored_names():
        raise EvidenceInvalid(
            f"no vendored schema {name!r}; vendored: {', '.join(vendored_names()) or 'none'}"
        )
    entry = resources.files("acklab.evidence").joinpath("schemas", "vendor", f"{name}.json")
    schema = json.loads(entry.read_text(encoding="utf-8"))
    cls = validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=FORMATS)


def validate_vendored(name: str, doc: Any, *, what: str | None = None) -> None:
    """Like `validate`, against a vendored schema (GitLab's report formats)."""
    _raise_if_invalid(vendored_validator(name), name, doc, what)


def vendored_problems(name: str, doc: Any) -> list[str]:
    """Every problem of `doc` against a vendored schema (empty when valid)."""
    return _problems(vendored_validator(name), doc)
