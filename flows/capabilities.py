"""The capability check: what the patched file may reach, read from its syntax tree.

A handler needs the app's contract, its models and database helpers, SQLAlchemy and the
standard library's data modules. It never needs the interpreter's machinery, and a patch
that reaches for it is trying to act outside its request: rewrite another module through
``sys.modules``, end the process early (``atexit.register(os._exit, 0)`` under pytest), run
code it assembles at run time. The rules are fixed (code, not configuration); the spec only
lists which modules may be imported (``capabilities.imports`` in ``flows/repair.yaml``), and
no list can allow the machinery below. Each finding names the line and the rule:

* ``import``: a module outside the spec's list (``acklab.app.models`` allows its submodules);
  star imports; relative imports are resolved first;
* ``machinery-module``: sys, os, builtins, importlib, ctypes, gc, atexit, signal, subprocess,
  socket, inspect, threading... whatever the spec's list says;
* ``machinery-name``: exec, eval, compile, __import__, globals, locals, vars, setattr,
  delattr, open, breakpoint, exit, SystemExit, __builtins__...;
* ``private-attribute``: any attribute (or match-pattern keyword) starting with ``_``:
  ``__class__.__subclasses__``, ``__globals__``, ``os._exit`` however ``os`` was aliased;
* ``machinery-attribute``: an attribute, or a name imported from a module, that names the
  machinery (``.modules``, ``.sys``, ``.kill``, ``.f_globals``, ``get_type_hints``...);
* ``dynamic-attribute``: getattr/hasattr with a name that is not a plain literal;
* ``format-attribute``: a string whose ``{0._...}`` field would read a private attribute;
* ``coding``: a coding declaration other than utf-8 (the interpreter would read other code
  than the guard and the approver did);
* ``control-character``: ESC, CR, NUL, bidi overrides, zero-width characters... anywhere,
  comments included: the file must read the same on every screen.

These rules are defence in depth: the lab's verdict does not depend on them (the patched
code runs only in processes of its own), but they stop a hostile patch before anyone is
asked to approve it.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import dataclass

from .escape import one_line, unsafe

# Modules (and their submodules) no spec can allow: they reach the interpreter itself.
MACHINERY_MODULES = frozenset(
    {
        "_thread", "asyncio", "atexit", "builtins", "code", "codeop", "concurrent", "ctypes",
        "faulthandler", "gc", "imp", "importlib", "inspect", "io", "marshal", "mmap",
        "multiprocessing", "nt", "operator", "os", "pathlib", "pdb", "pickle", "pkgutil",
        "posix", "pty", "resource", "runpy", "shutil", "signal", "site", "socket",
        "socketserver", "subprocess", "sys", "sysconfig", "tempfile", "threading",
        "tracemalloc", "types", "weakref", "zipimport",
    }
)  # fmt: skip
# Built-in names that run code, reach namespaces or end the process.
MACHINERY_NAMES = frozenset(
    {
        "__builtins__", "__import__", "__loader__", "__spec__", "__build_class__",
        "breakpoint", "compile", "delattr", "eval", "exec", "exit", "globals", "input",
        "locals", "open", "quit", "setattr", "vars", "SystemExit", "KeyboardInterrupt",
        "GeneratorExit", "BaseException",
    }
)  # fmt: skip
# Attribute names (and names imported from a module) that lead to the machinery: the modules
# that end, inspect or rewrite a process (reachable through an allowed module that imported
# them, e.g. ``datetime.sys``), and the functions and frame attributes that do it.
MACHINERY_ATTRIBUTES = frozenset(
    {
        "_thread", "atexit", "builtins", "code", "codeop", "ctypes", "faulthandler", "gc", "imp",
        "importlib", "io", "marshal", "multiprocessing", "nt", "operator", "os", "pathlib", "pdb",
        "pickle", "posix", "pty", "runpy", "shutil", "signal", "socket", "subprocess", "sys",
        "tempfile", "threading", "tracemalloc", "weakref", "zipimport",
        "modules", "path_hooks", "meta_path", "settrace", "setprofile", "setrecursionlimit",
        "kill", "killpg", "abort", "system", "popen", "fork", "forkpty", "spawnv", "spawnl",
        "execv", "execve", "execl", "execle", "execlp", "execvp", "execvpe", "putenv", "environ",
        "f_globals", "f_locals", "f_builtins", "f_back", "f_code", "gi_frame", "gi_code",
        "cr_frame", "cr_code", "ag_frame", "tb_frame", "tb_next", "co_code", "currentframe",
        "getframe", "stack", "get_type_hints", "ForwardRef", "register", "load_module",
        "exec_module", "import_module", "attrgetter", "methodcaller", "globals", "eval", "exec",
    }
)  # fmt: skip
# getattr/hasattr may only be called directly, with a literal name: passed around, they are
# a way to compute an attribute name the rules above cannot see.
DYNAMIC = ("getattr", "hasattr")
_CODING = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)")
_FORMAT_PRIVATE = re.compile(r"\{[^{}]*[.\[]\s*_")


@dataclass(frozen=True)
class Finding:
    """One rule the file breaks, where."""

    line: int
    rule: str
    detail: str

    def text(self, path: str, source_lines: list[str]) -> str:
        code = source_lines[self.line - 1].strip() if 0 < self.line <= len(source_lines) else ""
        quoted = f": {one_line(code, limit=120)}" if code else ""
        return f"{path} line {self.line}: capability rule {self.rule!r}: {self.detail}{quoted}"


def allowed(module: str, imports: Iterable[str]) -> bool:
    """Whether `module` is one of `imports` or below one of them."""
    return any(module == entry or module.startswith(entry + ".") for entry in imports)


def machinery(module: str) -> bool:
    return module.split(".", 1)[0] in MACHINERY_MODULES


def package_of(path: str) -> str:
    """The package a repository file belongs to once installed: app/webhooks.py -> acklab.app."""
    parts = path.removesuffix(".py").split("/")
    return ".".join(["acklab", *parts[:-1]])


def check(source: str, *, path: str, imports: Iterable[str]) -> list[str]:
    """Every capability rule `source` (the patched file at `path`) breaks, as reasons."""
    findings = _text_rules(source)
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError:
        tree = None  # the guard's own parse rule reports it
    if tree is not None:
        visitor = _Visitor(package_of(path), tuple(imports))
        visitor.visit(tree)
        findings += visitor.findings
    lines = source.splitlines()
    return [f.text(path, lines) for f in sorted(findings, key=lambda f: (f.line, f.rule))]


def _text_rules(source: str) -> list[Finding]:
    findings: list[Finding] = []
    for number, line in enumerate(source.split("\n"), start=1):
        if number <= 2:
            match = _CODING.match(line.encode("utf-8", "replace"))
            if match and match.group(1).decode().lower().replace("_", "-") not in ("utf-8", "utf8"):
                findings.append(Finding(number, "coding", f"coding {match.group(1).decode()!r}; only utf-8"))
        bad = sorted({c for c in line if unsafe(c)})
        if bad:
            names = ", ".join(f"U+{ord(c):04X}" for c in bad)
            findings.append(Finding(number, "control-character", f"{names} may hide or reorder text"))
    return findings


class _Visitor(ast.NodeVisitor):
    def __init__(self, package: str, imports: tuple[str, ...]) -> None:
        self.package = package
        self.imports = imports
        self.findings: list[Finding] = []
        self._called: set[int] = set()

    def flag(self, node: ast.AST, rule: str, detail: str) -> None:
        self.findings.append(Finding(getattr(node, "lineno", 0), rule, detail))

    def module(self, node: ast.AST, name: str) -> None:
        if machinery(name):
            self.flag(node, "machinery-module", f"{name} reaches the interpreter's machinery")
        elif not allowed(name, self.imports):
            self.flag(node, "import", f"{name} is not among the modules the flow spec allows")

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.module(node, alias.name)
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = node.module or ""
        if node.level:
            parent = self.package.split(".")
            parent = parent[: len(parent) - (node.level - 1)] if node.level > 1 else parent
            base = ".".join([*parent, base] if base else parent)
        for alias in node.names:
            if alias.name == "*":
                self.flag(node, "import", f"from {base} import *: name what is imported")
                continue
            full = f"{base}.{alias.name}"
            if machinery(base):
                self.flag(node, "machinery-module", f"{full} reaches the interpreter's machinery")
            elif not (allowed(base, self.imports) or allowed(full, self.imports)):
                self.flag(node, "import", f"{full} is not among the modules the flow spec allows")
            elif alias.name.startswith("_"):
                self.flag(node, "private-attribute", f"{full} is private")
            elif alias.name in MACHINERY_ATTRIBUTES:
                self.flag(node, "machinery-attribute", f"{full} leads to the interpreter's machinery")
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in MACHINERY_NAMES:
            self.flag(node, "machinery-name", f"{node.id} reaches the interpreter's machinery")
        elif node.id in DYNAMIC and id(node) not in self._called:
            self.flag(node, "dynamic-attribute", f"{node.id} used other than in a direct call")
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self._attribute(node, node.attr)
        self.generic_visit(node)

    def _attribute(self, node: ast.AST, name: str) -> None:
        if name.startswith("_"):
            self.flag(node, "private-attribute", f".{name} is private")
        elif name in MACHINERY_ATTRIBUTES:
            self.flag(node, "machinery-attribute", f".{name} leads to the interpreter's machinery")

    def visit_MatchClass(self, node: ast.MatchClass) -> None:
        for name in node.kwd_attrs:  # case C(__class__=x) reads an attribute by name
            self._attribute(node, name)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Name) and node.func.id in DYNAMIC:
            self._called.add(id(node.func))
            name = node.args[1] if len(node.args) > 1 else None
            if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
                self.flag(node, "dynamic-attribute", f"{node.func.id} with a computed attribute name")
            else:
                self._attribute(node, name.value)
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and _FORMAT_PRIVATE.search(node.value):
            self.flag(node, "format-attribute", "a format field reads a private attribute")
        self.generic_visit(node)
