"""``acklab flow init --target T --scope FILE``: a flow spec a user can start from.

It reads what the repository already says and writes nothing it guessed without saying so:

* ``target:`` the target spec (a file of the repository with ``command:`` and ``{{port}}``:
  every checkout the flow serves gets a port of its own);
* ``scope.allow`` the handler file(s); ``scope.deny`` the tests, the target spec, the flow spec
  itself, the pipeline and the project's configuration (a patch cannot make itself green);
* ``capabilities.imports`` the handler's current top-level imports, one line each, relative
  ones as what they name in the repository, where the interpreter's machinery (``os``, ``sys``,
  ``subprocess``...) is refused and left out; the handler as it is at the head is checked
  against the guard's rules with that list, and every line the guard would refuse is a note;
* ``verify.commands`` pytest over the project's ``testpaths`` (``pyproject.toml``,
  ``pytest.ini``, ``setup.cfg``, ``tox.ini``) but the files that attack the service with
  acklab's ``webhook_lab`` (the test `acklab init` writes: verify attacks the patched service
  itself, out of the sandbox's reach), and ruff over the scoped file(s);
* ``experiments`` from the last ``acklab run`` of that target in ``--runs`` (default ``out/``):
  what failed there reproduces; every other experiment — those a run runs by default and those
  the last run ran — strikes again (the spec may narrow the list).
"""

from __future__ import annotations

import ast
import configparser
import json
import tomllib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from acklab.evidence.exitcodes import ExitCode
from acklab.harness.errors import SpecError

from . import capabilities
from .capabilities import machinery
from .errors import FlowError, FlowSpecInvalid
from .sources import Layout

DENIED = (
    "tests/",
    "test/",
    ".gitlab-ci.yml",
    ".gitlab/",
    ".github/",
    "pyproject.toml",
    "setup.cfg",
    "pytest.ini",
    "tox.ini",
    "conftest.py",
    "Makefile",
)


class FlowUsageError(FlowError):
    """`flow init` was asked to overwrite a file without --force (exit 2)."""

    exit_code = ExitCode.USAGE


@dataclass(frozen=True)
class Written:
    """What `init` wrote, and what the user should know about it."""

    path: Path
    notes: tuple[str, ...]


def handler_imports(source: str, *, path: str, root: Path | None = None) -> tuple[list[str], list[str]]:
    """(the allowlist lines of `source`'s top-level imports, notes on what was left out).

    Relative imports are listed as what they name in the checkout at `root` (``from .models import
    Fulfillment`` in ``orders/views.py`` is ``from orders.models import Fulfillment``), as the guard
    resolves them; an alias is listed by the name it imports (the guard allows the alias too).
    """
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError as exc:
        raise FlowSpecInvalid(
            f"--scope {path}: does not parse as Python ({exc.msg}, line {exc.lineno})"
        ) from exc
    layout = Layout.of(root) if root is not None else None
    lines: list[str] = []
    notes: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if machinery(alias.name):
                    notes.append(
                        f"{path}: 'import {alias.name}' left out: the interpreter's machinery is refused"
                    )
                else:
                    lines.append(f"import {alias.name}")
        elif isinstance(node, ast.ImportFrom):
            line = _from_import(node, path, layout, notes)
            if line is not None:
                lines.append(line)
    return list(dict.fromkeys(lines)), notes


def _from_import(node: ast.ImportFrom, path: str, layout: Layout | None, notes: list[str]) -> str | None:
    """The allowlist line of one ``from ... import`` (None: left out, with a note why)."""
    module = node.module
    if node.level:
        module = layout.absolute(path, node.level, node.module) if layout is not None else None
        if module is None:
            notes.append(
                f"{path} line {node.lineno}: a relative import outside any package of the checkout "
                "is left out; import it absolutely"
            )
            return None
    if module is None:
        return None
    if machinery(module):
        notes.append(f"{path}: 'from {module} import ...' left out: the interpreter's machinery")
        return None
    names = [a.name for a in node.names if a.name != "*"]
    if len(names) != len(node.names):
        notes.append(f"{path} line {node.lineno}: 'from {module} import *' is left out; name what it uses")
    return f"from {module} import {', '.join(dict.fromkeys(names))}" if names else None


def strike_again(failing: list[str], ran: list[str]) -> list[str]:
    """Every experiment a run runs by default, and every other one the last run ran, that is not
    reproduced: in the stable order of `harness.experiments`."""
    from acklab.harness.experiments import EXPERIMENTS

    wanted = {name for name, e in EXPERIMENTS.items() if e.default} | set(ran)
    return [name for name in EXPERIMENTS if name in wanted and name not in failing]


def pytest_testpaths(repo: Path) -> list[str] | None:
    """The project's pytest ``testpaths`` (None: no pytest configuration names any)."""
    pyproject = repo / "pyproject.toml"
    if pyproject.is_file():
        try:
            doc = tomllib.loads(pyproject.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise FlowSpecInvalid(f"{pyproject}: not valid TOML ({exc})") from exc
        options = doc.get("tool", {}).get("pytest", {}).get("ini_options", {})
        paths = options.get("testpaths")
        if isinstance(paths, str):
            return paths.split()
        if isinstance(paths, list) and all(isinstance(p, str) for p in paths):
            return list(paths)
    for name, section in (("pytest.ini", "pytest"), ("setup.cfg", "tool:pytest"), ("tox.ini", "pytest")):
        file = repo / name
        if not file.is_file():
            continue
        parser = configparser.ConfigParser()
        try:
            parser.read(file, encoding="utf-8")
        except configparser.Error as exc:
            raise FlowSpecInvalid(f"{file}: not valid INI ({exc})") from exc
        if parser.has_option(section, "testpaths"):
            return parser.get(section, "testpaths").split()
    return None


def acklab_tests(repo: Path, paths: list[str]) -> list[str]:
    """The test files under `paths` that use acklab's ``webhook_lab`` fixture (repository-relative)."""
    found: list[str] = []
    for path in paths:
        root = repo / path
        files = [root] if root.is_file() else sorted(root.rglob("test*.py")) if root.is_dir() else []
        for file in files[:2000]:
            try:
                if "webhook_lab" in file.read_text(encoding="utf-8", errors="replace"):
                    found.append(file.relative_to(repo).as_posix())
            except OSError:
                continue
    return found


def last_run(runs: Path, target: str) -> dict[str, Any] | None:
    """The newest run document in `runs` of the target named `target` (None: there is none)."""
    found: list[tuple[str, dict[str, Any]]] = []
    for path in runs.glob("*/run.json") if runs.is_dir() else ():
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and doc.get("target") == target and isinstance(doc.get("experiments"), list):
            found.append((str(doc.get("started_at", "")), doc))
    return max(found, key=lambda pair: pair[0])[1] if found else None


def init_flow(
    repo: Path, *, target: str, scope: tuple[str, ...], output: Path, runs: Path, force: bool = False
) -> Written:
    """Write the flow spec for `target` and `scope` to `output`; FlowSpecInvalid (exit 3) naming the fix."""
    if output.exists() and not force:
        raise FlowUsageError(f"{output} exists; pass --force to replace it, or --output another path")
    relative_target = _relative(repo, target, "--target")
    name = _served_target_name(repo, relative_target, target)
    files = [_relative(repo, s, "--scope") for s in scope]
    imports, notes = _scope_imports(repo, files)
    paths = _test_paths(repo, notes)
    run, failing = _failing_run(runs, name, relative_target)
    strike = strike_again(failing, [str(e["name"]) for e in run["experiments"]])
    flow_path = _relative(repo, str(output), "--output")
    doc = {
        "apiVersion": "acklab/v1",
        "kind": "flow",
        "name": f"repair-{name}",
        "description": f"Repair {', '.join(files)} so that {', '.join(failing)} hold against {name}.",
        "target": relative_target,
        "scope": {"allow": files, "deny": list(dict.fromkeys([*DENIED, relative_target, flow_path]))},
        "limits": {"max_files": len(files), "max_changed_lines": 200},
        "capabilities": {"imports": imports},
        "experiments": {
            "reproduce": failing,
            "strike_again": strike,
            "trials": int(run.get("trials_per_experiment") or 2),
            "seed": int(run.get("seed") or 7),
        },
        "verify": {"timeout_s": 600, "commands": _verify_commands(repo, paths, files, notes)},
        "proposer": {"default": "llm", "retries": 1, "max_rounds": 3},
        "publish": {"branch_prefix": "acklab/repair-"},
        "checkpoints": ["reproduce", "propose", "approve", "apply", "verify", "strike-again", "publish"],
    }
    from .spec import parse_spec

    parse_spec(doc, what=str(output))  # what is written is a valid flow spec, or nothing is
    header = (
        f"# Written by `acklab flow init --target {relative_target} --scope {' --scope '.join(files)}`.\n"
        f"# reproduce: what failed in run {run.get('run_id')}; check it with `acklab validate {flow_path}`.\n"
    )
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(header + yaml.safe_dump(doc, sort_keys=False, width=100), encoding="utf-8")
    return Written(output, tuple(notes))


def _served_target_name(repo: Path, relative_target: str, target: str) -> str:
    """The name of the target spec at `relative_target`, which must serve each checkout on a port."""
    from acklab.harness.targets.spec import load_target

    try:
        spec = load_target(repo / relative_target, allow_remote=False, workdir=repo)
    except SpecError as exc:
        raise FlowSpecInvalid(f"--target {target}: {exc}") from exc
    if spec.command is None or spec.unbound is None or "port" not in spec.unbound.names:
        raise FlowSpecInvalid(
            f"--target {target}: the flow serves every checkout with the spec's command:, each on a port of "
            "its own; add command: (argv starting the service) and use {{port}} in endpoint and command"
        )
    return spec.name


def _scope_imports(repo: Path, files: list[str]) -> tuple[list[str], list[str]]:
    """What the handler files import (the flow's allowed imports), and notes on what was left out
    or what the scope guard refuses in them as they are."""
    notes: list[str] = []
    imports: list[str] = []
    for file in files:
        path = repo / file
        if not path.is_file() or path.suffix != ".py":
            raise FlowSpecInvalid(f"--scope {file}: no such Python file in {repo}; name the handler's file")
        found, left_out = handler_imports(path.read_text(encoding="utf-8"), path=file, root=repo)
        imports += found
        notes += left_out
    for file in files:
        refused = capabilities.check(
            (repo / file).read_text(encoding="utf-8"), path=file, imports=imports, root=repo
        )
        notes += [f"the scope guard refuses the handler as it is: {reason}" for reason in refused]
    return imports, notes


def _test_paths(repo: Path, notes: list[str]) -> list[str]:
    """Where verify's pytest looks: the project's testpaths, else tests/ (noted in `notes`)."""
    paths = pytest_testpaths(repo)
    if paths is None:
        paths = ["tests"] if (repo / "tests").is_dir() else []
        notes.append(
            "no pytest testpaths configured; verify runs pytest over tests/"
            if paths
            else "no pytest configuration and no tests/: verify runs ruff only; add your tests to verify.commands"
        )
    return paths


def _failing_run(runs: Path, name: str, relative_target: str) -> tuple[dict[str, Any], list[str]]:
    """The target's last run and the experiments it failed; FlowSpecInvalid when there is none."""
    run = last_run(runs, name)
    if run is None:
        raise FlowSpecInvalid(
            f"no run of target {name!r} in {runs}: run `acklab run --target {relative_target}` first "
            "(what fails there is what the flow reproduces), or pass --runs DIR"
        )
    failing = [e["name"] for e in run["experiments"] if e.get("verdict") == "fail"]
    if not failing:
        raise FlowSpecInvalid(
            f"the last run of {name!r} ({run.get('run_id')}) failed no experiment: there is nothing to repair"
        )
    return run, failing


def _verify_commands(
    repo: Path, paths: list[str], files: list[str], notes: list[str]
) -> list[dict[str, Any]]:
    """verify's commands: pytest over `paths` without the tests that attack with webhook_lab
    (noted in `notes`), then ruff over the scope."""
    verify: list[dict[str, Any]] = []
    if paths:
        attacks = acklab_tests(repo, paths)
        if attacks:
            notes.append(
                f"verify's pytest leaves out {', '.join(attacks)}: it attacks the service with webhook_lab, "
                "which verify and strike-again do themselves"
            )
        ignored = [f"--ignore={path}" for path in attacks]
        verify.append(
            {
                "name": "pytest",
                "argv": ["python", "-m", "pytest", "-q", "-p", "no:cacheprovider", *ignored, *paths],
            }
        )
    verify.append(
        {"name": "ruff", "argv": ["python", "-m", "ruff", "check", "--no-cache", "--ignore-noqa", *files]}
    )
    return verify


def _relative(repo: Path, value: str, flag: str) -> str:
    path = Path(value)
    if path.is_absolute():
        try:
            path = path.resolve().relative_to(repo.resolve())
        except ValueError:
            raise FlowSpecInvalid(f"{flag} {value}: outside the repository {repo}") from None
    pure = PurePosixPath(path.as_posix())
    if ".." in pure.parts:
        raise FlowSpecInvalid(f"{flag} {value}: name it relative to the repository's root, without '..'")
    return str(pure)
