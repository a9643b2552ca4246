"""`acklab flow sandbox DIR` (flows/scratch_repo.py): a scratch repository, a committed copy of the project whose live handler is the unsafe one."""

from __future__ import annotations

import pytest

from acklab.flows.errors import FlowError, FlowSpecInvalid
from acklab.flows.scratch_repo import make_scratch_repo, project_root
from tests.flows.conftest import ROOT, UNSAFE, run_git


def test_the_sandbox_is_a_clean_repository_with_the_unsafe_handler_committed(tmp_path):
    target = tmp_path / "sandbox"
    sha = make_scratch_repo(target)
    assert run_git(target, "rev-parse", "HEAD").strip() == sha
    assert run_git(target, "status", "--porcelain") == ""
    assert (target / "app/webhooks.py").read_text() == UNSAFE
    assert (target / "flows/repair.yaml").is_file()
    tracked = set(run_git(target, "ls-files").split())
    assert tracked <= set(run_git(ROOT, "ls-files").split()) | {"app/webhooks.py"}
    assert "Sandbox: the live handler is the unsafe one" in run_git(target, "log", "-1", "--format=%B")


def test_an_empty_directory_is_fine(tmp_path):
    (tmp_path / "empty").mkdir()
    make_scratch_repo(tmp_path / "empty")
    assert (tmp_path / "empty" / ".git").is_dir()


def test_a_non_empty_directory_is_refused_and_left_alone(tmp_path):
    target = tmp_path / "busy"
    target.mkdir()
    (target / "keep.txt").write_text("mine\n")
    with pytest.raises(FlowSpecInvalid) as info:
        make_scratch_repo(target)
    assert int(info.value.exit_code) == 3
    assert "not an empty directory" in str(info.value)
    assert [p.name for p in target.iterdir()] == ["keep.txt"]
    assert (target / "keep.txt").read_text() == "mine\n"


def test_the_cli_refuses_with_exit_3(tmp_path, capsys):
    from acklab.cli import main

    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "x").write_text("x")
    with pytest.raises(SystemExit) as info:
        main(["flow", "sandbox", str(tmp_path / "busy")])
    assert info.value.code == 3
    assert "not an empty directory" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main(["flow", "sandbox", str(tmp_path / "new")])
    assert info.value.code == 0
    assert "acklab flow run flows/repair.yaml --local" in capsys.readouterr().out


def test_outside_a_checkout_it_says_it_needs_one(tmp_path):
    # An installed acklab: the flows package sits in site-packages, no fixture tests nor spec beside it.
    package = tmp_path / "site-packages" / "acklab" / "flows"
    package.mkdir(parents=True)
    with pytest.raises(FlowError) as info:
        project_root(package)
    assert int(info.value.exit_code) == 4
    assert str(package.parent) in str(info.value)
    assert "Clone the acklab repository" in str(info.value)
    assert project_root() == ROOT
