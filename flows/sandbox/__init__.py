"""The sandbox: where code of a checkout under repair runs, out of reach of the lab.

Every process that runs such code — the served head and patched checkouts, verify's pytest,
ruff and bandit, the head's test collection — runs in a `Place` (a private copy of the
checkout and a scratch directory) under the best confinement this machine allows
(`modes`): bubblewrap and the unprivileged user ``acklab-sandbox`` (`account`) when the lab
is root, as CI is; bubblewrap alone in a user namespace otherwise; the user alone when there
is no bubblewrap. Its environment is built from an allowlist (`environment`): no credential
of the lab, no manifest key. A machine that can do none of these refuses (exit 5, naming what
to install) unless the caller says ``--unsandboxed``, which every record of the run states.

The harness starts processes through the small protocol of `acklab.harness.procs.confinement`;
`Sandbox` implements it, and `provider` is what the acklab command installs so that
``acklab run --checkout DIR`` serves that checkout confined too. What each mode keeps the code
from, and what it does not, is in docs/sandbox.md.
"""

from __future__ import annotations

from pathlib import Path

from acklab.flows.errors import SandboxUnavailable
from acklab.harness.procs.confinement import install_provider

from . import account
from .environment import confined_env, withheld
from .modes import (
    Sandbox,
    blocked_ancestor,
    interpreter_paths,
    is_root,
    library_paths,
    setpriv_path,
    usable_bwrap,
)
from .places import Place

__all__ = ["Place", "Sandbox", "choose", "confined_env", "install", "provider", "withheld"]

INSTALL_HINT = (
    "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; it needs unprivileged user "
    "namespaces when not run as root), run as root, or pass --unsandboxed to run the code under "
    "repair as your own user (every record of the run says so)"
)


def choose(*, unsandboxed: bool = False, hide: tuple[Path, ...] = ()) -> Sandbox:
    """The best sandbox this machine allows, hiding `hide` (the evidence) from the code; refused
    (SandboxUnavailable, exit 5) when there is none and `unsandboxed` is not given."""
    if unsandboxed:
        return Sandbox("none", hidden=tuple(hide))
    root = is_root()
    bwrap = usable_bwrap(root)
    if root:
        setpriv = setpriv_path()
        if setpriv is None:
            raise SandboxUnavailable(
                "running as root, the sandbox drops to an unprivileged user with setpriv, which is not "
                "installed (Debian: util-linux); install it, or pass --unsandboxed"
            )
        user = account.ensure()
        if bwrap is not None:
            return Sandbox("bubblewrap+user", user, bwrap, setpriv, tuple(hide))
        for path in (*interpreter_paths(), *library_paths()):
            blocked = blocked_ancestor(path, user)
            if blocked is not None:
                raise SandboxUnavailable(
                    f"without bubblewrap the code under repair runs as {user.name!r}, who cannot reach "
                    f"the interpreter {path} ({blocked} is closed to other users); install bubblewrap "
                    "(apt-get install bubblewrap), which binds the interpreter in, or use a Python "
                    "installed where other users can read it"
                )
        return Sandbox("user", user, None, setpriv, tuple(hide))
    if bwrap is not None:
        return Sandbox("bubblewrap", None, bwrap, None, tuple(hide))
    raise SandboxUnavailable(f"the code under repair cannot be sandboxed on this machine: {INSTALL_HINT}")


def provider(unsandboxed: bool, hide: tuple[Path, ...]) -> Sandbox:
    """`choose`, as `harness.procs.confinement` asks for it."""
    return choose(unsandboxed=unsandboxed, hide=hide)


def install() -> None:
    """Make this sandbox the harness's confinement (the acklab command calls it once)."""
    install_provider(provider)
