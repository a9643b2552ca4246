"""Bad input is exit 3 naming the value, before anything is written; an unreachable database is a
lab error of its cells (exit 4) whose message keeps the password out."""

from __future__ import annotations

import json

import pytest

from acklab.harness.ports import free_port
from tests.harness.sweep.conftest import PASSWORD, acklab, every_byte_under, read, sweep_dir


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (("--target", "fixture:nope"), "'fixture:nope'"),
        (("--target", "fixture:live", "--target", "missing/shop.yaml"), "'missing/shop.yaml'"),
        (("--target", "fixture:live", "--experiment", "lost-akc"), "Did you mean 'lost-ack'?"),
        (
            ("--target", "fixture:live", "--db", f"mysql://u:{PASSWORD}@127.0.0.1/x"),
            "--db: got 'mysql://u:***@",
        ),
        (("--target", "fixture:live", "--experiment", "db-reset"), "no experiment can run"),
        (("--experiment", "lost-ack"), "--target: none given"),
    ],
)
def test_bad_input_is_exit_3_naming_it_and_nothing_is_written(tmp_path, capsys, argv, named):
    out = tmp_path / "out"
    assert acklab("sweep", *argv, "--trials", "1", "--out", str(out)) == 3
    err = capsys.readouterr().err
    assert named in err
    assert PASSWORD not in err
    assert not out.exists()


def test_resuming_an_unknown_sweep_is_exit_3(tmp_path, capsys):
    assert acklab("sweep", "--resume", "sweep-nope", "--out", str(tmp_path)) == 3
    assert "sweep-nope" in capsys.readouterr().err


def test_resuming_with_another_target_is_exit_3(tmp_path, capsys):
    out = tmp_path / "out"
    (out / "sweep-x").mkdir(parents=True)
    doc = {
        "schema": "acklab/sweep/v1",
        "sweep_id": "sweep-x",
        "status": "interrupted",
        "verdict": "error",
        "seed": 1,
        "trials_per_experiment": 1,
        "targets": ["fixture:live"],
        "databases": [{"label": "sqlite", "url": None}],
        "experiments": ["lost-ack"],
        "started_at": "2026-01-01T00:00:00Z",
        "ended_at": "2026-01-01T00:00:00Z",
        "runs": [],
        "cells": [],
    }
    (out / "sweep-x" / "sweep.json").write_text(json.dumps(doc))
    assert acklab("sweep", "--resume", "sweep-x", "--target", "fixture:unsafe", "--out", str(out)) == 3
    assert "--target fixture:unsafe differs" in capsys.readouterr().err


def test_an_unreachable_database_is_an_error_cell_exit_4_and_its_password_is_not_written(tmp_path, capsys):
    out = tmp_path / "out"
    db = f"postgresql+psycopg://acklab:{PASSWORD}@127.0.0.1:{free_port()}/nothing"
    code = acklab(
        "sweep", "--target", "fixture:live", "--db", db, "--db", "sqlite",
        "--experiment", "lost-ack", "--trials", "1", "--out", str(out), "--json",
    )  # fmt: skip
    assert code == 4
    captured = capsys.readouterr()
    assert PASSWORD not in captured.out + captured.err
    doc = read(sweep_dir(out) / "sweep.json")
    verdicts = {c["database"]: c["verdict"] for c in doc["cells"]}
    assert verdicts == {"sqlite": "pass", f"postgresql@127.0.0.1:{db.rsplit(':', 1)[1]}": "error"}
    (error,) = [c for c in doc["cells"] if c["verdict"] == "error"]
    assert "could not start" in error["reason"]
    assert ":***@" in error["reason"]
    assert doc["verdict"] == "error"
    assert [str(p) for p, data in every_byte_under(out) if PASSWORD.encode() in data] == []
