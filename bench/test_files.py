"""Where a test session's time goes, file by file: what ``bench.pytest_timing`` records.

For every test file a session ran: its wall time (setup, call and teardown of each test, the
fixtures it started included), its CPU time (user + system of the test process and of the
children it waited for — a server the test started and stopped counts; one that daemonised,
as PostgreSQL's does, does not), the fixtures whose setup took longest and the programs it
started (``runuser -- initdb`` is counted as ``initdb``, ``python -m uvicorn`` as such). Under
pytest-xdist each worker records its own share and the controller adds the shares up, with
each worker's busy time and when it finished: a worker that finishes long after the others is
a file that serialised on it (``--dist loadfile``), the tail a rebalance must cut.

One record per session kind (the suite, the unit tier, the rest), kept in
``bench/.test-timing.json`` beside the session's totals; ``python -m bench`` puts the slowest
files of the last ``make test`` into docs/performance.md.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

SLOWEST = 30
FIXTURES_KEPT = 5
PROGRAMS_KEPT = 8
# Setting up a fixture faster than this is not where the time goes: not recorded by name.
FIXTURE_FLOOR_S = 0.05
_INTERPRETERS = ("python", "python3", "pypy3")
SPAWNS = frozenset({"subprocess.Popen", "os.posix_spawn", "os.exec", "os.spawn", "os.system"})
_WRAPPERS = frozenset({"runuser", "sudo", "su", "setsid", "env", "nice", "timeout", "nohup", "unshare"})


def cpu_seconds() -> float:
    """User + system CPU of this process and of its children that were waited for."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def command_of(event: str, args: tuple[Any, ...]) -> list[str] | None:
    """The argv of a process-start audit event (see the audit events table), None for any other event."""
    if event not in SPAWNS:
        return None
    if event == "os.system":
        return str(args[0]).split()
    command = args[2] if event == "os.spawn" else args[1]
    if isinstance(command, str | bytes | os.PathLike):
        command = [command]
    return [os.fsdecode(part) for part in command or ()]


def program_of(argv: Sequence[str]) -> str:
    """A short name for what a process started with `argv` runs: the program, through a wrapper
    (``runuser -u postgres -- initdb`` is ``initdb``), ``python -m X`` for a module."""
    i = 0
    while i < len(argv) - 1 and os.path.basename(argv[i]) in _WRAPPERS:
        rest = list(argv[i + 1 :])
        # The wrapped command follows `--`, or the wrapper's options (and env's NAME=VALUE).
        skip = (
            rest.index("--") + 1
            if "--" in rest
            else next((k for k, a in enumerate(rest) if not a.startswith("-") and "=" not in a), len(rest))
        )
        i += 1 + skip
    if i >= len(argv):
        return os.path.basename(argv[0]) if argv else "?"
    name = os.path.basename(argv[i])
    if not name.startswith(_INTERPRETERS):
        return name
    for arg in argv[i + 1 :]:  # the interpreter's options, up to what it runs
        if arg == "-m" or arg.startswith("-m"):
            module = arg[2:] or next(iter(argv[argv.index(arg) + 1 :]), "?")
            return f"python -m {module}"
        if arg.startswith("-c"):
            return "python -c"
        if not arg.startswith("-"):
            return f"python {os.path.basename(arg)}"
    return "python"


@dataclass
class FileTime:
    """One test file's share of a session (one worker's, or the sum of them)."""

    tests: int = 0
    wall_s: float = 0.0
    cpu_s: float = 0.0
    fixtures: dict[str, float] = field(default_factory=dict)  # setup seconds by fixture name
    programs: dict[str, int] = field(default_factory=dict)  # processes started, by program
    first_s: float | None = None  # epoch seconds its first test started, its last ended
    last_s: float | None = None
    workers: list[str] = field(default_factory=list)

    def add(self, other: FileTime) -> None:
        self.tests += other.tests
        self.wall_s += other.wall_s
        self.cpu_s += other.cpu_s
        for name, s in other.fixtures.items():
            self.fixtures[name] = self.fixtures.get(name, 0.0) + s
        for name, n in other.programs.items():
            self.programs[name] = self.programs.get(name, 0) + n
        firsts = [x for x in (self.first_s, other.first_s) if x is not None]
        lasts = [x for x in (self.last_s, other.last_s) if x is not None]
        self.first_s, self.last_s = min(firsts, default=None), max(lasts, default=None)
        self.workers = sorted({*self.workers, *other.workers})

    def as_json(self) -> dict[str, Any]:
        return {
            "tests": self.tests,
            "wall_s": self.wall_s,
            "cpu_s": self.cpu_s,
            "fixtures": self.fixtures,
            "programs": self.programs,
            "first_s": self.first_s,
            "last_s": self.last_s,
            "workers": self.workers,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> FileTime:
        return cls(
            tests=int(doc.get("tests", 0)),
            wall_s=float(doc.get("wall_s", 0.0)),
            cpu_s=float(doc.get("cpu_s", 0.0)),
            fixtures={str(k): float(v) for k, v in doc.get("fixtures", {}).items()},
            programs={str(k): int(v) for k, v in doc.get("programs", {}).items()},
            first_s=doc.get("first_s"),
            last_s=doc.get("last_s"),
            workers=[str(w) for w in doc.get("workers", [])],
        )


@dataclass
class Recorder:
    """One process's record while its tests run: the file of the test on the stack, and what
    each file cost. `worker` names the xdist worker ("main" when there is none)."""

    worker: str = "main"
    files: dict[str, FileTime] = field(default_factory=dict)
    current: str | None = None
    busy_s: float = 0.0
    finished_s: float | None = None

    def file(self, path: str) -> FileTime:
        found = self.files.get(path)
        if found is None:
            found = self.files[path] = FileTime(workers=[self.worker])
        return found

    def test_done(self, path: str, started: float, wall_s: float, cpu_s: float) -> None:
        entry = self.file(path)
        entry.tests += 1
        entry.wall_s += wall_s
        entry.cpu_s += cpu_s
        entry.first_s = started if entry.first_s is None else min(entry.first_s, started)
        entry.last_s = started + wall_s
        self.busy_s += wall_s
        self.finished_s = started + wall_s

    def fixture_done(self, name: str, seconds: float) -> None:
        if self.current is not None and seconds >= FIXTURE_FLOOR_S:
            fixtures = self.file(self.current).fixtures
            fixtures[name] = fixtures.get(name, 0.0) + seconds

    def started(self, argv: Sequence[str]) -> None:
        if self.current is not None:
            programs = self.file(self.current).programs
            name = program_of(argv)
            programs[name] = programs.get(name, 0) + 1

    def share(self) -> dict[str, Any]:
        """What a worker hands the controller (JSON: it crosses xdist's channel)."""
        return {
            "worker": self.worker,
            "busy_s": self.busy_s,
            "finished_s": self.finished_s,
            "files": {path: entry.as_json() for path, entry in self.files.items()},
        }


def combine(shares: Iterable[dict[str, Any]], started_s: float) -> dict[str, Any]:
    """The session's record from the workers' shares: every file (slowest first, by wall time),
    each worker's busy time and when it finished (seconds after `started_s`), and the fixtures
    whose setup cost most over the whole session."""
    files: dict[str, FileTime] = {}
    workers = []
    for share in shares:
        for path, doc in share.get("files", {}).items():
            files.setdefault(path, FileTime()).add(FileTime.from_json(doc))
        finished = share.get("finished_s")
        workers.append(
            {
                "worker": share.get("worker", "?"),
                "busy_s": round(float(share.get("busy_s", 0.0)), 1),
                "finished_s": round(finished - started_s, 1) if finished else None,
            }
        )
    fixtures: dict[str, float] = {}
    for entry in files.values():
        for name, s in entry.fixtures.items():
            fixtures[name] = fixtures.get(name, 0.0) + s
    ordered = sorted(files.items(), key=lambda kv: -kv[1].wall_s)
    return {
        "serial_s": round(sum(e.wall_s for e in files.values()), 1),
        "cpu_s": round(sum(e.cpu_s for e in files.values()), 1),
        "workers": sorted(workers, key=lambda w: str(w["worker"])),
        "fixtures": {k: round(v, 1) for k, v in sorted(fixtures.items(), key=lambda kv: -kv[1])[:20]},
        "files": [_summary(path, entry, started_s) for path, entry in ordered],
    }


def _summary(path: str, entry: FileTime, started_s: float) -> dict[str, Any]:
    fixtures = sorted(entry.fixtures.items(), key=lambda kv: -kv[1])[:FIXTURES_KEPT]
    programs = sorted(entry.programs.items(), key=lambda kv: (-kv[1], kv[0]))[:PROGRAMS_KEPT]
    return {
        "file": path,
        "tests": entry.tests,
        "wall_s": round(entry.wall_s, 2),
        "cpu_s": round(entry.cpu_s, 2),
        "fixtures": {k: round(v, 2) for k, v in fixtures},
        "programs": dict(programs),
        "ended_s": round(entry.last_s - started_s, 1) if entry.last_s else None,
        "workers": entry.workers,
    }


def slowest(records: Iterable[dict[str, Any]], n: int = SLOWEST) -> list[dict[str, Any]]:
    """The `n` slowest files over several sessions' records (`make test`: the unit tier and the rest)."""
    found = [f for record in records for f in record.get("files", [])]
    return sorted(found, key=lambda f: -float(f["wall_s"]))[:n]


def walls(records: Iterable[dict[str, Any]]) -> dict[str, float]:
    """Every file's wall time over several sessions' records, the slowest first (a file with tests
    in two sessions: their sum). tests/conftest.py hands the files out to the workers in this order."""
    found: dict[str, float] = {}
    for record in records:
        for f in record.get("files", []):
            found[str(f["file"])] = found.get(str(f["file"]), 0.0) + float(f["wall_s"])
    return {file: round(wall, 1) for file, wall in sorted(found.items(), key=lambda kv: (-kv[1], kv[0]))}


def worker_name(config: Any) -> str:
    """The xdist worker's id ("gw0"...), "main" without xdist."""
    return str(getattr(config, "workerinput", {}).get("workerid", "main"))
