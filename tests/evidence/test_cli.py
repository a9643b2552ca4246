import json

from acklab.evidence.journal import Journal, journal_path
from tests.evidence.factories import write_run_bundle


def test_verify_an_intact_bundle_and_an_evidence_directory(tmp_path, acklab):
    write_run_bundle(tmp_path / "out/r1", "r1", {"lost-ack": [(0, "pass")]})
    write_run_bundle(tmp_path / "out/r2", "r2", {"replay": [(0, "pass")]})
    code, out, _ = acklab("evidence", "verify", tmp_path / "out/r1")
    assert (code, out.strip()) == (0, f"{tmp_path / 'out/r1'}: intact")
    code, out, _ = acklab("evidence", "verify", tmp_path / "out")
    assert code == 0
    assert out.count(": intact\n") == 2


def test_a_one_byte_change_exits_7_naming_the_file_and_the_bundle(tmp_path, acklab):
    write_run_bundle(tmp_path / "out/r1", "r1", {"lost-ack": [(0, "pass")]})
    write_run_bundle(tmp_path / "out/r2", "r2", {"replay": [(0, "pass")]})
    trial = tmp_path / "out/r2/trials/replay-0000.json"
    data = bytearray(trial.read_bytes())
    data[10] ^= 1
    trial.write_bytes(bytes(data))
    (tmp_path / "out/r2/incidents/replay.json").unlink()
    (tmp_path / "out/r2/notes.txt").write_text("added later")
    code, out, err = acklab("evidence", "verify", tmp_path / "out")
    assert code == 7
    assert f"{tmp_path / 'out/r1'}: intact" in out
    assert f"{tmp_path / 'out/r2'}: NOT INTACT" in out
    for line in ("changed: trials/replay-0000.json", "missing: incidents/replay.json", "extra: notes.txt"):
        assert line in out
    assert "1 of 2 bundle(s) failed" in err
    code, out, _ = acklab("evidence", "verify", tmp_path / "out/r2", "--json")
    assert code == 7
    [result] = json.loads(out)
    assert result["changed"] == ["trials/replay-0000.json"]


def test_a_bundle_without_manifest_is_incomplete(tmp_path, acklab):
    bundle = write_run_bundle(tmp_path / "out/r1", "r1", {"lost-ack": [(0, "pass")]})
    (bundle / "manifest.json").unlink()
    code, out, _ = acklab("evidence", "verify", tmp_path / "out")
    assert code == 7
    assert "no manifest.json" in out


def test_verify_names_a_path_that_holds_no_bundle(tmp_path, acklab):
    code, _, err = acklab("evidence", "verify", tmp_path)
    assert code == 3
    assert "no bundle under" in err
    code, _, err = acklab("evidence", "verify", tmp_path / "nope")
    assert code == 3
    assert "does not exist" in err


def test_history_replays_a_run_as_a_table_and_as_json(tmp_path, acklab):
    with Journal(journal_path(tmp_path)) as journal:
        journal.record(
            run_id="run-1", kind="run", name="run-1", status="started", started_at="2026-01-01T00:00:00Z"
        )
        journal.record(
            run_id="run-1",
            kind="trial",
            name="lost-ack-0000",
            status="fail",
            started_at="2026-01-01T00:00:00Z",
            ended_at="2026-01-01T00:00:02.5Z",
        )
        journal.record(run_id="run-2", kind="run", name="run-2", status="started")
    code, out, _ = acklab("history", "run-1", "--evidence", tmp_path)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["#", "kind", "name", "status", "started", "ended", "duration"]
    assert lines[3].split()[1:4] == ["trial", "lost-ack-0000", "fail"]
    assert lines[3].endswith("2.50 s")
    code, out, _ = acklab("history", "run-1", "--evidence", tmp_path, "--json")
    assert [e["name"] for e in json.loads(out)] == ["run-1", "lost-ack-0000"]


def test_history_of_an_unknown_run_exits_3_listing_the_known_ones(tmp_path, acklab):
    with Journal(journal_path(tmp_path)) as journal:
        journal.record(run_id="run-1", kind="run", name="run-1", status="ok")
    code, _, err = acklab("history", "run-7", "--evidence", tmp_path)
    assert code == 3
    assert "unknown run id 'run-7'" in err
    assert "did you mean 'run-1'?" in err
    code, _, err = acklab("history", "x", "--evidence", tmp_path / "empty")
    assert code == 3
    assert "no journal at" in err


def test_sast_command_writes_a_valid_report(tmp_path, acklab):
    src = tmp_path / "bandit.json"
    src.write_text(json.dumps({"generated_at": "2026-01-01T00:00:00Z", "results": [], "errors": []}))
    code, _, err = acklab("evidence", "sast", src, "--out", tmp_path / "reports/gl-sast-report.json")
    assert code == 0
    assert "valid GitLab SAST 15.2.1" in err
    code, _, err = acklab("evidence", "sast", tmp_path / "missing.json", "--out", tmp_path / "x.json")
    assert code == 3
    assert "missing.json" in err


def test_help_explains_each_command(acklab):
    code, out, _ = acklab("evidence", "--help")
    assert code == 0
    for name in ("verify", "merge", "sast", "pull"):
        assert name in out
