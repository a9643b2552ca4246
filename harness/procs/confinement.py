"""The seam through which the lab starts untrusted code confined: what a sandbox must offer.

Code of a checkout under repair (a served fixture, a user's ``command:`` service, a test run)
is hostile until proven otherwise. The harness does not know how to confine it; it asks a
`Confinement` to prepare a `Confined` place for one checkout — a private copy of it and a
scratch directory, both writable by the confined process only — and to turn each launch
(argv, environment, working directory) into the confined one. `LeasedProcess._spawn` applies
it when given one. The implementation lives outside the harness (``acklab.flows.sandbox``:
an unprivileged user, bubblewrap); the CLI installs it as the provider (`install_provider`),
so that ``acklab run --checkout DIR`` confines what it serves as the repair flow does.

A launch's ``env`` holds the process's *own* variables only (its database URL, its signing
secret, a spec's ``command.env``): the confinement adds its base (PATH, locale, a private
HOME and TMPDIR) and never passes the lab's credentials, whatever the caller put there. A
process the lab starts unconfined (a user's own ``command:`` on their own code) gets the lab's
environment without those credentials (`unconfined_env`).

Its network is its own (`Network`): ``loopback`` for checks (nothing reachable), `Bridged` for
served code — the lab reaches it on the ports it serves and it reaches the lab's ports the
launch names (its database server, the sinks), through a bridge the lab owns.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol
from urllib.parse import urlsplit

from acklab.evidence.exitcodes import ExitCode
from acklab.harness.errors import HarnessError


@dataclass(frozen=True)
class Bridged:
    """A network namespace of its own, bridged by the lab: the lab reaches the process on the loopback
    ports it `serves` (the same numbers on the host's loopback and inside), and the process reaches
    the lab's loopback ports in `reaches` (its database server, the sinks) — nothing else of the host.
    A sandbox that cannot make a namespace serves it on the host's network and says so (`describe`)."""

    serves: tuple[int, ...] = ()
    reaches: tuple[int, ...] = ()


# loopback: a namespace of its own with nothing reachable (checks); Bridged: served code.
Network = Literal["loopback"] | Bridged
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
DEFAULT_PORTS = {"postgresql": 5432, "redis": 6379, "http": 80, "https": 443, "smtp": 25}


# The lab's credentials: never in the environment of code it starts, confined or not.
LAB_CREDENTIALS = frozenset(
    {
        "ACKLAB_MANIFEST_KEY",
        "ACKLAB_LLM_API_KEY",
        "GITLAB_TOKEN",
        "DUO_WORKFLOW_GIT_HTTP_PASSWORD",  # a GitLab Duo flow's OAuth token, for git
        "CI_JOB_TOKEN",
        "CI_JOB_JWT",
        "CI_JOB_JWT_V1",
        "CI_JOB_JWT_V2",
        "CI_REGISTRY_PASSWORD",
        "CI_DEPLOY_PASSWORD",
        "CI_DEPENDENCY_PROXY_PASSWORD",
        "CI_REPOSITORY_URL",  # https://gitlab-ci-token:<job token>@...
        "OPENAI_API_KEY",
    }
)


def unconfined_env(own: Mapping[str, str]) -> dict[str, str]:
    """The environment of a process the lab starts unconfined (the user's own service on their own
    code): the lab's, without its credentials, then the process's `own` variables as given."""
    env = {k: v for k, v in os.environ.items() if k not in LAB_CREDENTIALS}
    env.update(own)
    return env


def loopback_ports(*urls: str | None) -> tuple[int, ...]:
    """The loopback ports `urls` name (database, sink or service URLs; others and file URLs: none)."""
    found = set()
    for url in urls:
        if not url:
            continue
        try:
            parts = urlsplit(url)
            host, port = parts.hostname, parts.port
        except ValueError:
            continue
        if host is None or not (host in LOOPBACK_HOSTS or host.startswith("127.")):
            continue
        scheme = parts.scheme.split("+", 1)[0]
        port = port or DEFAULT_PORTS.get(scheme)
        if port:
            found.add(port)
    return tuple(sorted(found))


@dataclass(frozen=True)
class Launch:
    """One process to start: argv (never a shell), its own environment, where it runs."""

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    cwd: Path | None = None


class Confined(Protocol):
    """A place prepared for one checkout: its private copy and scratch directory."""

    @property
    def root(self) -> Path:
        """The private copy of the checkout (what the confined process runs and may write)."""
        ...

    @property
    def scratch(self) -> Path:
        """A fresh private directory (HOME and TMPDIR of the process, its SQLite database)."""
        ...

    def launch(self, launch: Launch, *, network: Network = "loopback") -> Launch:
        """The confined form of `launch` (a sandbox's argv around it, the allowlisted env)."""
        ...

    def changed(self) -> list[str]:
        """Files of the copy that no longer hold what was copied (the confined code rewrote them)."""
        ...

    def close(self) -> None:
        """Remove the copy and the scratch directory."""
        ...


class Confinement(Protocol):
    """How untrusted processes are confined; `name` is recorded wherever a run says how it ran."""

    @property
    def name(self) -> str:
        """The mode (``bubblewrap+user``, ``none``...)."""
        ...

    def prepare(self, checkout: Path, *, label: str) -> Confined:
        """A private copy of `checkout` and a scratch directory for it."""
        ...

    @property
    def own_network(self) -> bool:
        """Whether confined code runs in a network namespace of its own (False: the host's network)."""
        ...

    def describe(self) -> str:
        """One line: what this confinement keeps the code from (and what it does not)."""
        ...


class ConfinementUnavailable(HarnessError):
    """Untrusted code would run unconfined: refused (exit 5) unless the caller said --unsandboxed."""

    exit_code = ExitCode.REFUSED


# (unsandboxed, directories the confined code must not see: the evidence) -> the confinement
Provider = Callable[[bool, tuple[Path, ...]], Confinement]
_PROVIDER: list[Provider] = []


def install_provider(provider: Provider) -> None:
    """Make `provider` the one `provide` asks (the CLI installs the sandbox's)."""
    _PROVIDER[:] = [provider]


def provide(*, unsandboxed: bool = False, hide: tuple[Path, ...] = ()) -> Confinement:
    """The installed provider's confinement; ConfinementUnavailable (exit 5) when none is installed."""
    if not _PROVIDER:
        raise ConfinementUnavailable(
            "--checkout serves code under test, which runs confined; no confinement is installed in this "
            "process (the acklab command installs its sandbox; from Python pass "
            "RunOptions(confinement=acklab.flows.sandbox.choose()))"
        )
    return _PROVIDER[0](unsandboxed, hide)
