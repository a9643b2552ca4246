"""The verdict code checks itself around each in-process attack.

An app attacked in the caller's process (`acklab.attack`, ``webhook_lab.attack``) runs in the
same interpreter as the lab: it could rebind the functions a verdict depends on — replace a
module in ``sys.modules``, assign ``verdicts.judge = ...``, swap a function's ``__code__`` —
or what the caller reads the verdict through (``RunResult.passed``, ``acklab.attack``), and
switch verdicts off for itself and for every later attack of the process. This module does
not make that impossible (nothing in one process can); it makes it visible:

* the modules the verdicts rest on and the result is read through (`WATCHED`) are recorded
  when this module is imported: every function each holds (its own and those it imported by
  name), every method of the classes it defines — properties' getters, setters and deleters
  and cached properties' functions included — and which class or acklab module each of its
  names is bound to;
* `check()` finds each of them where it was — the same module object in ``sys.modules`` (or
  the same file imported afresh, holding the same code), the same function with the same
  code, every function's code in acklab's own files (so a rebinding made before acklab was
  imported is caught too), the same class and module behind each name, no method added to a
  watched class (``__getattribute__``, a property...), and the public names of the ``acklab``
  package (`acklab.attack`, `acklab.RunResult`...) bound to what they name;
* anything else is a `LabIntegrityError` (exit 4) naming the module and the name rebound.

`harness.engine.api.attack` checks before the attack (an earlier app of the process) and
after it (this one), before the result is returned; the pytest plugin checks again after a
test that attacked (a change made later by something the app left running, or one that
bypassed the API's own check, is seen there).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from acklab.harness.errors import HarnessError

# What a verdict is made of — judging, re-judging, the records it reads, the bundle it writes —
# and what the caller reads it through: the API and its result.
WATCHED = (
    "acklab.evidence.bundle",
    "acklab.evidence.documents.outcomes",
    "acklab.evidence.documents.records",
    "acklab.evidence.documents.trial",
    "acklab.evidence.documents.verdicts",
    "acklab.evidence.journal",
    "acklab.harness.core.ack_verdicts",
    "acklab.harness.core.conflict_verdicts",
    "acklab.harness.core.object_verdicts",
    "acklab.harness.core.proofs",
    "acklab.harness.core.sink_verdicts",
    "acklab.harness.core.trial",
    "acklab.harness.core.verdicts",
    "acklab.harness.engine.api",
    "acklab.harness.engine.execute",
    "acklab.harness.engine.late_read",
    "acklab.harness.engine.results",
    "acklab.harness.engine.run_bundle",
    "acklab.harness.engine.runner",
    "acklab.harness.sinks",  # the sinks' registry the sink verdicts iterate
    "acklab.harness.sinks.base",
    # Whether an app served in this process is idle decides when its counts are settled.
    "acklab.harness.targets.activity",
)
PUBLIC = "acklab"  # its lazily bound names (`acklab.attack`...) must stay what they name
# The parts of a descriptor that hold code: a property's accessors, a cached property's function.
_ACCESSORS = {property: ("fget", "fset", "fdel"), functools.cached_property: ("func",)}


class LabIntegrityError(HarnessError):
    """acklab's own verdict code was changed in this process (exit 4): no verdict can be trusted."""


def _roots() -> tuple[str, ...]:
    """Where the watched modules' own files lie (the harness's and the evidence's folders)."""
    found: set[str] = set()
    for package in ("acklab.harness", "acklab.evidence"):
        found |= {str(Path(p).resolve()) for p in importlib.import_module(package).__path__}
    return tuple(sorted(found))


def _code_of(member: Any) -> Iterator[tuple[str, Any]]:
    """(suffix, function) of each function a class member holds: a method, a static or class
    method's function, a property's accessors, a cached property's function."""
    inner = member.__func__ if isinstance(member, staticmethod | classmethod) else member
    if isinstance(inner, types.FunctionType):
        yield "", inner
        return
    for kind, parts in _ACCESSORS.items():
        if isinstance(inner, kind):
            for part in parts:
                function = getattr(inner, part, None)
                if isinstance(function, types.FunctionType):
                    yield f".{part}", function


def _functions(module: types.ModuleType) -> Iterator[tuple[str, Any]]:
    """(name, function) of every plain function the module holds, and of every function in the
    members of the classes it defines (``Class.method``, ``Class.prop.fget``...)."""
    for name, value in list(vars(module).items()):
        if isinstance(value, types.FunctionType):
            yield name, value
        elif _defined_in(value, module):
            for attr, member in list(vars(value).items()):
                for suffix, function in _code_of(member):
                    yield f"{name}.{attr}{suffix}", function


def _defined_in(value: Any, module: types.ModuleType) -> bool:
    return isinstance(value, type) and value.__module__ == module.__name__


def _bindings(module: types.ModuleType) -> dict[str, Any]:
    """Name -> the class or module of acklab's that `module` binds it to (its own classes and
    those it imported; the acklab modules it imported)."""
    found = {}
    for name, value in list(vars(module).items()):
        owner = value.__module__ if isinstance(value, type) else getattr(value, "__name__", "")
        if isinstance(value, type | types.ModuleType) and str(owner).startswith("acklab."):
            found[name] = value
    return found


def _hooks(module: types.ModuleType) -> dict[str, frozenset[str]]:
    """Class name -> the names of its members that hold code, for the classes `module` defines."""
    return {
        name: frozenset(attr for attr, member in vars(value).items() if any(_code_of(member)))
        for name, value in list(vars(module).items())
        if _defined_in(value, module)
    }


def _own(attr: str, function: Any, roots: tuple[str, ...]) -> bool:
    """Whether `function` was written in acklab's files; methods a decorator generates
    (dataclasses' ``__init__``, ``__repr__``...) are not, and are held to identity only."""
    if attr.rpartition(".")[2].startswith("__"):
        return True
    code = getattr(inspect.unwrap(function), "__code__", None)
    if code is None:
        return False
    filename = _real_file(code.co_filename)
    return any(filename.startswith(root + "/") for root in roots)


@functools.lru_cache(maxsize=4096)
def _real_file(filename: str) -> str:
    """Where a code object's file lies, resolved once a process, as the roots are (`_ROOTS`):
    resolving it again at every check was most of a check's 11 ms (one stat per path part)."""
    return str(Path(filename).resolve()) if filename else ""


@dataclass(frozen=True)
class _Taken:
    """One watched module as it was when this module was imported."""

    module: types.ModuleType
    functions: dict[str, tuple[Any, Any]]  # name -> (function, its code)
    bindings: dict[str, Any]
    hooks: dict[str, frozenset[str]]


def _initializing(module: types.ModuleType) -> bool:
    """Whether `module` is still being imported (the module importing this one, say)."""
    return bool(getattr(getattr(module, "__spec__", None), "_initializing", False))


def _take(module: types.ModuleType) -> _Taken:
    functions = {
        attr: (function, function.__code__)
        for attr, function in _functions(module)
        if function.__module__.startswith("acklab.")  # a library's function is not ours to vouch for
    }
    return _Taken(module, functions, _bindings(module), _hooks(module))


def _snapshot() -> tuple[dict[str, _Taken], dict[str, types.ModuleType]]:
    """Every watched module as it is now; those still being imported (the one that imported
    this module) are taken at the first check, once they are whole."""
    taken, pending = {}, {}
    for name in WATCHED:
        module = importlib.import_module(name)
        if _initializing(module):
            pending[name] = module
        else:
            taken[name] = _take(module)
    return taken, pending


def _snapshots() -> dict[str, _Taken]:
    for name, module in list(_PENDING.items()):
        if not _initializing(module):
            _SNAPSHOT[name] = _take(module)
            del _PENDING[name]
    return _SNAPSHOT


_ROOTS = _roots()
_SNAPSHOT, _PENDING = _snapshot()
_LAZY: dict[str, tuple[str, str]] = dict(vars(importlib.import_module(PUBLIC)).get("_LAZY", {}))


def _current(module: types.ModuleType, attr: str) -> Any:
    """What `module` holds now at `attr` (``name``, ``Class.member`` or ``Class.member.part``)."""
    owner, _, rest = attr.partition(".")
    if not rest:
        return vars(module).get(owner)
    holder = vars(module).get(owner)
    member, _, part = rest.partition(".")
    value = vars(holder).get(member) if isinstance(holder, type) else None
    value = value.__func__ if isinstance(value, staticmethod | classmethod) else value
    return getattr(value, part, None) if part else value


def _reimported(module: types.ModuleType, now: Any, functions: dict[str, tuple[Any, Any]]) -> bool:
    """Whether `now` is `module` imported afresh from the same file (pytester's in-process runs
    and ``importlib.reload`` do that): every function it holds the same code, written in
    acklab's files. The module recorded first is still checked, name by name."""
    if not isinstance(now, types.ModuleType) or getattr(now, "__file__", None) != module.__file__:
        return False
    for attr, (_, code) in functions.items():
        current = _current(now, attr)
        fresh = getattr(current, "__code__", None)
        if fresh is None or fresh.co_code != code.co_code or fresh.co_consts != code.co_consts:
            return False
        if not _own(attr, current, _ROOTS):
            return False
    return True


def _module_problems(name: str, taken: _Taken) -> list[str]:
    module, found = taken.module, []
    rebound = {attr for attr, value in taken.bindings.items() if vars(module).get(attr) is not value}
    found += [
        f"{name}.{attr} was rebound (it is no longer the {type(taken.bindings[attr]).__name__} acklab bound)"
        for attr in sorted(rebound)
    ]
    for attr, (function, code) in taken.functions.items():
        if attr.partition(".")[0] in rebound:
            continue  # its class was rebound: named above
        current = _current(module, attr)
        if current is not function:
            found.append(f"{name}.{attr} was rebound (it is no longer the function acklab defined)")
        elif function.__code__ is not code:
            found.append(f"{name}.{attr} had its code replaced (__code__)")
        elif not _own(attr, function, _ROOTS):
            found.append(f"{name}.{attr} is not defined in acklab's own files ({code.co_filename})")
    for cls, members in taken.hooks.items():
        holder = vars(module).get(cls)
        if cls in rebound or not isinstance(holder, type):
            continue
        added = sorted(a for a, m in vars(holder).items() if a not in members and any(_code_of(m)))
        found += [f"{name}.{cls}.{attr} was added (a member acklab did not define)" for attr in added]
    return found


def _public_problems(taken: dict[str, _Taken]) -> list[str]:
    """The ``acklab`` package's lazily bound names (`acklab.attack`...), each against what it
    names in the module acklab recorded."""
    package = sys.modules.get(PUBLIC)
    if package is None:
        return []
    space = vars(package)
    if dict(space.get("_LAZY", {})) != _LAZY:
        return [f"{PUBLIC}._LAZY was changed: its public names would resolve to something else"]
    found = []
    for attr, (where, name) in _LAZY.items():
        source = taken[where].module if where in taken else sys.modules.get(where)
        if attr in space and source is not None and space[attr] is not vars(source).get(name):
            found.append(f"{PUBLIC}.{attr} is no longer {where}.{name} (it was rebound)")
    return found


def problems() -> list[str]:
    """Every way the watched modules differ from what acklab defined (empty when intact)."""
    found = []
    taken_now = _snapshots()
    for name, taken in taken_now.items():
        now = sys.modules.get(name)
        if now is not taken.module and not _reimported(taken.module, now, taken.functions):
            found.append(f"sys.modules[{name!r}] is no longer acklab's module {name} (it was replaced)")
            continue
        found += _module_problems(name, taken)
    return found + _public_problems(taken_now)


def check(when: str) -> None:
    """Raise LabIntegrityError (exit 4) naming each module and name rebound; `when` says when."""
    found = problems()
    if found:
        raise LabIntegrityError(
            f"acklab's verdict code was changed in this process ({when}): "
            + "; ".join(found[:5])
            + (f"; and {len(found) - 5} more" if len(found) > 5 else "")
            + ". Code that runs in this process (an app attacked in-process, a test) rebound it, so no "
            "verdict of this process can be trusted; attack the app in a process of its own "
            "(`acklab run --target spec.yaml`), or find what rebinds it"
        )
