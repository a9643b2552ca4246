"""The capability check: what the patched file may reach, read from its syntax tree.

A handler needs the app's contract, its models and database helpers, its ORM and the standard
library's data modules. It never needs the interpreter's machinery, nor the database driver
beneath the ORM, and a patch that reaches for them is trying to act outside its request:
rewrite another module through ``sys.modules``, end the process early
(``atexit.register(os._exit, 0)`` under pytest), run code it assembles at run time, take the
raw driver connection (``session.get_bind().dialect.dbapi``) and run ``COPY ... TO PROGRAM``.
The rules are fixed (code, not configuration); the spec only lists which *names* may be
imported from where (``capabilities.imports`` in ``flows/repair.yaml``: ``from sqlalchemy import
select, text``, ``from django.db import transaction``, ``import json``), and no list can allow
the machinery below.

Nothing is imported to decide: the patched file, the checkout's other modules, the framework and
the libraries are read as source (`flows.sources`), located as the interpreter serving the
checkout would find them, so no code of the user's project or framework runs in the lab's
process, and a decision does not depend on what the lab happened to import before. Each finding
names the line and the rule:

* ``import``: a name or module outside the spec's list; star imports; relative imports are
  resolved against the patched file's own package first (``from .models import Fulfillment`` in
  ``orders/views.py`` is ``from orders.models import Fulfillment``);
* ``module-attribute``: a module reached through a name or an attribute that the spec does not
  allow as a module (``json.decoder``), or that is the interpreter's machinery, however its
  source binds it (``from enum import bltns`` is ``builtins``, ``dataclasses.inspect``,
  ``typing.types``). A submodule the spec names (``from django.db import transaction``) is
  allowed;
* ``introspection``: a name or attribute that resolves to one of the interpreter's introspection
  or machinery functions (anything of ``inspect``, ``sys``, ``os``, ``builtins``...);
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
  ``__class__.__subclasses__``, ``__globals__``, ``__dict__``, ``os._exit`` however ``os`` was
  aliased;
* ``machinery-attribute``: an attribute, or a name imported from a module, that names the
  machinery (``.modules``, ``.sys``, ``.kill``, ``.f_globals``, ``.gi_frame``,
  ``get_type_hints``...), whatever it is rooted in;
* ``driver-attribute``: an attribute that leads beneath the ORM to the database driver or its
  raw connection (``.dialect``, ``.dbapi``, ``.driver_connection``, ``.dbapi_connection``,
  ``.raw_connection``, an uncalled ``.connection``, Django's ``.schema_editor``...), whatever it
  is rooted in — a runtime object as much as an import;
* ``raw-sql`` and ``dynamic-sql``: SQL that runs programs, changes the schema or reaches past the
  handler's database (``flows.sql_rules``), or SQL sent that the guard cannot read;
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
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from . import sql_rules
from .allowlist import Allowlist
from .escape import one_line, unsafe
from .sources import Final, Layout, Module, Opaque, Sources

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
        "cr_await", "gi_yieldfrom", "ag_await", "co_consts", "f_trace", "func_globals", "mro",
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
# Attributes that lead beneath the ORM to the database driver, its module or its raw connection:
# from there a handler could log in again with other rights or send what the ORM never would.
DRIVER_ATTRIBUTES = frozenset(
    {
        "dialect", "dbapi", "loaded_dbapi", "import_dbapi", "dbapi_connection", "driver_connection",
        "raw_connection", "get_raw_connection", "schema_editor", "creation", "settings_dict",
        "get_new_connection", "connection_pool",
    }
)  # fmt: skip
# Attributes a runtime object must not be asked for, called or not: its raw connection.
UNCALLED_DRIVER_ATTRIBUTES = frozenset({"connection"})


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


# The lab's own checkout: the layout a file is read in when the caller names no checkout.
LAB_ROOT = Path(__file__).resolve().parents[1]


def lab_layout() -> Layout:
    """The lab's own layout (``app/webhooks.py`` is ``acklab.app.webhooks``), installed or not."""
    layout = Layout.of(LAB_ROOT)
    if not any(name == "acklab" for name, _ in layout.mapped):
        layout = Layout(LAB_ROOT, (*layout.mapped, ("acklab", PurePosixPath("."))))
    return layout


def check(source: str, *, path: str, imports: Iterable[str], root: Path | None = None) -> list[str]:
    """Every capability rule `source` (the patched file at `path` of the checkout at `root`; default
    the lab's own) breaks, as reasons. Nothing of `source`, the checkout or what they import runs."""
    findings = _text_rules(source)
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError:
        tree = None  # the guard's own parse rule reports it
    if tree is not None:
        layout = Layout.of(root) if root is not None else lab_layout()
        visitor = _Visitor(path, layout, Allowlist.parse(imports))
        visitor.visit(tree)
        findings += visitor.findings
        findings += _identifier_rules(tree, source)
        findings += [Finding(f.line, f.rule, f.detail) for f in sql_rules.findings(tree)]
    lines = source.splitlines()
    return [f.text(path, lines) for f in sorted(findings, key=lambda f: (f.line, f.rule, f.detail))]


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


def _refusal(final: Final) -> tuple[str, str] | None:
    """(rule, why) when `final` is the interpreter's machinery: a module of it, or a function of its
    introspection modules or a built-in that runs or reaches code; None otherwise."""
    if isinstance(final, Module):
        if machinery(final.name):
            return "module-attribute", f"is the module {final.name}, the interpreter's machinery"
        return None
    top = final.module.split(".")[0]
    if top in INTROSPECTION_MODULES:
        return "introspection", f"is {final.module}.{final.name}, the interpreter's machinery"
    compiled = isinstance(final, Opaque) and top.startswith("_")
    if final.name in INTROSPECTION_NAMES and (top == "builtins" or compiled):
        return "introspection", f"is the built-in {final.name}"
    return None


class _Visitor(ast.NodeVisitor):
    def __init__(self, path: str, layout: Layout, imports: Allowlist) -> None:
        self.path = path
        self.layout = layout
        self.sources = Sources(layout)
        self.imports = imports
        self.findings: list[Finding] = []
        self._called: set[int] = set()
        self._calls: set[int] = set()  # attributes that are called (``x.connection()``)
        # names bound by imports -> what they are, read from source
        self._bound: dict[str, tuple[Final, ...]] = {}
        # the modules the file may hold as objects: those imported (and on an imported dotted path)
        self._modules: set[str] = set()

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
                parts = alias.name.split(".")
                self._modules.update(".".join(parts[:depth]) for depth in range(1, len(parts) + 1))
                bound = alias.asname or parts[0]
                self._bound[bound] = (Module(alias.name if alias.asname else parts[0]),)
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = node.module or ""
        written = "." * node.level + base
        if node.level:
            absolute = self.layout.absolute(self.path, node.level, node.module)
            if absolute is None:
                self.flag(
                    node,
                    "import",
                    f"from {written} import ...: {self.path} is not inside a package of the checkout, so "
                    "the relative import names nothing; import it absolutely",
                )
                self.generic_visit(node)
                return
            base = absolute
        shown = f"{written} ({base})" if node.level else base
        for alias in node.names:
            if alias.name == "*":
                self.flag(node, "import", f"from {shown} import *: name what is imported")
                continue
            full = f"{base}.{alias.name}"
            if machinery(base):
                self.flag(node, "machinery-module", f"{full} reaches the interpreter's machinery")
            elif not self.imports.name_allowed(base, alias.name):
                self.flag(
                    node,
                    "import",
                    f"from {shown} import {alias.name} is not among the imports the flow spec allows"
                    + (f" (it would list 'from {base} import {alias.name}')" if node.level else ""),
                )
            elif alias.name.startswith("_") and base != "__future__":
                self.flag(node, "private-attribute", f"{full} is private")
            else:
                self._import_name(node, base, alias)
        self.generic_visit(node)

    def _import_name(self, node: ast.ImportFrom, base: str, alias: ast.alias) -> None:
        """An allowed `from base import name`: what its source makes it decides, then its name."""
        full = f"{base}.{alias.name}"
        finals = self.sources.imported(base, alias.name) if base != "__future__" else ()
        for final in finals:
            refused = _refusal(final)
            if refused:
                self.flag(node, refused[0], f"{full} {refused[1]}")
                return
        if alias.name in MACHINERY_ATTRIBUTES:
            self.flag(node, "machinery-attribute", f"{full} leads to the interpreter's machinery")
            return
        # A submodule the spec names (`from django.db import transaction`) may be used as one.
        self._modules.update(f.name for f in finals if isinstance(f, Module))
        self._bound[alias.asname or alias.name] = finals

    def _resolve(self, node: ast.Attribute) -> None:
        """`root.a.b` where root is an imported name: no step may be a module the spec does not allow
        as one, nor the machinery. A step that is not a module is a runtime value: the attribute
        rules (private, machinery, driver) judge what follows."""
        chain: list[str] = []
        current: ast.AST = node
        while isinstance(current, ast.Attribute):
            chain.append(current.attr)
            current = current.value
        if not isinstance(current, ast.Name) or current.id not in self._bound:
            return
        finals = self._bound[current.id]
        where = current.id
        for attr in reversed(chain):
            where = f"{where}.{attr}"
            modules = [f.name for f in finals if isinstance(f, Module)]
            if not modules:
                return
            following: list[Final] = []
            for module in modules:
                for final in self.sources.member(module, attr):
                    refused = _refusal(final)
                    if refused:
                        self.flag(node, refused[0], f"{where} {refused[1]}")
                        return
                    if isinstance(final, Module) and final.name not in self._modules:
                        parent, _, last = final.name.rpartition(".")
                        self.flag(
                            node,
                            "module-attribute",
                            f"{where} is the module {final.name}, which the spec does not allow as a "
                            f"module (it would list 'from {parent} import {last}' or 'import {final.name}')",
                        )
                        return
                    following.append(final)
            finals = tuple(following)

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
        self._attribute(node, node.attr, called=id(node) in self._calls)
        if not isinstance(getattr(node, "_parent_attr", None), ast.Attribute):
            self._resolve(node)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Attribute):
                child._parent_attr = node  # type: ignore[attr-defined]  # only the outermost resolves
        self.generic_visit(node)

    def _attribute(self, node: ast.AST, name: str, *, called: bool = False) -> None:
        if name.startswith("_"):
            self.flag(node, "private-attribute", f".{name} is private")
        elif name in MACHINERY_ATTRIBUTES:
            self.flag(node, "machinery-attribute", f".{name} leads to the interpreter's machinery")
        elif name in DRIVER_ATTRIBUTES or (name in UNCALLED_DRIVER_ATTRIBUTES and not called):
            self.flag(
                node,
                "driver-attribute",
                f".{name} leads beneath the ORM to the database driver or its raw connection, whatever it "
                "is reached from; a handler works through the session or connection it is given",
            )

    def visit_MatchClass(self, node: ast.MatchClass) -> None:
        for name in node.kwd_attrs:  # case C(__class__=x) reads an attribute by name
            self._attribute(node, name)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Attribute):
            self._calls.add(id(node.func))
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
