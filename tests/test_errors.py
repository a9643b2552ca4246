"""One exception tree per package, drawn whole in its ``errors`` module, and exit codes that
belong to classes, never to raise sites.

* Every exception class acklab defines is drawn, once, in its package's tree
  (``app/errors.py``, ``evidence/errors.py``, ``harness/errors.py``, ``console/errors.py``,
  ``flows/errors.py``), under the class it really derives from, with the module it lives in
  when that is not the ``errors`` module, and with the exit code the class really carries.
* No call passes ``exit_code=`` to an exception, and no exception accepts one: an error that
  needs another code is another class.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("app", "evidence", "harness", "console", "flows")
# A line of a drawing: its tree prefix, the class, where it lives, its exit code.
LINE = re.compile(
    r"^(?P<prefix>(?:[│ ]   )*(?:[├└]── )?)(?P<name>[A-Za-z_][\w.]*)"
    r"(?: \((?P<where>[\w.]+)\))?(?:\s+exit (?P<code>\d))?"
)


@dataclass(frozen=True)
class Drawn:
    name: str
    parent: str | None  # None: a root of the drawing
    where: str | None
    code: int | None
    line: int


def drawing(doc: str) -> list[Drawn]:
    """The classes of every tree in a docstring. A root is a line at the margin followed by a
    branch (``├──``/``└──``); a branch's depth is where its glyph stands."""
    lines = doc.splitlines()
    found: list[Drawn] = []
    path: list[str] = []  # the names on the way down to the current line
    for number, text in enumerate(lines):
        branch = re.match(r"^((?:[│ ]   )*)[├└]── ", text)
        following = lines[number + 1] if number + 1 < len(lines) else ""
        is_root = bool(re.match(r"^[A-Za-z_]", text)) and following.startswith(("├── ", "└── "))
        if not (branch or is_root):
            continue
        match = LINE.match(text)
        assert match is not None, text
        depth = len(branch.group(1)) // 4 + 1 if branch else 0
        path = [*path[:depth], match["name"]]
        code = match["code"]
        found.append(
            Drawn(
                name=match["name"],
                parent=path[depth - 1] if depth else None,
                where=match["where"],
                code=int(code) if code is not None else None,
                line=number + 1,
            )
        )
    return found


def defined(package: str) -> dict[str, type[BaseException]]:
    """Every exception class defined in a module of `package`, by name."""
    found: dict[str, type[BaseException]] = {}
    root = importlib.import_module(f"acklab.{package}")
    names = [root.__name__] + [m.name for m in pkgutil.walk_packages(root.__path__, f"{root.__name__}.")]
    for name in names:
        module = importlib.import_module(name)
        for value in vars(module).values():
            if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == name:
                assert value.__name__ not in found, (
                    f"two exception classes named {value.__name__} in {package}"
                )
                found[value.__name__] = value
    return found


def disagreements(package: str) -> list[str]:
    classes = defined(package)
    module = importlib.import_module(f"acklab.{package}.errors")
    drawn = drawing(module.__doc__ or "")
    problems = []
    seen: dict[str, int] = {}
    for item in drawn:
        seen[item.name] = seen.get(item.name, 0) + 1
        cls = classes.get(item.name)
        if cls is None:
            if item.parent is not None:
                problems.append(f"{package}: {item.name} is drawn but no such class is defined in {package}/")
            continue
        base = cls.__bases__[0]
        if item.parent is not None and item.parent.rsplit(".", 1)[-1] != base.__name__:
            problems.append(
                f"{package}: {item.name} is drawn under {item.parent}; it derives from {base.__name__}"
            )
        home = cls.__module__.removeprefix(f"acklab.{package}.")
        if home != "errors" and item.where not in (home, f"{package}.{home}"):
            problems.append(
                f"{package}: {item.name} lives in {home}; the drawing says {item.where or 'errors'}"
            )
        code = getattr(cls, "exit_code", None)
        if code is not None and item.code != int(code):
            problems.append(f"{package}: {item.name} exits {int(code)}; the drawing says {item.code}")
        if code is None and item.code is not None:
            problems.append(f"{package}: {item.name} carries no exit code; the drawing says {item.code}")
    for name in sorted(classes):
        if name not in seen:
            problems.append(
                f"{package}: {name} ({classes[name].__module__}) is not drawn in {package}/errors.py"
            )
    problems += [f"{package}: {name} is drawn {n} times" for name, n in sorted(seen.items()) if n > 1]
    return problems


@pytest.mark.parametrize("package", PACKAGES)
def test_every_exception_class_is_drawn_in_its_package_tree_as_it_is(package: str) -> None:
    assert disagreements(package) == []


def test_the_drawing_reader_sees_depth_parents_and_codes() -> None:
    doc = """Errors.

AcklabError (evidence.exitcodes)
└── HarnessError              exit 4: the lab
    ├── SpecError             exit 3: a spec
    │   └── UnknownExperiment exit 3: a name
    └── GitFailed (procs.worktrees)  exit 4: git

Prose at the margin is not a root.
Exception
└── LabFailure (explore.explorer)  no code
"""
    assert [(d.name, d.parent, d.where, d.code) for d in drawing(doc)] == [
        ("AcklabError", None, "evidence.exitcodes", None),
        ("HarnessError", "AcklabError", None, 4),
        ("SpecError", "HarnessError", None, 3),
        ("UnknownExperiment", "SpecError", None, 3),
        ("GitFailed", "HarnessError", "procs.worktrees", 4),
        ("Exception", None, None, None),
        ("LabFailure", "Exception", "explore.explorer", None),
    ]


def test_acklab_itself_defines_no_exception_outside_the_package_trees() -> None:
    for path in sorted((ROOT / "acklab").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        classes = [n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and _looks_like_error(n)]
        assert classes == [], f"{path.name} defines {classes}: draw them in a package's errors module"


def _looks_like_error(node: ast.ClassDef) -> bool:
    return any(re.search(r"(Error|Exception|Exit|Refused)$", ast.unparse(base)) for base in node.bases)


def exit_code_overrides(root: Path = ROOT) -> list[str]:
    """Every call that hands an exception an ``exit_code=`` (any call whose callee is named
    like an error class, or is one of acklab's), and every assignment to an exit_code on an
    object (a class body's own ``exit_code = ...`` is how a class says its code)."""
    names = {name for package in PACKAGES for name in defined(package)} | {"AcklabError"}
    found = []
    for package in (*PACKAGES, "acklab"):
        for path in sorted((root / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            rel = path.relative_to(root)
            for node in sorted(ast.walk(tree), key=lambda n: getattr(n, "lineno", 0)):
                if isinstance(node, ast.Call) and any(k.arg == "exit_code" for k in node.keywords):
                    callee = ast.unparse(node.func).rsplit(".", 1)[-1]
                    if callee in names or re.search(r"(Error|Refused|Unavailable|Failed)$", callee):
                        found.append(f"{rel}:{node.lineno} {callee}(..., exit_code=...)")
                elif isinstance(node, ast.Assign):
                    found += [
                        f"{rel}:{node.lineno} {ast.unparse(target)} = ..."
                        for target in node.targets
                        if isinstance(target, ast.Attribute) and target.attr == "exit_code"
                    ]
    return found


def test_no_raise_site_overrides_an_exit_code() -> None:
    assert exit_code_overrides() == []
    for package in PACKAGES:
        for name, cls in defined(package).items():
            init = cls.__dict__.get("__init__")
            if init is not None:
                assert "exit_code" not in inspect.signature(init).parameters, (
                    f"{name}.__init__ takes exit_code"
                )


def test_the_override_finder_sees_a_keyword_and_an_assignment(tmp_path: Path) -> None:
    for package in (*PACKAGES, "acklab"):
        (tmp_path / package).mkdir()
    (tmp_path / "harness" / "x.py").write_text(
        "raise HarnessError('no', exit_code=ExitCode.USAGE)\n"
        "error = SpecError('bad')\nerror.exit_code = 5\n"
        "record = Record(exit_code=3)\n"
    )
    assert exit_code_overrides(tmp_path) == [
        "harness/x.py:1 HarnessError(..., exit_code=...)",
        "harness/x.py:3 error.exit_code = ...",
    ]
