"""Hostile input (docs/hostile-input.md): every bad file gets a clear error and the contract's exit code, never 1.

Deep nesting, billion laughs, oversized and oddly encoded files, through every command that
reads one: `validate`, `plan`, `run` (target and experiment specs), `flow run` (flow spec,
decisions), `replay`, `evidence verify/merge/sast`, `history`, `pages`. An unexpected
exception is an internal error (exit 4, traceback only under --debug); a missing dependency
names the package to install.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import click
import pytest

from acklab.evidence.bundle import atomic_write, dump_json, file_table
from acklab.evidence.extras import install_command, missing_module
from tests.hostile.conftest import billion_laughs, nested_json, nested_yaml, target_spec, write

DEEP = 20_000  # far past Python's recursion limit


def test_validate_refuses_a_deeply_nested_spec(tmp_path, acklab):
    spec = write(tmp_path / "deep.yaml", target_spec(event=nested_yaml(DEEP)))
    code, _, err = acklab("validate", spec)
    assert code == 3, err
    assert f"{spec}: nests deeper than 64 levels" in err
    assert "Traceback" not in err


def test_billion_laughs_under_event_is_refused_at_once(tmp_path, acklab):
    laughs = billion_laughs()
    spec = write(tmp_path / "laughs.yaml", target_spec(event="*lol9", before=laughs))
    for command in (["validate", spec], ["plan", "--target", spec]):
        code, _, err = acklab(*command)
        assert code == 3, err
        assert "expands to more than 100,000 values" in err
        assert acklab.seconds < 10  # it spun for over a minute before


def test_billion_laughs_under_an_unknown_key_is_refused_not_a_memory_error(tmp_path, acklab):
    spec = write(tmp_path / "laughs.yaml", target_spec(before=billion_laughs(), extra="surprise: *lol9\n"))
    code, _, err = acklab("validate", spec)
    assert code == 3, err
    assert "expands to more than" in err
    assert "MemoryError" not in err


@pytest.mark.parametrize(
    ("name", "content", "says"),
    [
        ("huge.yaml", None, "acklab reads at most 1.0 MiB"),
        ("utf16.yaml", "apiVersion: acklab/v1\n".encode("utf-16"), "is UTF-16; save it as UTF-8"),
        ("latin1.yaml", b"apiVersion: acklab/v1\nname: caf\xe9\n", "is not UTF-8 text (byte 31"),
        (
            "cycle.yaml",
            "apiVersion: acklab/v1\nkind: target\nevent: &e [*e]\n",
            "refers to a value that contains it",
        ),
        ("dup.yaml", "apiVersion: acklab/v1\nkind: target\nkind: flow\n", "the key 'kind' appears twice"),
        ("bigint.yaml", "apiVersion: acklab/v1\nseed: " + "9" * 5000 + "\n", "cannot read"),
        ("tag.yaml", "apiVersion: !!python/object/apply:os.system [id]\n", "is not valid YAML"),
        ("control.yaml", "apiVersion: acklab/v1\nname: a\x1b[31mb\n", "is not valid YAML"),
    ],
)
def test_odd_spec_files_are_exit_3_naming_the_file(tmp_path, acklab, name, content, says):
    if content is None:  # 2 MiB of comments, written in pieces
        path = tmp_path / name
        with path.open("w") as fh:
            for _ in range(2048):
                fh.write("#" * 1023 + "\n")
    else:
        path = write(tmp_path / name, content)
    code, _, err = acklab("validate", path)
    assert code == 3, err
    assert str(path) in err
    assert says in err, err


def test_run_with_a_nested_target_or_experiment_spec_is_exit_3(tmp_path, acklab):
    target = write(tmp_path / "deep-target.yaml", target_spec(event=nested_yaml(DEEP)))
    code, _, err = acklab("run", "--target", target, "--out", tmp_path / "out")
    assert code == 3, err
    experiment = write(
        tmp_path / "deep-experiment.yaml",
        "apiVersion: acklab/v1\nkind: experiment\nname: x\nuses: lost-ack\nparameters: " + nested_yaml(DEEP),
    )
    code, _, err = acklab("run", "--experiment", experiment, "--out", tmp_path / "out")
    assert code == 3, err
    assert "nests deeper than 64 levels" in err
    assert not (tmp_path / "out").exists()  # nothing was written


def test_run_parameters_outside_their_bounds_are_refused(tmp_path, acklab):
    code, _, err = acklab("run", "--time-compression", "1e-300", "--out", tmp_path / "out")
    assert code == 2, err
    assert "1e-300" in err
    spec = write(
        tmp_path / "slow.yaml",
        "apiVersion: acklab/v1\nkind: experiment\nname: slow\nuses: lost-ack\n"
        "parameters: {time_compression: 1.0e-300}\n",
    )
    code, _, err = acklab("run", "--experiment", spec, "--out", tmp_path / "out")
    assert code == 3, err
    assert "time_compression" in err
    code, _, err = acklab("run", "--trials", "100000000", "--out", tmp_path / "out")
    assert code == 2, err


def test_flow_spec_and_decisions_files_are_bounded(tmp_path, acklab):
    repo = Path(__file__).resolve().parents[2]
    flow = write(tmp_path / "deep-flow.yaml", nested_yaml(DEEP))
    code, _, err = acklab("flow", "run", flow, "--local", "--auto-approve")
    assert code == 3, err
    assert "nests deeper" in err
    decisions = write(tmp_path / "decisions.json", "[" + nested_json(DEEP) + "]")
    code, _, err = acklab("flow", "run", repo / "flows" / "repair.yaml", "--local", "--decisions", decisions)
    assert code == 3, err
    assert f"the decisions file {decisions}: nests deeper than 64 levels" in err


def test_replay_of_a_nested_incident_is_exit_3(tmp_path, acklab):
    incident = write(tmp_path / "incident.json", nested_json(DEEP))
    code, _, err = acklab("replay", incident)
    assert code == 3, err
    assert "nests deeper than 64 levels" in err


def _recompute_manifest(bundle: Path) -> None:
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["files"] = file_table(bundle)
    atomic_write(bundle / "manifest.json", dump_json(manifest))


def test_evidence_commands_answer_nested_documents_with_exit_7(tmp_path, acklab, evidence):
    bundle = evidence / "r1"
    write(bundle / "manifest.json", nested_json(DEEP))
    code, out, err = acklab("evidence", "verify", bundle)
    assert code == 7, err
    assert "nests deeper than 64 levels" in out
    # A nested run.json under a manifest recomputed over it: verify is fooled, merge is not crashed.
    other = evidence / "r2"
    write(other / "run.json", nested_json(DEEP))
    _recompute_manifest(other)
    code, _, err = acklab("evidence", "merge", other, "--out", tmp_path / "merged")
    assert code == 7, err
    assert "nests deeper" in err
    assert not (tmp_path / "merged").exists() or not any((tmp_path / "merged").iterdir())


def test_a_nested_scanner_report_is_exit_3(tmp_path, acklab):
    report = write(tmp_path / "bandit.json", nested_json(DEEP))
    code, _, err = acklab("evidence", "sast", report, "--out", tmp_path / "sast.json")
    assert code == 3, err
    assert not (tmp_path / "sast.json").exists()


def test_pages_over_a_nested_incident_builds_and_says_why(tmp_path, acklab, evidence):
    write(evidence / "r1" / "incidents" / "lost-ack.json", nested_json(DEEP))
    code, _, err = acklab("pages", "--evidence", evidence, "--out", tmp_path / "public")
    assert code == 0, err
    page = (tmp_path / "public" / "bundles" / "r1" / "index.html").read_text()
    assert "nests deeper than 64 levels" in page


def test_an_unexpected_exception_is_exit_4_with_the_traceback_only_under_debug(monkeypatch, evidence, acklab):
    def boom(*_: object) -> None:
        raise RuntimeError("the lab tripped")

    monkeypatch.setattr("acklab.evidence.cli.load_history", boom)
    code, _, err = acklab("history", "r1", "--evidence", evidence)
    assert code == 4, err
    assert "acklab: internal error: RuntimeError: the lab tripped; please report it" in err
    assert "Traceback" not in err
    code, _, err = acklab("--debug", "history", "r1", "--evidence", evidence)
    assert code == 4
    assert "Traceback (most recent call last)" in err

    def recurse(*_: object) -> None:
        recurse()

    monkeypatch.setattr("acklab.evidence.cli.load_history", recurse)
    code, _, err = acklab("history", "r1", "--evidence", evidence)
    assert code == 4, err  # never 1, whatever the exception
    assert "RecursionError" in err


def test_debug_is_read_from_the_command_line_and_from_acklab_debug(monkeypatch, evidence, acklab):
    """`--debug` is the root command's option (ACKLAB_DEBUG its environment variable), read from
    click's context: only options before the subcommand belong to it."""

    def boom(*_: object) -> None:
        raise RuntimeError("the lab tripped")

    monkeypatch.setattr("acklab.evidence.cli.load_history", boom)
    monkeypatch.setenv("ACKLAB_DEBUG", "1")
    code, _, err = acklab("history", "r1", "--evidence", evidence)
    assert code == 4
    assert "Traceback (most recent call last)" in err
    monkeypatch.setenv("ACKLAB_DEBUG", "0")
    code, _, err = acklab("history", "r1", "--evidence", evidence)
    assert code == 4
    assert "Traceback" not in err
    code, _, err = acklab("history", "--debug", "r1", "--evidence", evidence)
    assert code == 2, err  # not history's option: a usage error, nothing ran
    assert re.search(r"No such option:? '?--debug", err), err  # click 8.1 and 8.2 word it apart


@pytest.mark.parametrize(
    ("raised", "code"),
    [
        (lambda: click.ClickException("a plain click error"), 3),
        (lambda: click.FileError("spec.yaml", hint="permission denied"), 3),
        (lambda: click.BadParameter("not a number", param_hint="'--trials'"), 2),
    ],
    ids=["click-exception", "file-error", "bad-parameter"],
)
def test_no_click_error_exits_1(monkeypatch, evidence, acklab, raised, code):
    """click's own default for its errors is exit 1, the contract's "a verdict failed": a usage
    error is 2, any other error click raises is bad input, 3."""

    def fail(*_: object) -> None:
        raise raised()

    monkeypatch.setattr("acklab.evidence.cli.load_history", fail)
    got, _, err = acklab("history", "r1", "--evidence", evidence)
    assert got == code, err
    assert "Traceback" not in err


def test_a_missing_dependency_names_the_package_and_the_extra(monkeypatch, evidence, acklab):
    monkeypatch.setitem(sys.modules, "uvicorn", None)  # `import uvicorn` now fails
    code, _, err = acklab("console", "--evidence", evidence)
    assert code == 4, err
    assert "needs the Python package 'uvicorn'" in err
    assert "is not built yet" not in err
    assert install_command("dev") in missing_module(ModuleNotFoundError(name="playwright"))
    monkeypatch.setitem(sys.modules, "acklab.flows.cli", None)
    code, _, err = acklab("flow", "run", "x.yaml")
    assert code == 4, err
    assert "acklab's own module 'acklab.flows.cli' is missing" in err


def test_history_of_a_journal_with_a_nested_payload_is_exit_7(tmp_path, acklab):
    from acklab.evidence.journal import Journal

    out = tmp_path / "out"
    with Journal(out / "journal.sqlite") as journal:
        journal.record(run_id="r1", kind="note", name="n", status="ok", payload={"a": 1})
    # Forge a chain-consistent row whose payload nests deeply: the reader must not recurse.
    import sqlite3

    from acklab.evidence.chain import entry_hash

    db = sqlite3.connect(out / "journal.sqlite")
    prev = db.execute("SELECT entry_hash FROM entries ORDER BY id DESC LIMIT 1").fetchone()[0]
    payload = nested_json(DEEP)
    row = (2, "r1", "note", "deep", "ok", None, None, None, payload, "2026-01-01T00:00:00Z")
    db.execute(
        "INSERT INTO entries (id, run_id, kind, name, status, started_at, ended_at, duration_ms, payload,"
        " recorded_at, prev_hash, entry_hash) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
        (*row, prev, entry_hash(prev, row)),
    )
    db.commit()
    db.close()
    code, _, err = acklab("history", "r1", "--evidence", out)
    assert code == 7, err
    assert "nests deeper" in err
    shutil.rmtree(out)


def test_a_conflict_path_thousands_of_segments_deep_is_refused_and_the_message_stays_short(tmp_path, acklab):
    key = ".".join(["a"] * 5000)  # set_path would nest 5,000 objects: the body encoder would recurse
    spec = write(
        tmp_path / "deep-path.yaml", target_spec(extra=f'conflict:\n  set:\n    ? "{key}"\n    : 1\n')
    )
    code, out, err = acklab("validate", spec)
    assert code == 3, err[:500]
    assert "conflict.set" in out  # validate's verdict, problems included, is on stdout
    assert len(out + err) < 3000  # the offending value is quoted short, not whole
