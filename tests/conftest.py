"""Shared fixtures: a private PostgreSQL server for the whole run, a fresh database per test.

Test tiers (markers by what a test needs, derived from the fixtures it uses and checked
while it runs) live in tests/tiers.py.
"""

from __future__ import annotations

import gc
import json
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import httpcore  # noqa: F401  # loaded before any in-process pytester run: see below
import pytest

from acklab.harness.procs.pgtemp import PostgresServer, start_postgres

if TYPE_CHECKING:
    from acklab.harness.procs.clock import ShiftedClock
    from acklab.harness.services.redis import RedisServer

# pytester: pytest's own fixture for testing plugins (tests/pytest_plugin run user suites with it);
# pytest_plugins may only be set in the top-level conftest.
pytest_plugins = ("tests.tiers", "pytester")

# pytester's in-process runs (tests/pytest_plugin) put sys.modules back as they found it: a module
# first imported inside one is dropped after it. httpx imports httpcore only when it first makes a
# transport, and keeps the httpcore exception classes it first saw (HTTPCORE_EXC_MAP): when that
# happened inside such a run, every test after it on the worker got httpcore's own errors where
# httpx's belong (a fresh import made new classes). It showed once the files' order put
# test_evidence_stays.py before harness/test_sinks.py on one worker. httpcore is imported above.
BARE_NAMES = frozenset({"app", "harness", "evidence", "console", "flows"})
# The last `make bench`'s record of the suite: every test file's wall time (`file_walls`).
BENCH_RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results.json"


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    server = start_postgres()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_url(postgres_server: PostgresServer) -> str:
    """The URL of a fresh, empty PostgreSQL database of its own (psycopg 3 driver)."""
    return postgres_server.create_database()


def pytest_configure(config: pytest.Config) -> None:
    """Fewer cyclic garbage collections in the test processes (not in what they start): each
    worker builds some 2,000 test items and imports acklab whole, and with Python's default
    thresholds the collector walked those long-lived objects again and again. Back to back on
    two cores, the unit tier spent 5-8 % less CPU (91 -> 85 user CPU-s) and finished 2-4 s sooner."""
    gc.set_threshold(20_000, 20, 20)


def longest_first(results: Path = BENCH_RESULTS) -> dict[str, int]:
    """The test files of the last `make bench`'s record by rank, the slowest 0 (none when there
    is no readable record: every file is then placed by its number of tests alone)."""
    try:
        walls = json.loads(results.read_text(encoding="utf-8"))["file_walls"]
        ordered = sorted(walls.items(), key=lambda item: (-float(item[1]), str(item[0])))
        return {str(file): rank for rank, (file, _wall) in enumerate(ordered)}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slowest files first (as the last `make bench` recorded them), then those it did not
    record (new ones) by their number of tests, most first; each file's tests still together and
    in order. pytest-xdist (--dist loadfile) hands files out in this order (make passes
    --no-loadscope-reorder; its own order, by number of tests, put a long file with few tests
    last: in one `make test` a worker finished the rest tier 28 s after the other three, running
    tests/pipeline/test_release.py, one test, 33 s). Every worker reads the same record, so each
    collects the same order."""
    rank = longest_first()
    files = [item.nodeid.partition("::")[0] for item in items]
    count = Counter(files)
    place = {file: (rank.get(file, len(rank)), -count[file] if file not in rank else 0) for file in count}
    order = {id(item): place[file] for item, file in zip(items, files, strict=True)}
    items.sort(key=lambda item: order[id(item)])


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection built lives as long as the session: out of the collector's reach."""
    gc.collect()
    gc.freeze()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """One import name: nothing of acklab may have been imported under a bare top-level name
    (``evidence``, ``app``...) — that would be a second copy of the module, with its own state."""
    bare = sorted(name for name in sys.modules if name.split(".")[0] in BARE_NAMES)
    if bare:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        sys.stderr.write(f"\nacklab modules imported under a bare name (import acklab.<name>): {bare}\n")


@pytest.fixture
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """Debian's redis-server on a free port and a directory of its own, as the lab starts it."""
    from acklab.harness.ports import free_port
    from acklab.harness.services.redis import RedisServer

    root = tmp_path_factory.mktemp("redis")
    server = RedisServer(free_port(), root, root)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def shifted_clock() -> Iterator[ShiftedClock]:
    """A run's shifted clock (libfaketime), at offset 0; removed afterwards."""
    from acklab.harness.procs.clock import ShiftedClock

    clock = ShiftedClock.create()
    try:
        yield clock
    finally:
        clock.close()
