"""scripts/suite.sh: make test's two pytest sessions — the unit tier (scripts/unit.sh) and the
rest — side by side, the unit tier's report after the rest's, the exit
code a failure of either, and an interrupt stopping both.

The scripts run from a copy of scripts/ in the test's own directory (they write the unit
tier's log beside them), with ACKLAB_PYTHON a stand-in interpreter: a shell script that answers
scripts/unit.sh's questions (nothing to hide, PostgreSQL not found) and, as pytest, records
when its tier ran and with what arguments and environment, then sleeps and exits as told.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

STAND_IN = r"""#!/usr/bin/env bash
case "$*" in
  "-m tests.tiers hidden"*|-c*) exit 0 ;;
esac
tier=none
for arg in "$@"; do case $arg in --tier=*) tier=${arg#--tier=} ;; esac; done
out=$STAND_IN_DIR/$tier
echo $$ > "$out.pid"
date +%s.%N > "$out.start"
echo "${ACKLAB_UNIT_BESIDE_REST:-unset} $*" > "$out.args"
grep SigIgn /proc/$$/status | cut -f2 > "$out.ignored"
sleep "${STAND_IN_SLEEP:-1}"
date +%s.%N > "$out.end"
echo "the $tier tier's report"
code=STAND_IN_${tier^^}_EXIT
exit "${!code:-0}"
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A directory holding a copy of the two scripts and the stand-in interpreter."""
    (tmp_path / "scripts").mkdir()
    for name in ("suite.sh", "unit.sh"):
        shutil.copy2(ROOT / "scripts" / name, tmp_path / "scripts" / name)
    python = tmp_path / "python"
    python.write_text(STAND_IN)
    python.chmod(0o755)
    (tmp_path / "ran").mkdir()
    return tmp_path


def environment(project: Path, **extra: str) -> dict[str, str]:
    drop = ("ACKLAB_UNIT_HIDING", "ACKLAB_UNIT_BESIDE_REST", "ACKLAB_TIERS_BESIDE")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    return env | {"ACKLAB_PYTHON": str(project / "python"), "STAND_IN_DIR": str(project / "ran"), **extra}


def command(project: Path) -> list[str]:
    # As from a terminal: SIGINT at its default (a pytest-xdist worker ignores it, and what the
    # worker starts would inherit that).
    return ["env", "--default-signal=INT", str(project / "scripts" / "suite.sh"), "3", "4"]


def suite(project: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command(project),
        env=environment(project, **extra), capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def ran(project: Path, tier: str, what: str) -> str:
    return (project / "ran" / f"{tier}.{what}").read_text().strip()


def test_the_two_tiers_run_at_once_and_the_unit_tier_is_reported_after_the_rest(project):
    done = suite(project, STAND_IN_SLEEP="1")
    assert done.returncode == 0, done.stdout + done.stderr
    unit = (float(ran(project, "unit", "start")), float(ran(project, "unit", "end")))
    rest = (float(ran(project, "rest", "start")), float(ran(project, "rest", "end")))
    # Their spans overlap: each started before the other ended.
    assert unit[0] < rest[1], (unit, rest)
    assert rest[0] < unit[1], (unit, rest)
    assert ran(project, "unit", "args").split()[:7] == ["1", "-m", "pytest", "--tier=unit", "-p", "bench.pytest_timing", "-n"]  # fmt: skip
    assert ran(project, "rest", "args").split()[0] == "unset"  # only the unit tier's record is kept apart
    assert "-n 4 --dist loadfile --tier=rest" in ran(project, "rest", "args")
    # Neither tier ignores SIGINT (bash starts a background job ignoring it).
    for tier in ("unit", "rest"):
        assert int(ran(project, tier, "ignored"), 16) & 1 << (signal.SIGINT - 1) == 0, tier
    out = done.stdout
    assert out.index("the rest tier's report") < out.index("the unit tier, run beside the rest")
    assert out.index("the unit tier, run beside the rest") < out.index("the unit tier's report")
    assert (
        (project / "test-artifacts" / "unit-tier.log").read_text().strip().endswith("the unit tier's report")
    )


@pytest.mark.parametrize(
    ("unit_exit", "rest_exit", "expected"), [("1", "0", 1), ("0", "1", 1), ("2", "1", 2), ("0", "5", 5)]
)
def test_a_failure_of_either_tier_fails_the_suite(project, unit_exit, rest_exit, expected):
    done = suite(project, STAND_IN_SLEEP="0", STAND_IN_UNIT_EXIT=unit_exit, STAND_IN_REST_EXIT=rest_exit)
    assert done.returncode == expected, done.stdout + done.stderr
    assert "the unit tier's report" in done.stdout  # shown whether it failed or not
    assert ("the unit tier failed" in done.stderr) == (unit_exit != "0")


def test_one_after_the_other_when_asked(project):
    done = suite(project, STAND_IN_SLEEP="0.3", ACKLAB_TIERS_BESIDE="0")
    assert done.returncode == 0, done.stdout + done.stderr
    assert float(ran(project, "unit", "end")) <= float(ran(project, "rest", "start"))
    assert done.stdout.index("the unit tier's report") < done.stdout.index("the rest tier's report")


def test_an_interrupt_stops_both_tiers(project):
    started = subprocess.Popen(
        command(project), env=environment(project, STAND_IN_SLEEP="60"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    pids = [project / "ran" / f"{tier}.pid" for tier in ("unit", "rest")]
    try:
        deadline = time.monotonic() + 30
        while not all(p.exists() and p.read_text().strip() for p in pids):
            assert time.monotonic() < deadline, "the two tiers did not start"
            time.sleep(0.05)
        os.killpg(started.pid, signal.SIGINT)  # a ^C at the terminal: the foreground group
        out, err = started.communicate(timeout=30)
    finally:
        if started.poll() is None:  # nothing outlives the test, whatever failed
            os.killpg(started.pid, signal.SIGKILL)
            started.communicate()
            for pid in pids:
                if pid.exists() and pid.read_text().strip():
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(int(pid.read_text()), signal.SIGKILL)
    assert started.returncode == 130, out + err
    assert "interrupted; the unit tier was stopped too" in err
    unit_pid = int(pids[0].read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(unit_pid, 0)
    assert not (project / "ran" / "unit.end").exists()  # stopped, not finished
