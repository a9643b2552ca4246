"""The janitor: end and clean what a crashed lab left behind, following its open leases
(``acklab janitor`` is in `acklab.harness.cli.janitor`).

A lease is open when the journal holds its ``acquired`` entry and no ``released`` one. An
open lease whose owner (the lab process, by pid and start time) still runs is in use and
left alone; one whose owner is gone is cleaned according to what it names:

* ``process``: the process group is SIGKILLed — only if the pid still belongs to the very
  process that was started (its start time matches), never a reused pid;
* ``directory``: removed (a temporary SQLite database and its files);
* ``database``: dropped on its server (``DROP DATABASE ... WITH (FORCE)``);
* ``worktree``: a git worktree of the repair flow, removed with ``git worktree remove`` and
  its own entry taken from the repository's list — never ``git worktree prune``, and nothing of
  the repository when the worktree is gone and so cannot prove it (no hook or fsmonitor runs);
* ``proxy``: a proxy runs inside the lab's own process, so it ended with its owner.

The journal can be forged, so a lease is only believed when the resource proves it
(`harness.procs.lease_witness`): the process has the pid-file the lab wrote for the lease's token,
the directory lies in the lab's temp root and holds the token, the database is on the
loopback and carries the token in its comment. Anything else is refused and left alone
(exit 4), and no credential of the environment is ever sent to a host a lease names.

Each cleaned lease gets its ``released`` entry (``payload.outcome``, ``payload.by``).
Exit 0 when nothing is left, 4 when something could not be cleaned.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess  # nosec B404
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from acklab.evidence.clock import utcnow
from acklab.evidence.journal import Journal, JournalEntry
from acklab.harness.procs.lease_witness import WITNESSES, Witness, connect_postgres, inside_temp_root
from acklab.harness.procs.leases import same_process_alive

KILL_WAIT_S = 5.0
GIT_TIMEOUT_S = 60


@dataclass(frozen=True)
class Cleanup:
    """What the janitor did about one open lease."""

    run_id: str
    lease: str
    resource: str
    outcome: str
    ok: bool
    in_use: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "lease": self.lease,
            "resource": self.resource,
            "outcome": self.outcome,
            "ok": self.ok,
            "in_use": self.in_use,
        }


def open_leases(journal: Journal) -> list[JournalEntry]:
    """Every lease acquired and never released, oldest first."""
    found: list[JournalEntry] = []
    for run_id in journal.runs():
        acquired: dict[str, JournalEntry] = {}
        for entry in journal.history(run_id):
            if entry.kind != "lease":
                continue
            if entry.status == "acquired":
                acquired[entry.name] = entry
            elif entry.status == "released":
                acquired.pop(entry.name, None)
        found += acquired.values()
    return found


def owner_alive(payload: dict[str, Any]) -> bool:
    owner = payload.get("owner", {})
    if owner.get("host") not in (None, socket.gethostname()):
        return True  # another machine's lab: not ours to judge
    pid = owner.get("pid")
    return isinstance(pid, int) and same_process_alive(pid, owner.get("start_ticks"))


def _refused(what: str, why: str) -> tuple[str, bool]:
    return f"refused to touch {what}: {why}; left alone", False


def _proof(resource: str, token: Any, detail: dict[str, Any]) -> str | None:
    """None when the resource carries the lease's token; else why the janitor will not act."""
    witness: Witness | None = WITNESSES.get(resource)
    if witness is None:
        return None
    if not isinstance(token, str) or not token:
        return "the lease carries no token (forged, or written by an older acklab)"
    return witness.check(token, detail)


def _end_process(detail: dict[str, Any], token: Any = None) -> tuple[str, bool]:
    pid, ticks, pgid = detail.get("pid"), detail.get("start_ticks"), detail.get("pgid")
    if not isinstance(pid, int) or not same_process_alive(pid, ticks):
        return f"process {pid} had already ended", True
    if not isinstance(ticks, int):
        return _refused(f"process {pid}", "the lease does not name its start time")
    why = _proof("process", token, detail)
    if why is not None:
        return _refused(f"process {pid}", why)
    if isinstance(pgid, int) and pgid != pid:
        return _refused(f"process {pid}", f"the lease names another process group ({pgid})")
    try:
        if isinstance(pgid, int) and pgid == pid:
            os.killpg(pgid, signal.SIGKILL)  # it leads its own session: end every child too
        else:
            os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return f"process {pid} had already ended", True
    except PermissionError as exc:
        return f"cannot kill process {pid}: {exc}", False
    deadline = time.monotonic() + KILL_WAIT_S
    while same_process_alive(pid, ticks) and time.monotonic() < deadline:
        time.sleep(0.02)
    if same_process_alive(pid, ticks):
        return f"process {pid} survived SIGKILL for {KILL_WAIT_S} s", False
    return f"killed process group {pgid}" if pgid == pid else f"killed process {pid}", True


def _end_directory(detail: dict[str, Any], token: Any = None) -> tuple[str, bool]:
    path = Path(str(detail.get("path", "")))
    if not path.is_absolute():
        return _refused(repr(str(path)), "not an absolute path")
    if not os.path.lexists(path):
        return f"{path} was already removed", True
    outside = inside_temp_root(path)
    if outside is not None:
        return _refused(str(path), outside)
    why = _proof("directory", token, detail)
    if why is not None:
        return _refused(str(path), why)
    shutil.rmtree(path, ignore_errors=True)
    return (f"removed {path}", True) if not path.exists() else (f"could not remove {path}", False)


def _end_database(detail: dict[str, Any], token: Any = None) -> tuple[str, bool]:
    import psycopg
    from psycopg import sql

    name = str(detail.get("name") or "")
    if not name.startswith(("acklab_", "t_")):
        return _refused(f"database {name!r}", "not one the lab creates (acklab_*, t_*)")
    why = _proof("database", token, detail)
    if why is not None:
        return _refused(f"database {name!r}", why)
    try:
        with connect_postgres(detail) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
    except (PermissionError, psycopg.Error) as exc:
        return f"could not drop database {name!r}: {exc}", False
    return f"dropped database {name!r}", True


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[str] | None:
    # An argv list, never a shell; and no hook or fsmonitor of the repository a lease names runs.
    argv = ["git", "-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "-C", str(repo), *args]
    try:
        return subprocess.run(  # nosec B603
            argv, capture_output=True, text=True, timeout=GIT_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None


def _end_worktree(detail: dict[str, Any], token: Any = None) -> tuple[str, bool]:
    path, tmp, repo = (Path(str(detail.get(k, ""))) for k in ("path", "tmp", "repo"))
    if not (path.is_absolute() and tmp.is_absolute() and repo.is_absolute()):
        return _refused(repr(str(path)), "the lease names a relative path")
    if not os.path.lexists(tmp):
        # Nothing carries the token any more, so nothing proves the repository's list entry is
        # the lab's: the repository (a lease may name any) is left alone, its list included.
        return (
            f"worktree {path} was already removed; {repo}'s worktree list is left alone "
            f"(nothing left proves the entry is the lab's; `git -C {repo} worktree prune` forgets it)",
            True,
        )
    why = _proof("worktree", token, detail)
    if why is not None:
        return _refused(f"worktree {path}", why)
    _git(repo, "worktree", "remove", "--force", str(path))
    shutil.rmtree(tmp, ignore_errors=True)
    # Only this worktree's entry, never `git worktree prune` (which forgets every missing
    # worktree of the repository, the lab's or not).
    _forget(repo, path)
    if tmp.exists():
        return f"could not remove {tmp}", False
    listed = _git(repo, "worktree", "list", "--porcelain")
    if listed is not None and f"worktree {path}\n" in listed.stdout + "\n":
        return f"removed {tmp}, but {repo} still lists the worktree {path}", False
    return f"removed worktree {path} (and from {repo}'s worktree list)", True


def _forget(repo: Path, path: Path) -> None:
    """Remove the repository's administrative entry of the worktree at `path` (proven the lab's),
    when `git worktree remove` left it: the one whose ``gitdir`` points at ``path/.git``."""
    common = _git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir")
    if common is None or common.returncode != 0:
        return
    admin = Path(common.stdout.strip()) / "worktrees"
    with contextlib.suppress(OSError):
        for entry in admin.iterdir():
            gitdir = entry / "gitdir"
            if (
                not entry.is_symlink()
                and gitdir.is_file()
                and Path(gitdir.read_text().strip()) == path / ".git"
            ):
                shutil.rmtree(entry, ignore_errors=True)


def _unmark(entry: JournalEntry) -> None:
    """Remove the token the lab left beside a resource it has now cleaned (its pid-file)."""
    witness = WITNESSES.get(str(entry.payload.get("resource")))
    token, detail = entry.payload.get("token"), entry.payload.get("detail")
    if witness is not None and isinstance(token, str) and token and isinstance(detail, dict):
        witness.unmark(token, detail)


def clean(entry: JournalEntry) -> tuple[str, bool]:
    """End what one open lease names, once the resource proves it is the lab's; (outcome, ok)."""
    resource = entry.payload.get("resource")
    detail = entry.payload.get("detail", {})
    token = entry.payload.get("token")
    if not isinstance(detail, dict):
        return f"the lease {entry.name!r} names nothing readable: left alone", False
    if resource == "process":
        return _end_process(detail, token)
    if resource == "directory":
        return _end_directory(detail, token)
    if resource == "database":
        return _end_database(detail, token)
    if resource == "worktree":
        return _end_worktree(detail, token)
    if resource == "proxy":
        return "the proxy ran inside its owner's process and ended with it", True
    return f"unknown resource {resource!r}: left alone", False


def sweep(journal: Journal, *, dry_run: bool = False) -> list[Cleanup]:
    """Clean every open lease whose owner is gone; record each release in the journal."""
    done: list[Cleanup] = []
    for entry in open_leases(journal):
        resource = str(entry.payload.get("resource"))
        if owner_alive(entry.payload):
            done.append(
                Cleanup(entry.run_id, entry.name, resource, "its lab is still running", True, in_use=True)
            )
            continue
        if dry_run:
            done.append(Cleanup(entry.run_id, entry.name, resource, "would clean (dry run)", True))
            continue
        outcome, ok = clean(entry)
        if ok:
            _unmark(entry)
            journal.record(
                run_id=entry.run_id,
                kind="lease",
                name=entry.name,
                status="released",
                ended_at=utcnow(),
                payload={**entry.payload, "outcome": outcome, "by": "janitor"},
            )
        done.append(Cleanup(entry.run_id, entry.name, resource, outcome, ok))
    return done
