"""GitLab CI/CD components as GitLab reads them (``doc/ci/inputs``, ``doc/ci/components``).

A component is ``templates/<name>.yml``: a header document (``spec: inputs:``), ``---``, then
the configuration, in which every ``$[[ inputs.NAME ]]`` is replaced before anything else
reads it. A whole value that is one interpolation keeps the input's type (``parallel:
$[[ inputs.shards ]]`` is a number); inside a longer string the value is written as text.
Inputs are checked as GitLab checks them: an unknown input, a missing required one (no
default), a value of the wrong type, outside ``options`` or not matching ``regex`` is refused.
Interpolation functions (``| expand_vars``) are not evaluated here, so a template using one is
refused rather than read wrongly.

The component context (``spec: component: [name, sha, version, reference]``, ``doc/ci/yaml``
"spec:component", GitLab 18.7) is interpolated the same way, from a `Context`: only the fields
the header declares; ``version`` is the release the reference resolves to in the CI/CD
Catalog, and null (empty inside a string) for a branch, a commit or a tag that is no catalog
release (`catalog_version`). gitlab-ci-local 4.64.1 does not interpolate it: the pipeline tests
fill its include cache with `interpolate_context` applied, as GitLab would have read the file.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "templates"
# How a project includes its own components at the pipeline's commit (GitLab's advice for
# testing components in the project that publishes them).
LOCAL = re.compile(r"^\$CI_SERVER_FQDN/\$CI_PROJECT_PATH/(?P<name>[\w-]+)@\$CI_COMMIT_SHA$")
INTERPOLATION = re.compile(r"\$\[\[\s*inputs\.(?P<name>[\w-]+)\s*(?P<functions>\|[^\]]*)?\]\]")
TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
}
INPUT_KEYS = frozenset({"type", "description", "default", "options", "regex"})
CONTEXT = re.compile(r"\$\[\[\s*component\.(?P<name>[\w-]+)\s*\]\]")
CONTEXT_FIELDS = ("name", "sha", "version", "reference")
# A catalog version: a semantic version, optionally with a pre-release (doc/ci/components).
SEMVER = re.compile(r"^[0-9]+\.[0-9]+\.[0-9]+(-?[0-9A-Za-z.]+)?$")


@dataclass(frozen=True)
class Context:
    """What GitLab knows of an included component (``$[[ component.FIELD ]]``)."""

    name: str
    reference: str
    sha: str | None = None
    version: str | None = None  # null unless the reference resolves to a catalog release

    def field(self, name: str) -> str | None:
        return {"name": self.name, "sha": self.sha, "version": self.version, "reference": self.reference}[
            name
        ]


def catalog_version(reference: str, released: Sequence[str]) -> str | None:
    """The catalog release `reference` resolves to (doc/ci/components "Component versions"):
    the release of that tag, or the newest release a partial version (``1``, ``1.2``) or
    ``~latest`` names (pre-releases only when named exactly); None for anything else."""

    def key(version: str) -> tuple[int, ...]:
        return tuple(int(part) for part in re.findall(r"[0-9]+", version.split("-", maxsplit=1)[0])[:3])

    if reference in released:
        return reference
    stable = [v for v in released if SEMVER.match(v) and re.fullmatch(r"[0-9.]+", v)]
    if reference == "~latest":
        candidates = stable
    elif re.fullmatch(r"[0-9]+(\.[0-9]+)?", reference):
        candidates = [v for v in stable if v.startswith(reference + ".")]
    else:
        return None
    return max(candidates, key=key, default=None)


class InputError(ValueError):
    """Inputs GitLab would refuse for a component (the message says which and why)."""


def components() -> list[str]:
    """The components this project publishes: templates/*.yml."""
    return sorted(p.stem for p in TEMPLATES.glob("*.yml"))


def load(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A component's header (its ``spec``) and its configuration, not yet interpolated."""
    from tests.pipeline.gitlab import CiLoader

    path = TEMPLATES / f"{name}.yml"
    documents = list(yaml.load_all(path.read_text(encoding="utf-8"), Loader=CiLoader))
    if len(documents) != 2 or set(documents[0] or {}) != {"spec"}:
        raise InputError(f"{path}: expected a `spec:` header, `---`, then the configuration")
    return documents[0], documents[1]


def inputs_of(header: Mapping[str, Any], given: Mapping[str, Any]) -> dict[str, Any]:
    """Every input's value for an include with `given` inputs, checked as GitLab does."""
    declared: dict[str, Any] = header["spec"].get("inputs") or {}
    unknown = sorted(set(given) - set(declared))
    if unknown:
        raise InputError(f"unknown input(s) {unknown}; this component takes {sorted(declared)}")
    values = {}
    for name, declared_as in declared.items():
        declaration = declared_as or {}
        extra = set(declaration) - INPUT_KEYS
        if extra:
            raise InputError(f"input {name}: unknown key(s) {sorted(extra)}")
        if name in given:
            value = given[name]
        elif "default" in declaration:
            value = declaration["default"]
        else:
            raise InputError(f"input {name} is required (it has no default)")
        kind = declaration.get("type", "string")
        if not isinstance(value, TYPES[kind]) or (kind == "number" and isinstance(value, bool)):
            raise InputError(f"input {name}: {value!r} is not a {kind}")
        if "options" in declaration and value not in declaration["options"]:
            raise InputError(f"input {name}: {value!r} is not one of {declaration['options']}")
        if "regex" in declaration and not re.search(declaration["regex"], str(value)):
            raise InputError(f"input {name}: {value!r} does not match {declaration['regex']}")
        values[name] = value
    return values


def interpolate_context(text: str, header: Mapping[str, Any], context: Context) -> str:
    """`text` (a component file's configuration) with every ``$[[ component.FIELD ]]`` the
    header declares replaced, as GitLab does before the inputs: a null field inside a string is
    empty. An undeclared or unknown field is refused, as GitLab refuses it."""
    declared = header["spec"].get("component") or []
    unknown = sorted(set(declared) - set(CONTEXT_FIELDS))
    if unknown:
        raise InputError(f"spec:component: unknown field(s) {unknown}; GitLab knows {list(CONTEXT_FIELDS)}")

    def value_of(match: re.Match[str]) -> str:
        if match["name"] not in declared:
            raise InputError(f"{match.group()}: declare {match['name']!r} in spec:component to use it")
        return context.field(match["name"]) or ""

    return CONTEXT.sub(value_of, text)


def interpolate(node: Any, values: Mapping[str, Any]) -> Any:
    """`node` with every ``$[[ inputs.NAME ]]`` replaced (keys included)."""
    if isinstance(node, dict):
        return {interpolate(k, values): interpolate(v, values) for k, v in node.items()}
    if isinstance(node, list):
        return [interpolate(item, values) for item in node]
    if not isinstance(node, str):
        return node

    def value_of(match: re.Match[str]) -> Any:
        if match["functions"]:
            raise InputError(f"interpolation functions are not evaluated here: {match.group()}")
        if match["name"] not in values:
            raise InputError(f"unknown interpolation key: {match.group()}")
        return values[match["name"]]

    whole = INTERPOLATION.fullmatch(node.strip())
    if whole:
        return value_of(whole)

    def text(match: re.Match[str]) -> str:
        value = value_of(match)
        if isinstance(value, list | dict):
            raise InputError(f"an array input cannot be written inside a string: {node!r}")
        return str(value).lower() if isinstance(value, bool) else str(value)

    return INTERPOLATION.sub(text, node)


def included(name: str, given: Mapping[str, Any], context: Context | None = None) -> dict[str, Any]:
    """The configuration `include: component: .../name@REF inputs: given` adds to a pipeline
    (`context`: what GitLab knows of the component; default: included at a commit)."""
    from tests.pipeline.gitlab import CiLoader

    header, _ = load(name)
    context = context or Context(name=name, reference="0" * 40, sha="0" * 40)
    text = (TEMPLATES / f"{name}.yml").read_text(encoding="utf-8").split("\n---\n", 1)[1]
    body = yaml.load(interpolate_context(text, header, context), Loader=CiLoader)
    return interpolate(body, inputs_of(header, given))


def local_component(path: str) -> str:
    """The name of a component this project includes at the pipeline's commit."""
    match = LOCAL.match(path)
    if not match:
        raise InputError(
            f"only this project's own components at $CI_COMMIT_SHA are resolved here; got {path!r}"
        )
    return match["name"]


def resolve_context_in_place(path: Path, context: Context) -> None:
    """Rewrite a fetched component file as GitLab reads it: its ``$[[ component.FIELD ]]``
    filled in (gitlab-ci-local 4.64.1 leaves them as they are; the inputs it fills itself)."""
    text = path.read_text(encoding="utf-8")
    head, separator, body = text.partition("\n---\n")
    header = yaml.safe_load(head)
    path.write_text(head + separator + interpolate_context(body, header, context), encoding="utf-8")
