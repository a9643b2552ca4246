"""Python modules as their source says, never imported: where a module lives and what it binds.

The scope guard decides what a patched file may reach without running any of it, nor anything
it imports: importing a user's module runs the user's code, and importing their framework runs
the framework's (``django.conf.settings`` reads the project's settings on first touch) in the
lab's own process. So modules are located the way the interpreter that serves the checkout
would find them — the checkout first (its package folders, a ``src/`` layout, setuptools'
``package-dir``), then the lab's environment — and read as syntax trees:

* `Layout` is the checkout's import layout: which package a file of it belongs to
  (``orders/views.py`` is in ``orders`` when ``orders/__init__.py`` exists; ``app/webhooks.py``
  in ``acklab.app`` where ``pyproject.toml`` maps it), so relative imports resolve as Python
  would resolve them there;
* `Sources.attribute` is what ``module.name`` is: a binding of the module's own top level (an
  import, a ``def``, a ``class``, an assignment), else a submodule file, else what a star import
  or a module ``__getattr__`` may provide (opaque);
* `Sources.resolve` follows re-exports (``from .sql.expression import select``) to where a
  name is defined, or to a module.

A name bound in several branches (``try: import simplejson as json / except: import json``)
has every binding as a candidate; the guard refuses when any candidate is refused. Nothing here
depends on what this process happens to have imported, so a decision is the same every time.
"""

from __future__ import annotations

import ast
import importlib.machinery
import sys
import tomllib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path, PurePosixPath
from typing import Any

# A module file larger than this is not read: what it binds stays opaque.
MAX_SOURCE_BYTES = 4 * 1024 * 1024
# How many re-exports a name may pass through before it is called opaque.
MAX_DEPTH = 24


@dataclass(frozen=True)
class Module:
    """The name is a module (`name` is its full dotted name)."""

    name: str


@dataclass(frozen=True)
class Defined:
    """The name is defined in `module`'s source (a function, a class, an assignment)."""

    module: str
    name: str


@dataclass(frozen=True)
class Opaque:
    """What `module.name` is cannot be read from source (a C module, a star import, a module
    ``__getattr__``, a file too large): only its name and its module's name are known."""

    module: str
    name: str


@dataclass(frozen=True)
class _Imported:
    """``from module import name`` (resolved later, on demand)."""

    module: str
    name: str


Final = Module | Defined | Opaque
_Binding = Module | Defined | _Imported | Opaque


@dataclass(frozen=True)
class Located:
    """Where a module's code is: its source file (None for a namespace package or a module without
    Python source), and for a package the folders its submodules are found in."""

    name: str
    source: Path | None
    search: tuple[str, ...] = ()
    compiled: bool = False  # built in, or an extension module: nothing to read


@dataclass(frozen=True)
class _Bindings:
    names: dict[str, tuple[_Binding, ...]] = field(default_factory=dict)
    stars: tuple[str, ...] = ()
    module_getattr: bool = False


def _relative(package: str, level: int, module: str | None) -> str | None:
    """The absolute name of ``from {'.' * level}{module} import ...`` in `package` (None: above the top)."""
    parts = package.split(".") if package else []
    if level - 1 > len(parts) or (not parts and level):
        return None
    base = parts[: len(parts) - (level - 1)]
    if not base:
        return None
    return ".".join([*base, module] if module else base)


@dataclass(frozen=True)
class Layout:
    """How a checkout's files import: its package folders and setuptools' ``package-dir`` mapping."""

    root: Path
    mapped: tuple[tuple[str, PurePosixPath], ...] = ()  # (package name, folder), longest folder first

    @classmethod
    def of(cls, root: Path) -> Layout:
        mapping: dict[str, str] = {}
        pyproject = root / "pyproject.toml"
        try:
            doc = tomllib.loads(pyproject.read_text(encoding="utf-8")) if pyproject.is_file() else {}
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            doc = {}
        declared = doc.get("tool", {}).get("setuptools", {}).get("package-dir", {})
        if isinstance(declared, dict):
            mapping = {str(k): str(v) for k, v in declared.items() if isinstance(v, str)}
        if "" not in mapping and (root / "src").is_dir() and not (root / "src" / "__init__.py").exists():
            mapping[""] = "src"
        ordered = sorted(
            ((name, PurePosixPath(folder)) for name, folder in mapping.items()),
            key=lambda pair: (-len(pair[1].parts), pair[0]),
        )
        return cls(root, tuple(ordered))

    def package_of(self, path: str) -> str:
        """The package the checkout's file `path` belongs to ('' when it is a top-level module)."""
        folders = PurePosixPath(path).parts[:-1]
        for name, folder in self.mapped:
            if folders[: len(folder.parts)] == folder.parts:
                rest = list(folders[len(folder.parts) :])
                return ".".join([*([name] if name else []), *rest])
        chain: list[str] = []
        for depth in range(len(folders), 0, -1):
            if not (self.root.joinpath(*folders[:depth]) / "__init__.py").is_file():
                break
            chain.insert(0, folders[depth - 1])
        # A folder without __init__.py is a namespace package, rooted at the checkout.
        return ".".join(chain) if chain else ".".join(folders)

    def absolute(self, path: str, level: int, module: str | None) -> str | None:
        """What a relative import (`level` dots, then `module`) in the file `path` names."""
        return _relative(self.package_of(path), level, module)

    def roots(self) -> list[Path]:
        """Where the checkout's top-level modules are: a mapped (or ``src/``) root, then the root."""
        mapped = [self.root.joinpath(*folder.parts) for package, folder in self.mapped if not package]
        return [*mapped, self.root]

    def mapped_package(self, name: str) -> Path | None:
        """The folder setuptools' ``package-dir`` maps the package `name` to, if it does."""
        for package, folder in self.mapped:
            if package and name == package:
                return self.root.joinpath(*folder.parts)
        return None


class Sources:
    """Modules located and read for one checkout; nothing is imported."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self._located: dict[str, Located | None] = {}

    # -- where a module is ---------------------------------------------------------------

    def locate(self, name: str) -> Located | None:
        if name not in self._located:
            self._located[name] = self._locate(name)
        return self._located[name]

    def _locate(self, name: str) -> Located | None:
        if name in sys.builtin_module_names:
            return Located(name, None, compiled=True)
        folder = self.layout.mapped_package(name)
        if folder is not None:
            init = folder / "__init__.py"
            return Located(name, init if init.is_file() else None, (str(folder),))
        parent, _, _last = name.rpartition(".")
        if parent:
            above = self.locate(parent)
            if above is None or not above.search:
                return None
            return _spec(name, list(above.search))
        # The checkout first, as the interpreter serving it from its root finds it; then the lab's
        # environment (the standard library and the installed packages), by path, then by the
        # finders an editable install adds. None of them imports anything.
        found = _spec(name, [str(p) for p in self.layout.roots()])
        if found is None:
            found = _spec(name, [p for p in sys.path if p])
        if found is None:
            found = _meta_spec(name)
        return found

    def is_module(self, name: str) -> bool:
        return self.locate(name) is not None

    # -- what a module binds ---------------------------------------------------------------

    def _bindings(self, name: str) -> _Bindings | None:
        located = self.locate(name)
        if located is None or located.source is None:
            return None
        package = name if located.search else name.rpartition(".")[0]
        return _read_bindings(str(located.source), package, *_stamp(located.source))

    def attribute(self, module: str, name: str) -> tuple[_Binding, ...]:
        """What ``module.name`` may be, as its source binds it (possibly re-exported)."""
        located = self.locate(module)
        if located is None:
            return (Opaque(module, name),)
        bindings = self._bindings(module)
        if bindings is not None and name in bindings.names:
            return bindings.names[name]
        if located.search and self.is_module(f"{module}.{name}"):
            return (Module(f"{module}.{name}"),)
        if bindings is None:
            return (Opaque(module, name),)
        found: list[_Binding] = [_Imported(star, name) for star in bindings.stars]
        if bindings.module_getattr or not found:
            found.append(Opaque(module, name))
        return tuple(found)

    def resolve(self, binding: _Binding) -> tuple[Final, ...]:
        """Every final candidate of `binding`: a module, a definition, or opaque."""
        return tuple(dict.fromkeys(self._resolve(binding, 0, frozenset())))

    def _resolve(self, binding: _Binding, depth: int, seen: frozenset[tuple[str, str]]) -> Iterator[Final]:
        if not isinstance(binding, _Imported):
            yield binding
            return
        key = (binding.module, binding.name)
        if depth > MAX_DEPTH:
            yield Opaque(*key)
            return
        if key in seen:
            # `from . import x` in the package itself: the submodule, or nothing known.
            sub = f"{binding.module}.{binding.name}"
            yield Module(sub) if self.is_module(sub) else Opaque(*key)
            return
        if self.locate(binding.module) is None:
            yield Opaque(*key)
            return
        for candidate in self.attribute(binding.module, binding.name):
            yield from self._resolve(candidate, depth + 1, seen | {key})

    def member(self, module: str, name: str) -> tuple[Final, ...]:
        """``module.name`` resolved to its final candidates."""
        return tuple(dict.fromkeys(f for b in self.attribute(module, name) for f in self.resolve(b)))

    def imported(self, module: str, name: str) -> tuple[Final, ...]:
        """What ``from module import name`` binds."""
        return self.resolve(_Imported(module, name))


def _spec(name: str, path: list[str]) -> Located | None:
    try:
        spec = importlib.machinery.PathFinder.find_spec(name, path)
    except (ImportError, ValueError, OSError):
        return None
    return _located(name, spec)


def _meta_spec(name: str) -> Located | None:
    """What the finders an editable install adds (beside the path) say of the top-level `name`."""
    skipped = (
        importlib.machinery.BuiltinImporter,
        importlib.machinery.FrozenImporter,
        importlib.machinery.PathFinder,
    )
    for finder in sys.meta_path:
        if finder in skipped or not hasattr(finder, "find_spec"):
            continue
        spec = _ask(finder, name)
        if spec is not None:
            return _located(name, spec)
    return None


def _ask(finder: Any, name: str) -> importlib.machinery.ModuleSpec | None:
    try:
        spec = finder.find_spec(name, None)
    except Exception:  # a finder that cannot answer finds nothing
        return None
    return spec if isinstance(spec, importlib.machinery.ModuleSpec) else None


def _located(name: str, spec: importlib.machinery.ModuleSpec | None) -> Located | None:
    if spec is None:
        return None
    search = tuple(spec.submodule_search_locations or ())
    origin = spec.origin
    if origin is None or origin in ("built-in", "frozen", "namespace"):
        return Located(name, None, search, compiled=origin in ("built-in", "frozen"))
    path = Path(origin)
    if path.suffix != ".py":
        return Located(name, None, search, compiled=True)
    return Located(name, path, search)


def _stamp(path: Path) -> tuple[int, int]:
    try:
        stat = path.stat()
    except OSError:
        return (0, -1)
    return (stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=512)
def _read_bindings(path: str, package: str, mtime_ns: int, size: int) -> _Bindings | None:
    """What the module at `path` binds at its top level (keyed by the file's stamp: a changed file
    is read again)."""
    if size < 0 or size > MAX_SOURCE_BYTES:
        return None
    try:
        tree = ast.parse(Path(path).read_bytes(), filename=path)
    except (OSError, SyntaxError, ValueError):
        return None
    names: dict[str, list[_Binding]] = {}
    stars: list[str] = []
    module_name = package  # only for definitions: where they are
    own = Path(path).stem
    if own != "__init__":
        module_name = f"{package}.{own}" if package else own
    getattr_defined = False

    def bind(name: str, value: _Binding) -> None:
        names.setdefault(name, [])
        if value not in names[name]:
            names[name].append(value)

    for node in _top_level(tree.body):
        if isinstance(node, ast.Import | ast.ImportFrom):
            _bind_import(node, package, bind, stars)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bind(node.name, Defined(module_name, node.name))
            getattr_defined = getattr_defined or node.name == "__getattr__"
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            value = node.value
            for target in targets:
                for name in _names(target):
                    bind(name, _alias(value, names) or Defined(module_name, name))
    return _Bindings({k: tuple(v) for k, v in names.items()}, tuple(dict.fromkeys(stars)), getattr_defined)


def _bind_import(
    node: ast.Import | ast.ImportFrom, package: str, bind: Callable[[str, _Binding], None], stars: list[str]
) -> None:
    """What one top-level import binds (a star import's module is kept in `stars`)."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.asname:
                bind(alias.asname, Module(alias.name))
            else:
                top = alias.name.split(".")[0]
                bind(top, Module(top))
        return
    base = node.module if not node.level else _relative(package, node.level, node.module)
    if base is None:
        return
    for alias in node.names:
        if alias.name == "*":
            stars.append(base)
        else:
            bind(alias.asname or alias.name, _Imported(base, alias.name))


def _alias(value: ast.expr | None, names: dict[str, list[_Binding]]) -> _Binding | None:
    """``x = os`` makes x what os is bound to; any other value is a definition of its own."""
    if isinstance(value, ast.Name) and value.id in names and len(names[value.id]) == 1:
        return names[value.id][0]
    return None


def _names(target: ast.expr) -> Iterable[str]:
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, ast.Tuple | ast.List):
        for element in target.elts:
            yield from _names(element)
    elif isinstance(target, ast.Starred):
        yield from _names(target.value)


def _top_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements a module runs at its top level, into if/try/with/for blocks (not functions)."""
    for node in body:
        yield node
        if isinstance(node, ast.If | ast.For | ast.AsyncFor | ast.While):
            yield from _top_level(node.body)
            yield from _top_level(node.orelse)
        elif isinstance(node, ast.With | ast.AsyncWith):
            yield from _top_level(node.body)
        elif isinstance(node, ast.Try | ast.TryStar):
            yield from _top_level(node.body)
            for handler in node.handlers:
                yield from _top_level(handler.body)
            yield from _top_level(node.orelse)
            yield from _top_level(node.finalbody)
        elif isinstance(node, ast.Match):
            for case in node.cases:
                yield from _top_level(case.body)
