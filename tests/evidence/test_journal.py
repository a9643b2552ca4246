import json
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from acklab.evidence.errors import EvidenceInvalid
from acklab.evidence.journal import Journal, JournalError, journal_path

T0, T1 = "2026-01-01T00:00:00Z", "2026-01-01T00:00:01.250000Z"

# A writer that appends as fast as it can and reports each committed id on stdout.
WRITER = """
import sys
from pathlib import Path
from acklab.evidence.journal import Journal
path, run_id, count = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
with Journal(path) as journal:
    i = 0
    while count < 0 or i < count:
        row = journal.record(run_id=run_id, kind="delivery", name=str(i), status="ok",
                             payload={"seq": i, "pad": "x" * 512})
        print(row, flush=True)
        i += 1
"""


def writer(path, run_id, count):
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), run_id, str(count)],
        stdout=subprocess.PIPE,
        text=True,
    )


def test_records_replay_in_order_with_durations(tmp_path):
    with Journal(journal_path(tmp_path)) as journal:
        first = journal.record(run_id="r1", kind="run", name="r1", status="started", started_at=T0)
        journal.record(run_id="r2", kind="run", name="r2", status="started")
        second = journal.record(
            run_id="r1",
            kind="trial",
            name="lost-ack-0",
            status="fail",
            started_at=T0,
            ended_at=T1,
            payload={"violations": 1},
        )
        assert second > first
        assert journal.runs() == ["r1", "r2"]
        steps = journal.history("r1")
        assert [(s.kind, s.name, s.status) for s in steps] == [
            ("run", "r1", "started"),
            ("trial", "lost-ack-0", "fail"),
        ]
        assert steps[1].duration_ms == 1250.0
        assert steps[1].payload == {"violations": 1}
        assert steps[0].duration_ms is None
        assert json.loads(json.dumps(steps[1].as_dict()))["name"] == "lost-ack-0"
        assert journal.history("nope") == []
    assert (tmp_path / "journal.sqlite").exists()


@pytest.mark.parametrize(
    "statement",
    ["UPDATE entries SET status = 'pass'", "DELETE FROM entries", "DELETE FROM entries WHERE id = 1"],
)
def test_update_and_delete_are_refused_by_the_database_itself(tmp_path, statement):
    path = tmp_path / "j.sqlite"
    with Journal(path) as journal:
        journal.record(run_id="r", kind="run", name="r", status="fail")
    raw = sqlite3.connect(path)
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        raw.execute(statement)
    raw.close()
    with Journal(path) as journal:
        assert [e.status for e in journal.history("r")] == ["fail"]


def test_invalid_entry_names_the_field_and_is_not_written(tmp_path):
    with Journal(tmp_path / "j.sqlite") as journal:
        with pytest.raises(EvidenceInvalid, match="kind"):
            journal.record(run_id="r", kind="thing", name="x", status="ok")
        with pytest.raises(EvidenceInvalid, match="started_at"):
            journal.record(run_id="r", kind="trial", name="x", status="ok", started_at="yesterday")
        assert journal.runs() == []


def test_a_planted_secret_is_redacted_before_it_is_appended(tmp_path):
    with Journal(tmp_path / "j.sqlite", secrets=["whsec_planted"]) as journal:
        journal.record(
            run_id="r",
            kind="delivery",
            name="0 whsec_planted",
            status="ok",
            payload={"h": "a whsec_planted b"},
        )
        (entry,) = journal.history("r")
        assert entry.payload == {"h": "a [redacted] b"}
        assert entry.name == "0 [redacted]"
    assert b"whsec_planted" not in (tmp_path / "j.sqlite").read_bytes()


def test_a_file_that_is_not_a_journal_is_a_clear_error(tmp_path):
    path = tmp_path / "j.sqlite"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(JournalError, match="not a usable acklab journal") as info:
        Journal(path)
    assert info.value.exit_code == 4


def test_a_writer_killed_with_sigkill_leaves_a_journal_that_opens_and_resumes(tmp_path):
    path = tmp_path / "journal.sqlite"
    proc = writer(path, "killed", -1)
    assert proc.stdout is not None
    committed = [int(proc.stdout.readline()) for _ in range(200)]  # mid-stream, not at a boundary
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL
    assert (tmp_path / "journal.sqlite-wal").exists()  # the kill left an un-checkpointed WAL behind

    with Journal(path) as journal:
        assert journal.integrity() == "ok"
        steps = journal.history("killed")
        ids = [s.id for s in steps]
        assert set(committed) <= set(ids)  # every commit the writer reported survived
        assert [int(s.name) for s in steps] == list(range(len(steps)))  # no holes, no half rows
        resumed = journal.record(run_id="killed", kind="run", name="killed", status="interrupted")
        assert resumed > ids[-1]
        assert journal.history("killed")[-1].status == "interrupted"


def test_several_processes_append_concurrently_without_losing_a_row(tmp_path):
    path = tmp_path / "journal.sqlite"  # not there yet: the writers race to create it too
    procs = [writer(path, f"w{n}", 150) for n in range(4)]
    for proc in procs:
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0
        assert len(out.split()) == 150
    with Journal(path) as journal:
        assert sorted(journal.runs()) == ["w0", "w1", "w2", "w3"]
        for n in range(4):
            assert [s.name for s in journal.history(f"w{n}")] == [str(i) for i in range(150)]
        assert journal.integrity() == "ok"


def test_threads_share_one_journal(tmp_path):
    import threading

    with Journal(tmp_path / "j.sqlite") as journal:

        def work(n):
            for i in range(50):
                journal.record(run_id=f"t{n}", kind="observation", name=str(i), status="ok")

        threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert time.perf_counter() - start < 10
        assert sum(len(journal.history(f"t{n}")) for n in range(4)) == 200
