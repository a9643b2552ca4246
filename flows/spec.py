"""The flow spec (`kind: flow`): loaded once, validated against `flow.schema.json`, frozen.

The spec says what a repair may touch (scope), how much (limits), which experiments
reproduce the failure and which strike again, how a patch is verified, and the order of the
checkpoints. Nothing in it can be changed by a patch: `flows/` is outside every scope.
"""

from __future__ import annotations

import fnmatch
import hashlib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from acklab.evidence.errors import EvidenceInvalid
from acklab.evidence.loading import SPEC, DocumentError, parse_yaml, read_bounded
from acklab.evidence.validate import validate

from .errors import FlowSpecInvalid

CHECKPOINTS: tuple[str, ...] = (
    "reproduce",
    "propose",
    "approve",
    "apply",
    "verify",
    "strike-again",
    "publish",
)
OPTIONAL_CHECKPOINTS = frozenset({"strike-again"})
# What a handler may import when the spec says nothing (capabilities.imports): the names the
# fixture's handlers import, and the standard library's data modules.
DEFAULT_IMPORTS: tuple[str, ...] = (
    "from __future__ import annotations",
    "from acklab.app.contract import CHECKOUT_RETURN, FULFILLING, ORDER_STATUS, CheckoutReturn, Delivery,"
    " HandlerResult, OrderEventData, OrderPaidData, ack",
    "from acklab.app.db import insert_for, write_session",
    "from acklab.app.models import Fulfillment, FulfillmentClaim, Order, Receipt, utcnow",
    "from acklab.app.notify import after_commit, confirm_fulfillment",
    "from sqlalchemy import and_, delete, exists, func, insert, or_, select, text, update",
    "from sqlalchemy.exc import IntegrityError",
    "from sqlalchemy.orm import Session",
    "import json",
    "import hashlib",
    "import hmac",
    "import datetime",
    "import decimal",
    "import uuid",
    "import re",
    "import math",
    "from dataclasses import dataclass",
    "from datetime import UTC, datetime, timedelta",
    "from decimal import Decimal",
    "from typing import Any",
)


@dataclass(frozen=True)
class Scope:
    """The paths a patch may touch: an allow glob must match and no deny glob may (deny wins)."""

    allow: tuple[str, ...]
    deny: tuple[str, ...]

    def permits(self, path: str) -> bool:
        return _matches_any(path, self.allow) and not _matches_any(path, self.deny)

    def why_not(self, path: str) -> str | None:
        """None when `path` is in scope; otherwise the rule that keeps it out."""
        for glob in self.deny:
            if _matches(path, glob):
                return f"{path!r} is denied by scope rule {glob!r}"
        if not _matches_any(path, self.allow):
            return f"{path!r} is outside the allowed scope {list(self.allow)}"
        return None

    def as_dict(self) -> dict[str, list[str]]:
        return {"allow": list(self.allow), "deny": list(self.deny)}


def _matches(path: str, glob: str) -> bool:
    if glob.endswith("/"):
        return path.startswith(glob)
    return path == glob or fnmatch.fnmatchcase(path, glob)


def _matches_any(path: str, globs: tuple[str, ...]) -> bool:
    return any(_matches(path, glob) for glob in globs)


@dataclass(frozen=True)
class Limits:
    max_files: int
    max_changed_lines: int


@dataclass(frozen=True)
class VerifyCommand:
    name: str
    argv: tuple[str, ...]


@dataclass(frozen=True)
class LLMSettings:
    timeout_s: float = 120.0
    max_tokens: int = 4096
    temperature: float = 0.0


@dataclass(frozen=True)
class FlowSpec:
    """A validated flow spec."""

    name: str
    target: str
    scope: Scope
    limits: Limits
    reproduce: tuple[str, ...]
    strike_again: tuple[str, ...]
    trials: int
    seed: int
    verify: tuple[VerifyCommand, ...]
    verify_timeout_s: float
    checkpoints: tuple[str, ...]
    proposer: str = "recipe"
    recipe: str = "receipt-handler"
    retries: int = 1
    max_rounds: int = 3
    llm: LLMSettings = field(default_factory=LLMSettings)
    imports: tuple[str, ...] = DEFAULT_IMPORTS
    branch_prefix: str = "acklab/repair-"
    description: str = ""
    sha256: str = ""
    path: str = ""

    def has(self, checkpoint: str) -> bool:
        return checkpoint in self.checkpoints

    def scoped_files(self) -> list[str]:
        """The allow entries that name one file (no glob characters): what a recipe may rewrite."""
        return [a for a in self.scope.allow if not any(c in a for c in "*?[") and not a.endswith("/")]


def load_spec(path: Path) -> FlowSpec:
    """Read, validate and freeze the flow spec at `path` (FlowSpecInvalid, exit 3, when it is not one)."""
    path = Path(path)
    if not path.is_file():
        raise FlowSpecInvalid(
            f"cannot read the flow spec {str(path)!r}: no such file; "
            "pass the path of a `kind: flow` file, e.g. flows/repair.yaml"
        )
    try:
        raw = read_bounded(path, SPEC)
        doc = parse_yaml(raw, source=str(path), limits=SPEC)
    except DocumentError as exc:
        raise FlowSpecInvalid(str(exc)) from exc
    return parse_spec(doc, what=str(path), sha256=hashlib.sha256(raw).hexdigest())


def parse_spec(doc: Any, *, what: str = "flow spec", sha256: str = "") -> FlowSpec:
    try:
        validate("flow", doc, what=what)
    except EvidenceInvalid as exc:
        raise FlowSpecInvalid(str(exc)) from exc
    checkpoints = tuple(doc["checkpoints"])
    _check_order(checkpoints, what)
    experiments = doc["experiments"]
    strike_again = _strike_again(experiments)
    overlap = sorted(set(experiments["reproduce"]) & set(experiments.get("strike_again", ())))
    if overlap:
        raise FlowSpecInvalid(
            f"{what}: experiments {overlap} are listed in both reproduce and strike_again; "
            "an experiment is either what the patch aims at or what strikes again, not both"
        )
    for glob in [*doc["scope"]["allow"], *doc["scope"]["deny"]]:
        if PurePosixPath(glob).is_absolute() or ".." in PurePosixPath(glob).parts:
            raise FlowSpecInvalid(f"{what}: scope glob {glob!r} must be repository-relative without '..'")
    proposer = doc.get("proposer", {})
    llm = proposer.get("llm", {})
    verify = doc["verify"]
    return FlowSpec(
        name=doc["name"],
        description=doc.get("description", ""),
        target=doc["target"],
        scope=Scope(allow=tuple(doc["scope"]["allow"]), deny=tuple(doc["scope"]["deny"])),
        limits=Limits(
            max_files=doc["limits"]["max_files"], max_changed_lines=doc["limits"]["max_changed_lines"]
        ),
        reproduce=tuple(experiments["reproduce"]),
        strike_again=strike_again,
        trials=experiments.get("trials", 2),
        seed=experiments.get("seed", 7),
        verify=tuple(VerifyCommand(name=c["name"], argv=tuple(c["argv"])) for c in verify["commands"]),
        verify_timeout_s=float(verify.get("timeout_s", 600)),
        checkpoints=checkpoints,
        proposer=proposer.get("default", "recipe"),
        recipe=proposer.get("recipe", "receipt-handler"),
        retries=proposer.get("retries", 1),
        max_rounds=proposer.get("max_rounds", 3),
        llm=LLMSettings(
            timeout_s=float(llm.get("timeout_s", 120)),
            max_tokens=int(llm.get("max_tokens", 4096)),
            temperature=float(llm.get("temperature", 0)),
        ),
        imports=_imports(doc, what),
        branch_prefix=doc.get("publish", {}).get("branch_prefix", "acklab/repair-"),
        sha256=sha256,
        path=what,
    )


def _strike_again(experiments: dict[str, Any]) -> tuple[str, ...]:
    """``experiments.strike_again`` as the spec narrows it; absent, every experiment a run runs by
    default that the spec does not reproduce (an experiment that does not apply to the target is
    run and listed as skipped, with its reason)."""
    if "strike_again" in experiments:
        return tuple(experiments["strike_again"])
    from acklab.harness.experiments import EXPERIMENTS

    reproduce = set(experiments["reproduce"])
    return tuple(name for name, e in EXPERIMENTS.items() if e.default and name not in reproduce)


def check_target_file(spec: FlowSpec, repo: Path) -> None:
    """A flow whose target is a spec file: FlowSpecInvalid (exit 3) unless it is a file of `repo`
    with ``command:`` and ``{{port}}`` (the flow serves every checkout with it, each on its own port)."""
    if spec.target.startswith("fixture:"):
        return
    from acklab.harness.errors import SpecError
    from acklab.harness.targets.served_spec import served_spec_target

    try:
        served_spec_target(spec.target, repo, confinement=None)
    except SpecError as exc:
        raise FlowSpecInvalid(f"{spec.path}: target: {exc}") from exc


def _imports(doc: dict[str, Any], what: str) -> tuple[str, ...]:
    """``capabilities.imports``, checked now: an entry in the old format (a bare module) is exit 3."""
    from .allowlist import Allowlist, AllowlistError

    entries = tuple(doc.get("capabilities", {}).get("imports", DEFAULT_IMPORTS))
    try:
        Allowlist.parse(entries)
    except AllowlistError as exc:
        raise FlowSpecInvalid(f"{what}: {exc}") from exc
    return entries


def _check_order(checkpoints: tuple[str, ...], what: str) -> None:
    required = [c for c in CHECKPOINTS if c not in OPTIONAL_CHECKPOINTS]
    missing = [c for c in required if c not in checkpoints]
    if missing:
        raise FlowSpecInvalid(
            f"{what}: checkpoints {missing} are missing; every flow runs {', '.join(required)} "
            "(strike-again is optional)"
        )
    expected = [c for c in CHECKPOINTS if c in checkpoints]
    if list(checkpoints) != expected:
        raise FlowSpecInvalid(
            f"{what}: checkpoints must run in the order {expected}; got {list(checkpoints)}"
        )
