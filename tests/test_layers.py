"""The layer rules of ARCHITECTURE.md, checked on every module's imports.

Every package is imported by its one import name (``acklab.harness``, ``acklab.app``...); a
bare top-level ``import app`` or ``from harness import ...`` is itself a violation: installed
beside a user's own ``app`` package it would import theirs.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"app", "harness", "evidence", "console", "flows"}
OURS = {*PACKAGES, "acklab", "tests"}
ALLOWED: dict[str, set[str]] = {
    "app": set(),
    "evidence": set(),
    "harness": {"evidence", "app"},
    "console": {"evidence"},
    "flows": {"harness", "evidence"},
    "acklab": OURS - {"tests"},
}
# harness may build the built-in fixture target, and only there.
APP_IMPORT_ALLOWED_IN = {Path("harness/targets/fixture.py")}


def imports_of(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, _layer(alias.name)) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, _layer(node.module)))
    return found


def _layer(module: str) -> str:
    """``acklab.harness.engine.runner`` -> ``harness``; ``acklab.cli`` -> ``acklab``; a bare
    ``harness.runner`` -> ``bare:harness`` (always a violation); anything else: its top name."""
    parts = module.split(".")
    if parts[0] == "acklab":
        return parts[1] if len(parts) > 1 and parts[1] in PACKAGES else "acklab"
    return f"bare:{parts[0]}" if parts[0] in PACKAGES else parts[0]


def violations(root: Path = ROOT) -> list[str]:
    bad = []
    for package, allowed in ALLOWED.items():
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root)
            for lineno, top in imports_of(path):
                if top.startswith("bare:"):
                    name = top.removeprefix("bare:")
                    bad.append(f"{rel}:{lineno} imports the bare name {name}; import acklab.{name}")
                    continue
                if top not in OURS or top == package:
                    continue
                if top not in allowed:
                    bad.append(f"{rel}:{lineno} imports {top} (allowed: {sorted(allowed) or 'none'})")
                elif package == "harness" and top == "app" and rel not in APP_IMPORT_ALLOWED_IN:
                    bad.append(
                        f"{rel}:{lineno} imports app outside {sorted(map(str, APP_IMPORT_ALLOWED_IN))}"
                    )
    return bad


def test_no_import_crosses_a_layer():
    assert violations() == []


def test_the_checker_catches_a_crossing(tmp_path):
    for package in ALLOWED:
        (tmp_path / package).mkdir()
    (tmp_path / "evidence" / "leaky.py").write_text("from acklab.harness import experiments\n")
    (tmp_path / "harness" / "engine.py").write_text("import acklab.app.webhooks\n")
    (tmp_path / "console" / "bare.py").write_text("from evidence.bundle import BundleWriter\n")
    assert violations(tmp_path) == [
        "evidence/leaky.py:1 imports harness (allowed: none)",
        "harness/engine.py:1 imports app outside ['harness/targets/fixture.py']",
        "console/bare.py:1 imports the bare name evidence; import acklab.evidence",
    ]


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_every_layer_is_a_package(package):
    assert (ROOT / package / "__init__.py").exists()


# The harness's own sub-layers (ARCHITECTURE.md), lowest first: a sub-package may import
# those below it, never one above it (nor a sibling on its own rank).
HARNESS_RANKS: tuple[frozenset[str], ...] = (
    frozenset({"errors"}),
    frozenset({"specs"}),
    frozenset({"wire"}),
    frozenset({"procs", "netfaults", "sinks"}),
    frozenset({"targets"}),
    frozenset({"core"}),
    frozenset({"experiments"}),
    frozenset({"engine"}),
    frozenset({"explore", "sweep", "init"}),
    frozenset({"cli"}),
)
HARNESS_RANK = {name: rank for rank, names in enumerate(HARNESS_RANKS) for name in names}


def _harness_part(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if parts[:2] == ["acklab", "harness"] and len(parts) > 2 else None


def harness_violations(root: Path = ROOT) -> list[str]:
    bad = []
    for path in sorted((root / "harness").rglob("*.py")):
        rel = path.relative_to(root / "harness")
        mine = rel.parts[0] if len(rel.parts) > 1 else rel.stem
        if mine not in HARNESS_RANK:
            if mine != "__init__":
                bad.append(f"harness/{rel}: not in a sub-package of ARCHITECTURE.md's harness layers")
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            elif isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            else:
                continue
            for module in modules:
                theirs = _harness_part(module)
                if theirs is None or theirs == mine:
                    continue
                if theirs not in HARNESS_RANK or HARNESS_RANK[theirs] >= HARNESS_RANK[mine]:
                    bad.append(
                        f"harness/{rel}:{node.lineno} imports harness.{theirs} (above or beside {mine})"
                    )
    return bad


def test_no_harness_import_goes_up_a_sub_layer():
    assert harness_violations() == []


def test_the_sub_layer_checker_catches_an_upward_import(tmp_path):
    (tmp_path / "harness" / "wire").mkdir(parents=True)
    (tmp_path / "harness" / "wire" / "transports.py").write_text(
        "from acklab.harness.core.trial import TrialContext\n"
    )
    (tmp_path / "harness" / "loose.py").write_text("")
    assert harness_violations(tmp_path) == [
        "harness/loose.py: not in a sub-package of ARCHITECTURE.md's harness layers",
        "harness/wire/transports.py:1 imports harness.core (above or beside wire)",
    ]
