"""``acklab janitor``: end and clean what a crashed lab left behind, following its open leases.

A lease is open when the journal holds its ``acquired`` entry and no ``released`` one. An
open lease whose owner (the lab process, by pid and start time) still runs is in use and
left alone; one whose owner is gone is cleaned according to what it names:

* ``process``: the process group is SIGKILLed — only if the pid still belongs to the very
  process that was started (its start time matches), never a reused pid;
* ``directory``: removed (a temporary SQLite database and its files);
* ``database``: dropped on its server (``DROP DATABASE ... WITH (FORCE)``);
* ``worktree``: a git worktree of the repair flow, removed with ``git worktree remove`` and
  pruned from the repository's list — only when the token beside it matches the lease's;
* ``proxy``: a proxy runs inside the lab's own process, so it ended with its owner.

Each cleaned lease gets its ``released`` entry (``payload.outcome``, ``payload.by``).
Exit 0 when nothing is left, 4 when something could not be cleaned.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess  # nosec B404
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from acklab.evidence.bundle import utcnow
from acklab.evidence.exitcodes import ExitCode
from acklab.evidence.journal import Journal, JournalEntry, journal_path
from acklab.harness.leases import same_process_alive

KILL_WAIT_S = 5.0
GIT_TIMEOUT_S = 60
WORKTREE_MARKER = ".acklab-lease"  # written by flows.worktree beside each worktree it leases


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


def _end_process(detail: dict[str, Any]) -> tuple[str, bool]:
    pid, ticks, pgid = detail.get("pid"), detail.get("start_ticks"), detail.get("pgid")
    if not isinstance(pid, int) or not same_process_alive(pid, ticks):
        return f"process {pid} had already ended", True
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


def _end_directory(detail: dict[str, Any]) -> tuple[str, bool]:
    path = Path(str(detail.get("path", "")))
    if not path.name.startswith("acklab-"):
        return f"refused to remove {path}: not a directory the lab creates (acklab-*)", False
    if not path.exists():
        return f"{path} was already removed", True
    shutil.rmtree(path, ignore_errors=True)
    return (f"removed {path}", True) if not path.exists() else (f"could not remove {path}", False)


def _end_database(detail: dict[str, Any]) -> tuple[str, bool]:
    import psycopg
    from sqlalchemy.engine import make_url

    url = make_url(str(detail.get("url", "")))
    name = url.database or ""
    if not name.startswith(("acklab_", "t_")):
        return f"refused to drop database {name!r}: not one the lab creates", False
    try:
        with psycopg.connect(
            host=url.host or "127.0.0.1",
            port=url.port or 5432,
            user=url.username or "postgres",
            dbname="postgres",
            autocommit=True,
            connect_timeout=5,
        ) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    except psycopg.Error as exc:
        return f"could not drop database {name!r}: {exc}", False
    return f"dropped database {name!r}", True


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[str] | None:
    try:
        # git with an argv list, never a shell.
        return subprocess.run(  # nosec B603 B607
            ["git", "-C", str(repo), *args],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None


def _end_worktree(detail: dict[str, Any]) -> tuple[str, bool]:
    path, tmp, repo = (Path(str(detail.get(k, ""))) for k in ("path", "tmp", "repo"))
    if not tmp.name.startswith("acklab-") or path.parent != tmp:
        return f"refused to remove {path}: not a worktree the lab creates (acklab-*/checkout)", False
    if tmp.exists():
        marker = tmp / WORKTREE_MARKER
        try:
            found: str | None = marker.read_text(encoding="utf-8").strip()
        except OSError:
            found = None
        if not found or found != detail.get("token"):
            return f"refused to remove {path}: its token does not match the lease's", False
        _git(repo, "worktree", "remove", "--force", str(path))
        shutil.rmtree(tmp, ignore_errors=True)
    _git(repo, "worktree", "prune")
    listed = _git(repo, "worktree", "list", "--porcelain")
    if tmp.exists():
        return f"could not remove {tmp}", False
    if listed is not None and f"worktree {path}\n" in listed.stdout + "\n":
        return f"removed {tmp}, but {repo} still lists the worktree {path}", False
    return f"removed worktree {path} (and from {repo}'s worktree list)", True


def clean(entry: JournalEntry) -> tuple[str, bool]:
    """End what one open lease names; (outcome, ok)."""
    resource = entry.payload.get("resource")
    detail = entry.payload.get("detail", {})
    if resource == "process":
        return _end_process(detail)
    if resource == "directory":
        return _end_directory(detail)
    if resource == "database":
        return _end_database(detail)
    if resource == "worktree":
        return _end_worktree(detail)
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


@click.command("janitor", context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("out"),
    show_default=True,
    help="Evidence directory whose journal holds the leases.",
)
@click.option("--dry-run", is_flag=True, help="Say what would be cleaned; touch nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the cleanups as one JSON object on stdout.")
def janitor(*, out: Path, dry_run: bool, as_json: bool) -> int:
    """End the processes and remove the files and databases a crashed lab left behind."""
    path = journal_path(out)
    if not path.exists():
        done: list[Cleanup] = []
    else:
        with Journal(path) as journal:
            done = sweep(journal, dry_run=dry_run)
    for cleanup in done:
        mark = "in use" if cleanup.in_use else ("ok" if cleanup.ok else "FAILED")
        click.echo(f"{mark:7} {cleanup.lease} (run {cleanup.run_id}): {cleanup.outcome}", err=True)
    if not done:
        click.echo("acklab janitor: no open leases", err=True)
    failed = [c for c in done if not c.ok]
    if as_json:
        click.echo(json.dumps({"cleaned": [c.as_dict() for c in done], "failed": len(failed)}))
    return int(ExitCode.LAB_ERROR if failed else ExitCode.OK)
