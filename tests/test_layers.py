"""The layer rules of ARCHITECTURE.md, checked on every module's imports.

Every package is imported by its one import name (``acklab.harness``, ``acklab.app``...); a
bare top-level ``import app`` or ``from harness import ...`` is itself a violation: installed
beside a user's own ``app`` package it would import theirs.
"""

from __future__ import annotations

import ast
import functools
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


@functools.cache
def _parsed(text: str, filename: str) -> ast.Module:
    return ast.parse(text, filename=filename)


def parsed(path: Path) -> ast.Module:
    """`path`'s syntax tree, parsed once for the same text: three checks read every module."""
    return _parsed(path.read_text(), str(path))


def imports_of(path: Path) -> list[tuple[int, str]]:
    tree = parsed(path)
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


def layered(root: Path) -> Path:
    """An empty folder per layer under `root`, for the checkers' own tests."""
    for package in ALLOWED:
        (root / package).mkdir()
    return root


def test_the_checker_catches_a_crossing(tmp_path):
    layered(tmp_path)
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
    frozenset({"runtime"}),
    frozenset({"errors", "ports"}),
    frozenset({"specs"}),
    frozenset({"wire"}),
    frozenset({"procs", "netfaults", "sinks"}),
    frozenset({"services"}),
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
        tree = parsed(path)
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


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of acklab by its import name (``acklab.harness.engine.runner``)."""
    found = {}
    for package in ALLOWED:
        for path in (root / package).rglob("*.py"):
            parts = path.relative_to(root / package).with_suffix("").parts
            parts = parts[:-1] if parts[-1] == "__init__" else parts
            prefix = ["acklab"] if package == "acklab" else ["acklab", package]
            found[".".join([*prefix, *parts])] = path
    return found


def imported_modules(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The acklab modules `name` imports anywhere in it (a lazy import inside a function closes
    a cycle too: it only moves the failure to the first call); ``TYPE_CHECKING`` imports aside."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = parsed(path)
    typing_only = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING")
        for inner in node.body
        for n in ast.walk(inner)
    }
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            # `from pkg import sub` is an import of pkg.sub; `from pkg import name`, of pkg
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return {m for m in found if m in known and m != name}


def import_cycles(root: Path = ROOT) -> list[list[str]]:
    """Strongly connected groups of modules that import each other, directly or around a loop."""
    known = modules(root)
    graph = {name: sorted(imported_modules(name, path, known)) for name, path in known.items()}
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's algorithm; the graph is a few hundred modules deep at most
        order[node] = low[node] = len(order)
        stack.append(node)
        for nxt in graph[node]:
            if nxt not in order:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], order[nxt])
        if low[node] == order[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    for name in sorted(graph):
        if name not in order:
            visit(name)
    return cycles


def test_no_module_imports_itself_back():
    assert import_cycles() == []


def test_the_cycle_checker_finds_a_lazy_cycle(tmp_path):
    layered(tmp_path)
    (tmp_path / "evidence" / "__init__.py").write_text("")
    (tmp_path / "evidence" / "bundle.py").write_text("def f():\n    from .journal import Journal\n")
    (tmp_path / "evidence" / "journal.py").write_text("from acklab.evidence.bundle import f\n")
    (tmp_path / "evidence" / "clock.py").write_text("from . import journal\n")
    assert import_cycles(tmp_path) == [["acklab.evidence.bundle", "acklab.evidence.journal"]]


def test_the_tests_mirror_the_packages_and_harness_sub_packages():
    """tests/<package>/ for a package, tests/harness/<sub-package>/ for a harness sub-package;
    never a prefix folder such as tests/harness_deep/ beside them."""
    tests = ROOT / "tests"
    prefixed = [
        p.name for p in tests.iterdir() if p.is_dir() and "_" in p.name and p.name.split("_")[0] in PACKAGES
    ]
    assert prefixed == []
    folders = {p.name for p in (tests / "harness").iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders <= set(HARNESS_RANK), f"not harness sub-packages: {sorted(folders - set(HARNESS_RANK))}"
