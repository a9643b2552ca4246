"""A signal that comes while a run writes its bundle is not lost.

The run's last stretch — the bundle's incidents, its run document, its manifest — has no await
in it. With the loop's own signal handling (`loop.add_signal_handler`) a SIGTERM there was only
noted in the loop's self-pipe, read by no later turn, and the run ended as if nothing had come
(exit 0): the repair flow around it, stopped by GitLab Duo past its step's timeout, went on to
publish. These tests send the signal from inside that stretch, in the run's own process.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from acklab.evidence.bundle import verify
from acklab.harness.engine import run_bundle
from acklab.harness.engine.runner import RunOptions, run
from acklab.harness.errors import RunInterrupted


def options(tmp_path: Path) -> RunOptions:
    return RunOptions(target="fixture:live", experiments=("lost-ack",), trials=1, out=tmp_path / "out")


@pytest.fixture
def caller_handler():
    """The caller's own SIGTERM handler (as the repair flow's `sigterm_interrupts` is): what it got.
    SIGINT's stays what it was (Python's own; ignored in a pytest-xdist worker)."""
    got: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: got.append(signum))
    sigint = signal.getsignal(signal.SIGINT)
    try:
        yield got
    finally:
        signal.signal(signal.SIGTERM, previous)
        assert signal.getsignal(signal.SIGINT) is sigint, "the run did not put SIGINT's handler back"


def test_a_sigterm_while_the_bundle_is_written_stops_the_run(tmp_path, monkeypatch, caller_handler):
    finish = run_bundle.RunState.finish

    def finish_then_terminated(self, *args, **kwargs):
        done = finish(self, *args, **kwargs)
        os.kill(os.getpid(), signal.SIGTERM)  # delivered before the next bytecode: no await between
        return done

    monkeypatch.setattr(run_bundle.RunState, "finish", finish_then_terminated)
    mine = signal.getsignal(signal.SIGTERM)
    with pytest.raises(RunInterrupted, match="interrupted as the run wrote its last files") as stopped:
        run(options(tmp_path))
    assert caller_handler == []  # the run stopped for it: not passed on a second time
    assert signal.getsignal(signal.SIGTERM) is mine  # put back
    # The bundle was finished all the same: the message says so, and sends nobody to --resume.
    message = str(stopped.value)
    assert "(verdict pass, 1 of 1 trials); nothing to resume" in message
    assert "--resume" not in message
    (bundle,) = (tmp_path / "out").glob("*/run.json")
    assert json.loads(bundle.read_text())["status"] == "complete"
    assert verify(bundle.parent).ok


def test_a_signal_the_run_caught_too_late_to_act_on_goes_on_to_the_callers_handler(
    tmp_path, monkeypatch, caller_handler
):
    from acklab.harness.engine import interrupts

    looked = interrupts.raise_if_interrupted
    looks: list[int] = []

    def look_then_terminated(interrupted):
        looked(interrupted)
        looks.append(1)
        if len(looks) == 2:  # after the run's last look: only its handler's removal is left
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(interrupts, "raise_if_interrupted", look_then_terminated)
    result = run(options(tmp_path))
    assert result.verdict == "pass"  # the run itself was over
    assert caller_handler == [signal.SIGTERM]  # and the signal reached the caller, once


def test_a_run_with_no_signal_leaves_the_callers_handlers_as_they_were(tmp_path, caller_handler):
    mine = signal.getsignal(signal.SIGTERM)
    assert run(options(tmp_path)).verdict == "pass"
    assert signal.getsignal(signal.SIGTERM) is mine
    assert caller_handler == []


def test_a_run_that_fails_before_its_first_trial_gives_the_signals_back(
    tmp_path, monkeypatch, caller_handler
):
    def unwritable(self):
        raise OSError(f"{tmp_path}: read-only file system")

    monkeypatch.setattr(run_bundle.RunState, "preliminary", unwritable)
    mine = signal.getsignal(signal.SIGTERM)
    with pytest.raises(OSError, match="read-only file system"):
        run(options(tmp_path))
    assert signal.getsignal(signal.SIGTERM) is mine
    os.kill(os.getpid(), signal.SIGTERM)  # the caller's handler has it, not the ended run's
    assert caller_handler == [signal.SIGTERM]
