"""Leases: everything the lab starts is recorded in the journal, so nothing outlives a crash.

A lease is acquired (journal entry ``kind=lease, status=acquired``) before a resource is
used and released (``status=released``) when the lab is done with it. A process of the lab
that dies without releasing — kill -9, a power cut in CI — leaves the lease open, and
`acklab janitor` (`harness.procs.janitor`) ends and cleans what it names.

Processes are named by pid *and* start time (``/proc/<pid>/stat`` field 22), so a pid
the kernel has since reused is never mistaken for the lab's. Every lease carries a random
token that is also written beside the resource (`harness.procs.lease_witness`): the janitor acts
only on a resource that carries its lease's token, so a forged journal row moves nothing.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeAlias

from acklab.evidence.clock import utcnow
from acklab.evidence.journal import Journal, journal_path
from acklab.harness.procs.lease_witness import WITNESSES, new_token

Resource: TypeAlias = Literal["process", "proxy", "database", "directory", "worktree"]


def start_ticks(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot), or None when there is none."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    # Field 2 (the command) may hold spaces and parentheses: count from the last ")".
    fields = stat.rsplit(")", 1)[-1].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def same_process_alive(pid: int, ticks: int | None) -> bool:
    """Whether ``pid`` still runs and is the very process that started at ``ticks``."""
    now = start_ticks(pid)
    if now is None:
        return False
    if _is_zombie(pid):
        return False
    return ticks is None or now == ticks


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def this_process() -> dict[str, Any]:
    """The owner record of the calling process."""
    pid = os.getpid()
    return {"pid": pid, "start_ticks": start_ticks(pid), "host": socket.gethostname()}


@dataclass(frozen=True)
class Lease:
    """One resource the lab holds: its kind, a unique name, and how to find and end it."""

    resource: Resource
    name: str
    detail: dict[str, Any]
    owner: dict[str, Any] = field(default_factory=this_process)
    # Written beside the resource too (harness.procs.lease_witness): what the janitor checks.
    token: str = field(default_factory=new_token)

    def payload(self) -> dict[str, Any]:
        return {"resource": self.resource, "detail": self.detail, "owner": self.owner, "token": self.token}


class LeaseBook:
    """Acquires and releases leases in one run's journal (a no-op book when there is none)."""

    def __init__(self, journal: Journal | None, run_id: str) -> None:
        self.journal = journal
        self.run_id = run_id
        self.held: dict[str, Lease] = {}

    def acquire(self, resource: Resource, key: str, **detail: Any) -> Lease:
        lease = Lease(resource=resource, name=f"{resource}:{key}", detail=detail)
        witness = WITNESSES.get(resource)
        if self.journal is not None and witness is not None:
            # Marked before it is journaled: a lease the janitor can read is always provable.
            witness.mark(lease.token, lease.detail)
        if self.journal is not None:
            self.journal.record(
                run_id=self.run_id,
                kind="lease",
                name=lease.name,
                status="acquired",
                started_at=utcnow(),
                payload=lease.payload(),
            )
        self.held[lease.name] = lease
        return lease

    def detached(self) -> LeaseBook:
        """A book on the same journal and run, with a connection of its own: for a resource that
        outlives the run that made it (a setup's template, kept for a pytest session or a flow),
        released after this run's journal was closed. Close it with `close`."""
        if self.journal is None:
            return NO_LEASES
        # A lease names no secret; what the process remembered is redacted all the same.
        return LeaseBook(Journal(self.journal.path), self.run_id)

    def close(self) -> None:
        if self.journal is not None and self is not NO_LEASES:
            self.journal.close()

    def release(self, lease: Lease, *, outcome: str = "released by its owner") -> None:
        if self.held.pop(lease.name, None) is None:
            return
        witness = WITNESSES.get(lease.resource)
        if self.journal is not None and witness is not None:
            witness.unmark(lease.token, lease.detail)
        if self.journal is not None:
            self.journal.record(
                run_id=self.run_id,
                kind="lease",
                name=lease.name,
                status="released",
                ended_at=utcnow(),
                payload={**lease.payload(), "outcome": outcome},
            )


NO_LEASES = LeaseBook(None, "-")
_CURRENT: ContextVar[LeaseBook] = ContextVar("acklab_leases", default=NO_LEASES)


def current_book() -> LeaseBook:
    """The lease book of the run in progress (a no-op book outside a run)."""
    return _CURRENT.get()


@contextlib.contextmanager
def leasing(
    evidence_dir: Path | None, run_id: str, *, secrets: list[str] | None = None
) -> Iterator[LeaseBook]:
    """Make the run's journal the place where everything started below is leased.

    Tasks and threads started inside inherit it (context variables are copied).
    """
    journal = Journal(journal_path(evidence_dir), secrets=secrets) if evidence_dir is not None else None
    book = LeaseBook(journal, run_id)
    token = _CURRENT.set(book)
    try:
        yield book
    finally:
        _CURRENT.reset(token)
        # Leases still held stay open: what they name may still run, and the janitor ends it.
        if journal is not None:
            journal.close()
