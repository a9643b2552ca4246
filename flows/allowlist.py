"""What a patched file may import: ``capabilities.imports`` of a flow spec, parsed once.

Entries name what may be imported, never a module wholesale unless it says so: ``from M import a,
b`` (those names of M: functions, classes, constants, and submodules of M named here) or
``import M`` (the module itself). Relative imports in the patched file are resolved against its
own package before they are looked up here, so entries are always absolute.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

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
