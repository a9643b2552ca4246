"""`acklab` with the scope guard's capability rule switched off, in a process of its own.

Tests that need a hostile proposal to get past the guard (to show what the approve gate
prints on a real terminal) run this under a pty::

    python -I -c "import sys; sys.path.insert(0, ROOT); from tests.flows.unguarded import main; main()" flow run ...
"""

from __future__ import annotations

import sys

from acklab.flows import capabilities


def no_capability_rule(source: str, *, path: str, imports: object, root: object = None) -> list[str]:
    return []


def main() -> None:
    capabilities.check = no_capability_rule  # the one rule this process does without
    from acklab.cli import main as acklab

    acklab(sys.argv[1:])


def no_python_rules(wt: object, path: str, spec: object) -> list[str]:
    """The guard without its rules on the patched Python file (capabilities, ruff): what decides then
    is the sandbox, the pinned schema and publishing from the approved diff."""
    return []


def main_without_rules() -> None:
    """`main`, with every rule on the patched file switched off."""
    from acklab.flows import guard

    guard._python_rules = no_python_rules
    main()
