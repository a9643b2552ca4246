"""What an untrusted process may see of the lab's environment: an allowlist, never a denylist.

A confined process gets exactly: the `INHERITED` names of the lab's environment (the search
path for programs, the locale, the time zone), a private HOME and TMPDIR in its scratch
directory, the interpreter settings below, and its own variables (a served fixture's
database URL and signing secret, a spec's ``command.env``). A credential of the lab is never
among them, even when a caller passes one as "its own" (`CREDENTIALS` are dropped).

The flow also takes its credentials out of its own environment for as long as it runs
(`withheld`): the GitLab and model tokens once their clients hold them, the manifest key
held by `evidence.manifest_signature` instead. So nothing the flow starts — git included —
can inherit one, and ``/proc/<pid>/environ`` of a child shows none.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from pathlib import Path

from acklab.evidence import manifest_signature
from acklab.harness.procs.confinement import LAB_CREDENTIALS

# Inherited from the lab, when set: what programs need to start and to print text.
INHERITED = ("PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_MESSAGES", "LC_NUMERIC", "TZ")
# The lab's credentials, and libpq's: never passed to a confined process, whoever asks.
CREDENTIALS = LAB_CREDENTIALS | {"PGPASSWORD", "PGPASSFILE"}
# Taken out of the flow's own environment while it runs (their values live in the clients).
WITHHELD = tuple(sorted(CREDENTIALS - {"ACKLAB_MANIFEST_KEY", "PGPASSWORD", "PGPASSFILE"}))
PYTHON = {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1", "PYTHONUNBUFFERED": "1"}


def confined_env(own: Mapping[str, str], scratch: Path, *, user: str | None = None) -> dict[str, str]:
    """The whole environment of a confined process: inherited names, a private HOME and TMPDIR in
    `scratch`, the interpreter settings, then `own` — never a credential."""
    env = {name: os.environ[name] for name in INHERITED if name in os.environ}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.update(PYTHON)
    env.update(HOME=str(scratch / "home"), TMPDIR=str(scratch / "tmp"))
    if user:
        env.update(USER=user, LOGNAME=user)
    env.update({k: v for k, v in own.items() if k not in CREDENTIALS})
    return env


_VARIABLE = re.compile(r"\b[A-Z][A-Z0-9_]{2,}\b")


def unpassed(text: str, passed: Iterable[str]) -> list[str]:
    """Names of this process's environment that `text` (a confined process's output) mentions and the
    process was not given — neither inherited here nor among `passed` — credentials of the lab aside
    (they are never passed): the variables a service failed for want of."""
    given = {*INHERITED, *PYTHON, *passed, "HOME", "TMPDIR", "USER", "LOGNAME"}
    mentioned = set(_VARIABLE.findall(text))
    return sorted(n for n in mentioned if n in os.environ and n not in given and n not in CREDENTIALS)


def dropped(own: Mapping[str, str]) -> list[str]:
    """The names of `own` a confined process does not get (credentials of the lab)."""
    return sorted(k for k in own if k in CREDENTIALS)


@contextmanager
def withheld(names: tuple[str, ...] = WITHHELD) -> Iterator[None]:
    """Take `names` and the manifest key out of this process's environment for the block.

    The manifest key is held by `manifest_signature.holding`, so bundles written in the block are
    still signed; the tokens are read by their clients before the block starts. Everything is
    put back afterwards (a test process, or a Python caller, keeps its environment).
    """
    taken = {name: os.environ.pop(name) for name in names if name in os.environ}
    key = os.environ.pop(manifest_signature.KEY_VARIABLE, None)
    try:
        with ExitStack() as stack:
            if key:
                stack.enter_context(manifest_signature.holding(key.encode("utf-8")))
            yield
    finally:
        os.environ.update(taken)
        if key is not None:
            os.environ[manifest_signature.KEY_VARIABLE] = key
