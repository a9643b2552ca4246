"""The CLI contract: exit codes, messages that name the field and the fix, ``--json``'s shape."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from acklab.cli import main
from acklab.harness.ports import free_port
from tests.harness.conftest import SECRET, SECRET_ENV, target_doc, write_spec


def acklab(*argv: str) -> int:
    with pytest.raises(SystemExit) as exited:
        main(list(argv))
    return int(exited.value.code or 0)


def spec(tmp_path: Path, **changes: object) -> Path:
    doc = target_doc("shop", f"http://127.0.0.1:{free_port()}/hooks", f"sqlite:///{tmp_path}/shop.db")
    doc.update(changes)
    return write_spec(tmp_path / "shop.yaml", doc)


def test_a_missing_spec_file_is_exit_3(tmp_path, capsys):
    assert acklab("run", "--target", str(tmp_path / "nope.yaml")) == 3
    assert "nope.yaml" in capsys.readouterr().err


def test_a_bad_field_is_exit_3_naming_the_field_the_value_and_the_fix(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(SECRET_ENV, SECRET)
    path = spec(tmp_path, signing={"scheme": "hmac-sha256", "secret": f"env:{SECRET_ENV}"})
    assert acklab("run", "--target", str(path)) == 3
    err = capsys.readouterr().err
    assert "signing.scheme" in err
    assert "'hmac-sha256'" in err
    assert "use one of: standard, stripe, github, gitlab, shopify, slack, none" in err


def test_a_misspelt_field_gets_a_did_you_mean(tmp_path, capsys):
    doc = yaml.safe_load(spec(tmp_path).read_text())
    doc["delivery"] = {"timeout": 2}
    path = write_spec(tmp_path / "typo.yaml", doc)
    assert acklab("validate", str(path)) == 3
    assert "did you mean 'timeout_s'?" in capsys.readouterr().out  # the verdict is on stdout


def test_a_missing_secret_variable_is_exit_3_naming_it(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(SECRET_ENV, raising=False)
    assert acklab("run", "--target", str(spec(tmp_path))) == 3
    assert SECRET_ENV in capsys.readouterr().err


def test_a_remote_endpoint_is_refused_with_exit_5_before_any_traffic(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(SECRET_ENV, SECRET)
    # TEST-NET-3: nothing answers there; a refusal must not even try.
    path = spec(tmp_path, endpoint="http://203.0.113.7:9000/hooks")
    assert acklab("run", "--target", str(path)) == 5
    err = capsys.readouterr().err
    assert "203.0.113.7" in err
    assert "--allow-remote" in err
    assert not (tmp_path / "out").exists()


def test_an_unreachable_target_is_exit_4(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(SECRET_ENV, SECRET)
    assert acklab("run", "--target", str(spec(tmp_path)), "--out", str(tmp_path / "out")) == 4
    assert "nothing accepts connections" in capsys.readouterr().err


def test_an_unknown_experiment_is_exit_3_with_did_you_mean(capsys):
    assert acklab("run", "--experiment", "lost-akc") == 3
    assert "Did you mean 'lost-ack'?" in capsys.readouterr().err


def test_run_json_prints_exactly_the_design_object_and_a_failed_handler_exits_1(tmp_path, capsys):
    out = tmp_path / "out"
    code = acklab(
        "run",
        "--target",
        "fixture:unsafe",
        "--experiment",
        "lost-ack",
        "--trials",
        "1",
        "--out",
        str(out),
        "--json",
    )
    assert code == 1
    result = json.loads(capsys.readouterr().out)
    assert set(result) == {"run_id", "verdict", "target", "error", "experiments", "bundle"}
    assert (result["verdict"], result["target"], result["error"]) == ("fail", "fixture:unsafe", None)
    (experiment,) = result["experiments"]
    assert set(experiment) == {
        "name",
        "verdict",
        "trials",
        "reason",
        "fault_landed",
        "violations",
        "incident",
    }
    assert (experiment["name"], experiment["verdict"], experiment["trials"]) == ("lost-ack", "fail", 1)
    assert (experiment["fault_landed"], experiment["reason"]) == (1, None)
    (violation,) = experiment["violations"]
    assert set(violation) == {"invariant", "event_id", "observed", "expected", "detail", "delivery"}
    assert (violation["invariant"], violation["observed"], violation["expected"]) == (
        "at-most-once-effect",
        2,
        "<= 1",
    )
    # The retry, sent after the original's commit was confirmed, brought the second effect.
    assert violation["delivery"] == {"seq": 1, "kind": "retry", "attempt": 2}
    assert Path(experiment["incident"]).is_file()
    assert Path(result["bundle"]).name == result["run_id"]


def test_plan_is_deterministic_and_sends_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(SECRET_ENV, SECRET)
    path = spec(tmp_path)  # its endpoint does not listen: planning must not care
    assert acklab("plan", "--target", str(path), "--seed", "42", "--trials", "2", "--json") == 0
    first = json.loads(capsys.readouterr().out)
    assert acklab("plan", "--target", str(path), "--seed", "42", "--trials", "2", "--json") == 0
    assert json.loads(capsys.readouterr().out) == first
    assert first["seed"] == 42
    assert len(first["trials"]) == 6 * 2
    assert acklab("plan", "--target", str(path), "--seed", "43", "--trials", "2", "--json") == 0
    assert json.loads(capsys.readouterr().out)["trials"][0]["event_ids"] != first["trials"][0]["event_ids"]


def test_validate_accepts_target_and_experiment_specs_by_kind(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(SECRET_ENV, SECRET)
    assert acklab("validate", str(spec(tmp_path))) == 0
    experiment = tmp_path / "burst.yaml"
    experiment.write_text(
        "apiVersion: acklab/v1\nkind: experiment\nname: big-burst\nuses: concurrent-duplicates\n"
        "parameters: {burst: 32}\n"
    )
    assert acklab("validate", str(experiment)) == 0
    experiment.write_text("apiVersion: acklab/v1\nkind: experimnt\nname: x\n")
    assert acklab("validate", str(experiment)) == 3
    assert "did you mean 'experiment'?" in capsys.readouterr().out


def test_an_unsigned_target_lists_replay_as_skipped_and_refuses_it_by_name(tmp_path, capsys):
    path = spec(tmp_path, signing={"scheme": "none"})
    assert acklab("plan", "--target", str(path), "--seed", "1", "--json") == 0
    planned = json.loads(capsys.readouterr().out)
    assert "replay" not in planned["experiments"]
    skipped = {s["name"]: s["reason"] for s in planned["skipped"]}
    assert "signs nothing" in skipped["replay"]
    # The experiments beyond one event are listed too: the spec has none of their sections.
    assert {"out-of-order", "sibling-events", "race-with-request"} < set(skipped)
    assert acklab("run", "--target", str(path), "--experiment", "replay") == 3
    assert "signs nothing" in capsys.readouterr().err


def test_a_token_only_gitlab_target_plans_replay_without_its_tampered_variant(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("GITLAB_TOKEN_FOR_TEST", "a-legacy-shared-token")
    path = spec(tmp_path, signing={"scheme": "gitlab", "secret": "env:GITLAB_TOKEN_FOR_TEST"})
    assert acklab("plan", "--target", str(path), "--seed", "1", "--experiment", "replay", "--json") == 0
    planned = json.loads(capsys.readouterr().out)
    variants = {s["variant"]: s["reason"] for s in planned["skipped"]}
    assert set(variants) == {"replay-stale", "replay-tampered", "replay-cross-wired"}
    assert "X-Gitlab-Token" in variants["replay-tampered"]
    kinds = {d["kind"] for d in planned["trials"][0]["deliveries"]}
    assert kinds == {"original", "replay-foreign-secret"}


def test_json_prints_an_error_object_when_the_run_cannot_start(tmp_path, capsys):
    assert acklab("run", "--target", str(tmp_path / "nope.yaml"), "--json") == 3
    result = json.loads(capsys.readouterr().out)
    assert (result["verdict"], result["experiments"], result["bundle"]) == ("error", [], None)
    assert "nope.yaml" in result["error"]


def test_validate_refuses_a_contradictory_expect_with_exit_3(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(SECRET_ENV, SECRET)
    path = spec(tmp_path, expect={"conflict": "ignore", "conflict_status": [409]})
    assert acklab("validate", str(path)) == 3
    assert "conflict: ignore" in capsys.readouterr().err
    path = spec(tmp_path, expect={"conflict": "ignore", "effects_within_s": 0.5})
    assert acklab("validate", str(path)) == 0
    assert "a valid target spec" in capsys.readouterr().out


def test_a_fixture_database_that_does_not_answer_is_exit_4(tmp_path, capsys):
    url = f"postgresql+psycopg://nobody@127.0.0.1:{free_port()}/missing"
    assert acklab("run", "--db", url, "--experiment", "lost-ack", "--out", str(tmp_path / "out")) == 4
    assert "could not start" in capsys.readouterr().err


def test_output_that_is_not_a_terminal_is_never_wrapped(capsys, monkeypatch):
    """A CI log is a transcript: rich's 80 columns would cut a name into "lost-ack-res…"."""
    monkeypatch.delenv("COLUMNS", raising=False)
    assert acklab("plan", "--target", "fixture:live", "--experiment", "lost-ack-reset", "--trials", "1") == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if "lost-ack-reset-0000" in line)
    assert "…" not in out
    assert "retry/4/none@" in row  # the whole row on one line, wider than 80 columns
    assert len(row) > 80
