"""The capability check: what the patched file may reach, read from its syntax tree.

A handler needs the app's contract, its models and database helpers, SQLAlchemy and the
standard library's data modules. It never needs the interpreter's machinery, and a patch
that reaches for it is trying to act outside its request: rewrite another module through
``sys.modules``, end the process early (``atexit.register(os._exit, 0)`` under pytest), run
code it assembles at run time. The rules are fixed (code, not configuration); the spec only
lists which *names* may be imported from where (``capabilities.imports`` in
``flows/repair.yaml``: ``from sqlalchemy import select, text``, ``import json``), and no list
can allow the machinery below. Each finding names the line and the rule:

* ``import``: a name or module outside the spec's list; star imports; relative imports are
  resolved first;
* ``module-attribute``: a name imported, or an attribute of an imported module, that is itself
  a module (``from enum import bltns`` is ``builtins``, ``dataclasses.inspect``,
  ``typing.types``, ``sqlalchemy.util``) — resolved against the lab's own installed modules,
  never the checkout's;
* ``introspection``: such a name or attribute that is one of the interpreter's introspection
  or machinery functions (``getmembers``, ``getattr_static``, ``vars``, anything of ``inspect``,
  ``sys``, ``os``, ``builtins``...);
* ``dunder-subscript``: a string subscript naming a dunder (``vars(f)["__globals__"]``);
* ``confusable-identifier``: an identifier that mixes scripts or holds a character confusable
  with another script's (Unicode TR39, ``confusable_homoglyphs``), or that Python's NFKC
  normalisation reads as another name: the approver would read another name than the
  interpreter runs. (Confusable characters in strings and comments are `warnings`, shown at
  the approve gate.)
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
import importlib
import importlib.util
import re
import sys
import types
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
        "getmembers", "getmembers_static", "getattr_static", "getattr", "setattr", "delattr", "vars",
        "bltns", "inspect", "types", "compat", "util",
    }
)  # fmt: skip
# Whatever an import or an attribute resolves to, it may not be a function of these modules.
INTROSPECTION_MODULES = frozenset({"builtins", "inspect", "sys", "os", "posix", "gc", "importlib", "ctypes",
                                   "types", "operator", "_imp", "pickle", "marshal", "code", "codeop",
                                   "runpy", "pkgutil", "subprocess", "signal", "atexit", "threading", "_thread",
                                   "io", "_io", "weakref", "site", "sysconfig", "socket", "pdb"})  # fmt: skip
# functools.partial and friends are data-module functions a handler may use; reduce runs code.
INTROSPECTION_NAMES = frozenset({"getattr", "setattr", "delattr", "vars", "globals", "locals", "dir",
                                 "eval", "exec", "compile", "__import__", "open", "breakpoint", "reduce"})  # fmt: skip
_ENTRY = re.compile(r"^\s*(?:from\s+([\w.]+)\s+import\s+(.+?)|import\s+([\w.]+))\s*$")
_DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
_IDENT = re.compile(r"^[A-Za-z_]\w*$")


class AllowlistError(ValueError):
    """A ``capabilities.imports`` entry that is not ``from M import a, b`` or ``import M``."""


@dataclass(frozen=True)
class Allowlist:
    """What may be imported: whole modules (``import M``) and names from modules (``from M import n``)."""

    modules: frozenset[str] = frozenset()
    names: dict[str, frozenset[str]] = field(default_factory=dict)

    @classmethod
    def parse(cls, entries: Iterable[str]) -> Allowlist:
        modules: set[str] = set()
        names: dict[str, set[str]] = {}
        for entry in entries:
            match = _ENTRY.match(entry)
            if match is None:
                if _DOTTED.match(entry.strip()):
                    raise AllowlistError(
                        f"capabilities.imports: {entry!r} names a module, the format before imports listed names; "
                        f"write what may be imported from it, e.g. 'from {entry.strip()} import NAME, OTHER' "
                        f"(or 'import {entry.strip()}' for the module itself)"
                    )
                raise AllowlistError(
                    f"capabilities.imports: got {entry!r}; expected 'from MODULE import NAME, ...' or 'import MODULE'"
                )
            if match.group(3):
                modules.add(match.group(3))
                continue
            module, listed = match.group(1), [n.strip() for n in match.group(2).split(",")]
            bad = [n for n in listed if not _IDENT.match(n)]
            if bad or not _DOTTED.match(module):
                raise AllowlistError(
                    f"capabilities.imports: {entry!r}: {bad or module!r} is not a plain name (no '*', no 'as')"
                )
            names.setdefault(module, set()).update(listed)
        return cls(frozenset(modules), {m: frozenset(n) for m, n in names.items()})

    def module_allowed(self, module: str) -> bool:
        return module in self.modules

    def name_allowed(self, module: str, name: str) -> bool:
        return name in self.names.get(module, frozenset())


def _lab_module(name: str) -> types.ModuleType | None:
    """`name` imported in the lab's own process, when that runs only the lab's installed code: the
    standard library, installed packages, acklab itself; never a module a checkout provides."""
    if name in sys.modules:
        module = sys.modules[name]
        return module if isinstance(module, types.ModuleType) else None
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    origin = (
        Path(spec.origin).resolve()
        if spec is not None and spec.origin not in (None, "built-in", "frozen")
        else None
    )
    trusted = [Path(p).resolve() for p in (sys.base_prefix, sys.prefix)] + [
        Path(__file__).resolve().parents[1]
    ]
    if spec is None or (origin is not None and not any(origin.is_relative_to(t) for t in trusted)):
        return None
    try:
        return importlib.import_module(name)
    except Exception:  # a module that does not import resolves nothing
        return None


def _is_machinery(value: Any) -> str | None:
    """Why `value` may not be reached from a handler (a module, an introspection helper), or None."""
    if isinstance(value, types.ModuleType):
        return f"is the module {value.__name__}"
    module = getattr(value, "__module__", None)
    name = getattr(value, "__name__", None)
    if callable(value) and isinstance(module, str) and module.split(".")[0] in INTROSPECTION_MODULES:
        return f"is {module}.{name}, the interpreter's machinery"
    if callable(value) and name in INTROSPECTION_NAMES and module in (None, "builtins"):
        return f"is the built-in {name}"
    return None


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
        visitor = _Visitor(package_of(path), Allowlist.parse(imports))
        visitor.visit(tree)
        findings += visitor.findings
        findings += _identifier_rules(tree, source)
    lines = source.splitlines()
    return [f.text(path, lines) for f in sorted(findings, key=lambda f: (f.line, f.rule))]


def _confusable(text: str, *, identifier: bool = True) -> str | None:
    """Why `text` could read as something else (TR39: mixed scripts, confusable characters; for an
    identifier, also NFKC: Python reads a fullwidth ``p`` as ``p``), or None."""
    if text.isascii():
        return None
    from confusable_homoglyphs import confusables  # its tables load in ~0.1 s: only for non-ASCII text

    if identifier and unicodedata.normalize("NFKC", text) != text:
        return f"Python reads it as {unicodedata.normalize('NFKC', text)!r} (NFKC)"
    if confusables.is_mixed_script(text):
        return "it mixes scripts"
    found = confusables.is_confusable(text, greedy=True, preferred_aliases=["latin", "common"])
    if found:
        first = found[0]
        looks = ", ".join(h["n"] for h in first["homoglyphs"][:2])
        return f"{first['character']!r} ({first['alias']}) looks like {looks}"
    return None


def _identifier_rules(tree: ast.AST, source: str) -> list[Finding]:
    findings: list[Finding] = []
    seen: set[tuple[int, str]] = set()
    lines = source.split("\n")
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Name):
            names = [node.id]
        elif isinstance(node, ast.Attribute):
            names = [node.attr]
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names = [node.name]
        elif isinstance(node, ast.arg):
            names = [node.arg]
        elif isinstance(node, ast.alias):
            names = [part for n in (node.name, node.asname) if n for part in n.split(".")]
        elif isinstance(node, ast.keyword) and node.arg:
            names = [node.arg]
        line = getattr(node, "lineno", 0)
        for name in names:
            # The AST holds identifiers NFKC-normalised: the source line says how they were written.
            written = [
                w
                for w in re.findall(r"[^\W\d]\w*", lines[line - 1] if 0 < line <= len(lines) else "")
                if unicodedata.normalize("NFKC", w) == name
            ]
            for spelling in written or [name]:
                why = _confusable(spelling)
                if why and (line, spelling) not in seen:
                    seen.add((line, spelling))
                    findings.append(Finding(line, "confusable-identifier", f"identifier {spelling!r}: {why}"))
    return findings


def warnings(source: str, *, path: str) -> list[str]:
    """What the approver must see though no rule refuses it: confusable words in strings and comments."""
    found = []
    for number, line in enumerate(source.split("\n"), start=1):
        for word in sorted(set(re.findall(r"[^\s\"'#(),.:;=\[\]{}]+", line))):
            why = _confusable(word, identifier=False)
            if why:
                found.append(f"{path} line {number}: {word!r} may not be what it looks like: {why}")
    return found


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
    def __init__(self, package: str, imports: Allowlist) -> None:
        self.package = package
        self.imports = imports
        self.findings: list[Finding] = []
        self._called: set[int] = set()
        self._bound: dict[str, Any] = {}  # names bound by imports -> what they are in the lab's process

    def flag(self, node: ast.AST, rule: str, detail: str) -> None:
        self.findings.append(Finding(getattr(node, "lineno", 0), rule, detail))

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if machinery(alias.name):
                self.flag(node, "machinery-module", f"{alias.name} reaches the interpreter's machinery")
            elif not self.imports.module_allowed(alias.name):
                self.flag(
                    node, "import", f"import {alias.name} is not among the imports the flow spec allows"
                )
            else:
                top = alias.asname or alias.name.split(".")[0]
                module = _lab_module(alias.name if alias.asname else alias.name.split(".")[0])
                if module is not None:
                    self._bound[top] = module
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
            elif not self.imports.name_allowed(base, alias.name):
                self.flag(
                    node,
                    "import",
                    f"from {base} import {alias.name} is not among the imports the flow spec allows",
                )
            elif alias.name.startswith("_") and base != "__future__":
                self.flag(node, "private-attribute", f"{full} is private")
            else:
                self._import_name(node, base, alias)
        self.generic_visit(node)

    def _import_name(self, node: ast.ImportFrom, base: str, alias: ast.alias) -> None:
        """An allowed `from base import name`: what it is in the lab's process decides, then its name."""
        full = f"{base}.{alias.name}"
        module = _lab_module(base) if base != "__future__" else None
        if module is not None and hasattr(module, alias.name):
            value = getattr(module, alias.name)
            why = _is_machinery(value)
            if why:
                rule = "module-attribute" if isinstance(value, types.ModuleType) else "introspection"
                self.flag(node, rule, f"{full} {why}")
                return
            self._bound[alias.asname or alias.name] = value
        if alias.name in MACHINERY_ATTRIBUTES:
            self.flag(node, "machinery-attribute", f"{full} leads to the interpreter's machinery")

    def _resolve(self, node: ast.Attribute) -> None:
        """`root.a.b` where root is an imported name: no step may be a module or the machinery."""
        chain: list[str] = []
        current: ast.AST = node
        while isinstance(current, ast.Attribute):
            chain.append(current.attr)
            current = current.value
        if not isinstance(current, ast.Name) or current.id not in self._bound:
            return
        value = self._bound[current.id]
        where = current.id
        for attr in reversed(chain):
            where = f"{where}.{attr}"
            try:
                value = getattr(value, attr)
            except Exception:  # an attribute the lab cannot read resolves nothing
                return
            why = _is_machinery(value)
            if why:
                rule = "module-attribute" if isinstance(value, types.ModuleType) else "introspection"
                self.flag(node, rule, f"{where} {why}")
                return

    def visit_Subscript(self, node: ast.Subscript) -> None:
        key = node.slice
        if isinstance(key, ast.Constant) and isinstance(key.value, str) and key.value.startswith("__"):
            self.flag(node, "dunder-subscript", f"[{key.value!r}] reads a dunder by name")
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in MACHINERY_NAMES:
            self.flag(node, "machinery-name", f"{node.id} reaches the interpreter's machinery")
        elif node.id in DYNAMIC and id(node) not in self._called:
            self.flag(node, "dynamic-attribute", f"{node.id} used other than in a direct call")
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self._attribute(node, node.attr)
        if not isinstance(getattr(node, "_parent_attr", None), ast.Attribute):
            self._resolve(node)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Attribute):
                child._parent_attr = node  # type: ignore[attr-defined]  # only the outermost resolves
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
