"""What the pipeline tests need to read GitLab CI files as GitLab does.

- `load_ci`: YAML with GitLab's `!reference` tag (loaded as the list it names), local
  includes and this project's own components (tests/pipeline/components.py) merged in, so
  a file validates and evaluates like the one GitLab builds.
- `ci_validator`: GitLab's own CI schema (vendored, Draft-07).
- `evaluate`: GitLab's `rules:if` expressions, the subset this project uses (`$VAR`,
  string literals, `null`, `==`, `!=`, `&&`, `||`, parentheses). gitlab-ci-local 4.64.1
  ignores `workflow:rules`, so the duplicate-pipeline rules are checked with this instead.
  Anything outside the subset raises, so a new rule cannot pass unevaluated.
- `gcl_job_dir`: the directory name gitlab-ci-local gives a job's artifacts and logs.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = Path(__file__).with_name("vendor") / "gitlab-ci.schema.json"


class CiLoader(yaml.SafeLoader):
    """SafeLoader that knows GitLab's `!reference [job, key, ...]` tag and refuses a key
    given twice in one mapping (PyYAML would keep the last one silently, so a copied job
    could replace another without a trace)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen and key != "<<":
                raise yaml.constructor.ConstructorError(
                    "while reading a mapping", node.start_mark, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _reference(loader: yaml.SafeLoader, node: yaml.Node) -> list[Any]:
    if not isinstance(node, yaml.SequenceNode):
        raise yaml.constructor.ConstructorError(
            None, None, f"!reference needs a sequence, got a {type(node).__name__}", node.start_mark
        )
    return [Reference(str(item)) for item in loader.construct_sequence(node)]


class Reference(str):
    """One element of a `!reference` path (a str, so the schema sees a string array)."""


CiLoader.add_constructor("!reference", _reference)


def load_yaml(path: Path) -> dict[str, Any]:
    data = yaml.load(path.read_text(encoding="utf-8"), Loader=CiLoader)
    if not isinstance(data, dict):
        raise TypeError(f"{path}: expected a mapping at the top, got {type(data).__name__}")
    return data


def load_ci(path: Path = ROOT / ".gitlab-ci.yml") -> dict[str, Any]:
    """The configuration with its `include: local:` files and this project's components merged
    under it as GitLab merges them: deeply, the including file winning."""
    from tests.pipeline import components

    top = load_yaml(path)
    merged: dict[str, Any] = {}
    for entry in _as_list(top.get("include", [])):
        if isinstance(entry, str) or "local" in entry:
            local = entry if isinstance(entry, str) else entry["local"]
            merged = _deep_merge(merged, load_ci(ROOT / local.lstrip("/")))
        elif "component" in entry:
            name = components.local_component(entry["component"])
            merged = _deep_merge(merged, components.included(name, entry.get("inputs", {})))
        else:
            raise ValueError(
                f"only local includes and this project's components are resolved here; got {entry!r}"
            )
    return _deep_merge(merged, {k: v for k, v in top.items() if k != "include"})


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


@cache
def ci_validator() -> jsonschema.Draft7Validator:
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    return jsonschema.Draft7Validator(schema)


def schema_errors(document: Mapping[str, Any]) -> list[str]:
    """Every schema violation, as 'path: message' lines (empty when valid)."""
    errors = sorted(ci_validator().iter_errors(document), key=lambda e: list(e.absolute_path))
    return [f"{'/'.join(map(str, e.absolute_path)) or '<top>'}: {e.message}" for e in errors]


# --- rules:if -------------------------------------------------------------------------

_TOKEN = re.compile(
    r"\s*(?:(?P<op>&&|\|\||==|!=|=~|!~|\(|\))|\$\{?(?P<var>\w+)\}?|"
    r"\"(?P<dq>[^\"]*)\"|'(?P<sq>[^']*)'|(?P<null>null)\b)"
)


class UnsupportedExpression(ValueError):
    """A rules:if expression outside the subset `evaluate` understands."""


def _tokens(expression: str) -> list[tuple[str, str | None]]:
    tokens: list[tuple[str, str | None]] = []
    pos = 0
    while pos < len(expression.rstrip()):
        match = _TOKEN.match(expression, pos)
        if not match:
            raise UnsupportedExpression(f"cannot read {expression[pos:]!r} in {expression!r}")
        pos = match.end()
        if match["op"] in ("=~", "!~"):
            raise UnsupportedExpression(f"regex match is not evaluated here: {expression!r}")
        if match["op"]:
            tokens.append(("op", match["op"]))
        elif match["var"]:
            tokens.append(("var", match["var"]))
        elif match["null"]:
            tokens.append(("value", None))
        else:
            tokens.append(("value", match["dq"] if match["dq"] is not None else match["sq"]))
    return tokens


def evaluate(expression: str, variables: Mapping[str, str]) -> bool:
    """GitLab's truth of a rules:if expression; an unset or empty variable is false."""
    tokens = _tokens(expression)
    pos = 0

    def peek() -> tuple[str, str | None] | None:
        return tokens[pos] if pos < len(tokens) else None

    def take() -> tuple[str, str | None]:
        nonlocal pos
        if pos >= len(tokens):
            raise UnsupportedExpression(f"unexpected end of {expression!r}")
        pos += 1
        return tokens[pos - 1]

    def operand() -> Any:
        kind, value = take()
        if (kind, value) == ("op", "("):
            result = disjunction()
            if take() != ("op", ")"):
                raise UnsupportedExpression(f"unbalanced parentheses in {expression!r}")
            return result
        if kind == "var":
            return variables.get(str(value))
        if kind == "value":
            return value
        raise UnsupportedExpression(f"unexpected {value!r} in {expression!r}")

    def comparison() -> Any:
        left = operand()
        if peek() in (("op", "=="), ("op", "!=")):
            _, op = take()
            right = operand()
            return (left == right) if op == "==" else (left != right)
        return left

    def conjunction() -> bool:
        result = bool(comparison())
        while peek() == ("op", "&&"):
            take()
            result = bool(comparison()) and result
        return result

    def disjunction() -> bool:
        result = conjunction()
        while peek() == ("op", "||"):
            take()
            result = conjunction() or result
        return result

    result = disjunction()
    if pos != len(tokens):
        raise UnsupportedExpression(f"trailing tokens in {expression!r}")
    return result


def _first_match(rules: list[Mapping[str, Any]], variables: Mapping[str, str]) -> Mapping[str, Any] | None:
    for rule in rules:
        unsupported = set(rule) - {"if", "when", "allow_failure", "variables"}
        if unsupported:
            raise UnsupportedExpression(f"rule keys not evaluated here: {sorted(unsupported)}")
        if "if" not in rule or evaluate(rule["if"], variables):
            return rule
    return None


def creates_pipeline(ci: Mapping[str, Any], variables: Mapping[str, str]) -> bool:
    """Whether workflow:rules let GitLab create a pipeline for these variables."""
    rules = ci.get("workflow", {}).get("rules")
    if rules is None:
        return True
    rule = _first_match(rules, variables)
    return rule is not None and rule.get("when", "always") != "never"


def job_when(job: Mapping[str, Any], variables: Mapping[str, str]) -> str:
    """The job's `when` in a pipeline with these variables ('never' when not added)."""
    if "rules" not in job:
        return str(job.get("when", "on_success"))
    rule = _first_match(job["rules"], variables)
    return "never" if rule is None else str(rule.get("when", "on_success"))


# --- gitlab-ci-local ------------------------------------------------------------------


def gcl_job_dir(job_name: str) -> str:
    """gitlab-ci-local's safe name for a job (`Utils.safeDockerString`): every run of
    characters outside [A-Za-z0-9_-] becomes its unpadded base64url encoding."""

    def encode(match: re.Match[str]) -> str:
        return base64.urlsafe_b64encode(match.group().encode()).decode().rstrip("=")

    return re.sub(r"[^\w-]+", encode, job_name, flags=re.ASCII)


def resolve_job(ci: Mapping[str, Any], name: str) -> dict[str, Any]:
    """A job with its `extends:` chain applied as GitLab does: hashes merge deeply, the
    extending job wins, and any other value (lists included) is replaced."""
    job = ci[name]
    merged: dict[str, Any] = {}
    for parent in _as_list(job.get("extends", [])):
        merged = _deep_merge(merged, resolve_job(ci, parent))
    return _deep_merge(merged, {k: v for k, v in job.items() if k != "extends"})


def _deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    result = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(result.get(key), Mapping):
            result[key] = _deep_merge(result[key], value)
        else:
            result[key] = value
    return result


KEYWORDS = frozenset(
    {
        "default",
        "include",
        "stages",
        "variables",
        "workflow",
        "image",
        "services",
        "cache",
        "before_script",
        "after_script",
        "spec",
    }
)


def job_names(ci: Mapping[str, Any]) -> list[str]:
    """The visible jobs (not keywords, not hidden `.templates`)."""
    return [k for k in ci if k not in KEYWORDS and not k.startswith(".")]
