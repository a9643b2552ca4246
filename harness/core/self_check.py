"""The verdict code checks itself around each in-process attack.

An app attacked in the caller's process (`acklab.attack`, ``webhook_lab.attack``) runs in the
same interpreter as the lab: it could rebind the functions a verdict depends on — replace a
module in ``sys.modules``, assign ``verdicts.judge = ...``, swap a function's ``__code__`` —
and switch verdicts off for itself and for every later attack of the process. This module
does not make that impossible (nothing in one process can); it makes it visible:

* the modules the verdicts rest on (`WATCHED`) are recorded when this module is imported,
  each with every function it holds (its own and those it imported by name) and the methods
  of the classes it defines;
* `check()` finds each of them where it was — the same module object in ``sys.modules`` (or
  the same file imported afresh, holding the same code), the same function with the same code, and every function's code in acklab's own files (so a
  rebinding made before acklab was imported is caught too);
* anything else is a `LabIntegrityError` (exit 4) naming the module and the name rebound.

`harness.engine.api.attack` checks before the attack (an earlier app of the process) and
after it (this one), before the result is returned.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from acklab.harness.errors import HarnessError

# What a verdict is made of: judging, re-judging, the records it reads, the bundle it writes.
WATCHED = (
    "acklab.evidence.bundle",
    "acklab.evidence.documents.records",
    "acklab.evidence.documents.trial",
    "acklab.evidence.documents.verdicts",
    "acklab.evidence.journal",
    "acklab.harness.core.conflict_verdicts",
    "acklab.harness.core.object_verdicts",
    "acklab.harness.core.proofs",
    "acklab.harness.core.trial",
    "acklab.harness.core.verdicts",
    "acklab.harness.engine.execute",
    "acklab.harness.engine.late_read",
    "acklab.harness.engine.run_bundle",
    "acklab.harness.engine.runner",
)


class LabIntegrityError(HarnessError):
    """acklab's own verdict code was changed in this process (exit 4): no verdict can be trusted."""


def _roots() -> tuple[str, ...]:
    """Where the watched modules' own files lie (the harness's and the evidence's folders)."""
    found: set[str] = set()
    for package in ("acklab.harness", "acklab.evidence"):
        found |= {str(Path(p).resolve()) for p in importlib.import_module(package).__path__}
    return tuple(sorted(found))


def _functions(module: types.ModuleType) -> Iterator[tuple[str, Any]]:
    """(name, function) of every plain function the module holds, and of every method of the
    classes it defines."""
    for name, value in list(vars(module).items()):
        if isinstance(value, types.FunctionType):
            yield name, value
        elif isinstance(value, type) and value.__module__ == module.__name__:
            for attr, member in list(vars(value).items()):
                inner = member.__func__ if isinstance(member, staticmethod | classmethod) else member
                if isinstance(inner, types.FunctionType):
                    yield f"{name}.{attr}", inner


def _own(attr: str, function: Any, roots: tuple[str, ...]) -> bool:
    """Whether `function` was written in acklab's files; methods a decorator generates
    (dataclasses' ``__init__``, ``__repr__``...) are not, and are held to identity only."""
    if attr.rpartition(".")[2].startswith("__"):
        return True
    code = getattr(inspect.unwrap(function), "__code__", None)
    if code is None:
        return False
    filename = str(Path(code.co_filename).resolve()) if code.co_filename else ""
    return any(filename.startswith(root + "/") for root in roots)


def _snapshot() -> dict[str, tuple[types.ModuleType, dict[str, tuple[Any, Any]]]]:
    taken = {}
    for name in WATCHED:
        module = importlib.import_module(name)
        functions = {
            attr: (function, function.__code__)
            for attr, function in _functions(module)
            if function.__module__.startswith("acklab.")  # a library's function is not ours to vouch for
        }
        taken[name] = (module, functions)
    return taken


_ROOTS = _roots()
_SNAPSHOT = _snapshot()


def _current(module: types.ModuleType, attr: str) -> Any:
    owner, _, member = attr.rpartition(".")
    holder = vars(module).get(owner) if owner else module
    value = vars(holder).get(member) if holder is not None else None
    return value.__func__ if isinstance(value, staticmethod | classmethod) else value


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


def problems() -> list[str]:
    """Every way the watched modules differ from what acklab defined (empty when intact)."""
    found = []
    for name, (module, functions) in _SNAPSHOT.items():
        now = sys.modules.get(name)
        if now is not module and not _reimported(module, now, functions):
            found.append(f"sys.modules[{name!r}] is no longer acklab's module {name} (it was replaced)")
            continue
        for attr, (function, code) in functions.items():
            current = _current(module, attr)
            if current is not function:
                found.append(f"{name}.{attr} was rebound (it is no longer the function acklab defined)")
            elif function.__code__ is not code:
                found.append(f"{name}.{attr} had its code replaced (__code__)")
            elif not _own(attr, function, _ROOTS):
                found.append(f"{name}.{attr} is not defined in acklab's own files ({code.co_filename})")
    return found


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
