"""What the code under repair did to its own files while it ran: every place watched until closed.

A patch that rewrites its file while it is served or tested (to look different afterwards,
or to leave another file to be published) only reaches its private copy. That is already
harmless — publishing builds the commit from the approved diff — but it is hostile, and the
flow refuses it (exit 5): `Watched` wraps a confinement and notes, when each place is closed,
which copied files no longer hold what was copied.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from acklab.harness.procs.confinement import Confined, Confinement, Launch, Network


@dataclass
class _WatchedPlace:
    inner: Confined
    label: str
    watch: Watched

    @property
    def root(self) -> Path:
        return self.inner.root

    @property
    def scratch(self) -> Path:
        return self.inner.scratch

    def launch(self, launch: Launch, *, network: Network = "loopback") -> Launch:
        return self.inner.launch(launch, network=network)

    def changed(self) -> list[str]:
        return self.inner.changed()

    def close(self) -> None:
        self.watch.tampered += [f"{name} ({self.label})" for name in self.inner.changed()]
        self.inner.close()


@dataclass
class Watched:
    """A confinement whose places say, when closed, what the code in them rewrote (`tampered`)."""

    inner: Confinement
    tampered: list[str] = field(default_factory=list)
    name: str = ""

    def __post_init__(self) -> None:
        self.name = self.inner.name

    @property
    def own_network(self) -> bool:
        return self.inner.own_network

    def describe(self) -> str:
        return self.inner.describe()

    def prepare(self, checkout: Path, *, label: str) -> Confined:
        return _WatchedPlace(self.inner.prepare(checkout, label=label), label, self)
