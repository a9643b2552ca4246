"""`--experiment FILE`: an experiment spec picks a stable experiment and sets trials and parameters."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from acklab.cli import main


def acklab(*argv: str) -> int:
    with pytest.raises(SystemExit) as exited:
        main(list(argv))
    return int(exited.value.code or 0)


def experiment_spec(path: Path, uses: str, **fields: object) -> Path:
    doc = {"apiVersion": "acklab/v1", "kind": "experiment", "name": path.stem, "uses": uses, **fields}
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_spec_sets_the_experiment_its_trials_and_its_burst(tmp_path, capsys):
    spec = experiment_spec(
        tmp_path / "burst4.yaml", "concurrent-duplicates", trials=2, parameters={"burst": 4}
    )
    out = tmp_path / "out"
    code = acklab("run", "--target", "fixture:unsafe", "--experiment", str(spec), "--out", str(out), "--json")
    assert code == 1
    result = json.loads(capsys.readouterr().out)
    [experiment] = result["experiments"]
    assert (experiment["name"], experiment["trials"]) == ("concurrent-duplicates", 2)
    incident = json.loads(Path(experiment["incident"]).read_text())
    assert incident["experiment"]["parameters"]["burst"] == 4
    for trial in incident["trials"]:
        burst = [d for d in trial["deliveries"] if d["kind"] in ("original", "duplicate")]
        assert len(burst) == 4
    # the unsafe handler fulfils every one of the four deliveries
    assert {v["observed"] for v in experiment["violations"]} == {4}


def test_plain_names_and_spec_files_mix(tmp_path, capsys):
    spec = experiment_spec(tmp_path / "la.yaml", "lost-ack", trials=1)
    code = acklab(
        "plan", "--target", "fixture:live", "--experiment", "replay", "--experiment", str(spec), "--json"
    )
    assert code == 0
    plan = json.loads(capsys.readouterr().out)
    assert {t["experiment"] for t in plan["trials"]} == {"replay", "lost-ack"}


def test_two_specs_that_disagree_on_a_parameter_are_refused_and_nothing_is_written(tmp_path, capsys):
    a = experiment_spec(tmp_path / "a.yaml", "concurrent-duplicates", parameters={"burst": 4})
    b = experiment_spec(tmp_path / "b.yaml", "lost-ack", parameters={"burst": 8})
    out = tmp_path / "out"
    assert acklab("run", "--experiment", str(a), "--experiment", str(b), "--out", str(out)) == 3
    err = capsys.readouterr().err
    assert "parameters.burst: got 8" in err
    assert "a.yaml sets 4" in err
    assert not out.exists()


def test_a_spec_may_not_silently_override_an_explicit_flag(tmp_path, capsys):
    spec = experiment_spec(tmp_path / "burst4.yaml", "concurrent-duplicates", parameters={"burst": 4})
    assert acklab("plan", "--experiment", str(spec), "--burst", "8") == 3
    assert "--burst sets 8" in capsys.readouterr().err


def test_specs_asking_for_different_trials_need_an_explicit_trials(tmp_path, capsys):
    a = experiment_spec(tmp_path / "a.yaml", "lost-ack", trials=2)
    b = experiment_spec(tmp_path / "b.yaml", "replay", trials=3)
    assert acklab("plan", "--experiment", str(a), "--experiment", str(b)) == 3
    assert "pass --trials N" in capsys.readouterr().err
    assert acklab("plan", "--experiment", str(a), "--experiment", str(b), "--trials", "1", "--json") == 0


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            {"apiVersion": "acklab/v1", "kind": "target", "name": "x"},
            "this option takes a spec of kind 'experiment'",
        ),
        ({"apiVersion": "acklab/v1", "kind": "experiment", "name": "x", "uses": "lost-ak"}, "uses"),
    ],
)
def test_a_file_that_is_not_a_valid_experiment_spec_is_exit_3(tmp_path, capsys, content, message):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(content))
    assert acklab("plan", "--experiment", str(path)) == 3
    assert message in capsys.readouterr().err


def test_a_missing_spec_file_is_exit_3(tmp_path, capsys):
    assert acklab("plan", "--experiment", str(tmp_path / "nope.yaml")) == 3
    assert "no such file" in capsys.readouterr().err
