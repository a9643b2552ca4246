"""pytest evidence that stays: `.acklab/` at the rootdir (git-ignored by its own .gitignore), the
last N runs kept; and webhook_lab.explore from a test, shrunk, with the seed that replays it."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.pytest_plugin.conftest import FAST

ATTACK_ONCE = """
from shop_fastapi import SECRET, count_fulfillments, create_app


def test_orders(webhook_lab, tmp_path):
    db = f"sqlite:///{tmp_path}/shop.db"
    result = webhook_lab.attack(create_app(db, receipts=True), endpoint="/webhooks/orders", secret=SECRET,
                                effects=lambda event_id: count_fulfillments(db, event_id),
                                experiments=["lost-ack"])
    assert result.passed, result.explain()
"""

EXPLORE = """
from shop_fastapi import SECRET, count_fulfillments, create_app


def test_schedules(webhook_lab, tmp_path):
    db = f"sqlite:///{tmp_path}/shop.db"
    result = webhook_lab.explore(create_app(db, receipts=RECEIPTS), budget=BUDGET, endpoint="/webhooks/orders",
                                 secret=SECRET, effects=lambda event_id: count_fulfillments(db, event_id))
    print("EXAMPLES", result.examples, "SEED", result.seed)
    assert result.passed, result.explain()
"""


def bundles(directory: Path) -> list[str]:
    """The bundles of `directory`, oldest first (by when written: two runs in one second have
    names in random order)."""
    found = [p for p in directory.iterdir() if (p / "manifest.json").is_file()]
    return [p.name for p in sorted(found, key=lambda p: (p.stat().st_mtime_ns, p.name))]


def test_evidence_lives_in_dot_acklab_at_the_rootdir_ignored_by_git(user_suite):
    suite = user_suite("shop_fastapi")
    suite.makepyfile(test_orders=ATTACK_ONCE)
    (suite.path / "sub").mkdir()
    result = suite.runpytest(*FAST, "--rootdir", str(suite.path), str(suite.path / "test_orders.py"))
    result.assert_outcomes(passed=1)
    out = suite.path / ".acklab"
    assert len(bundles(out)) == 1
    assert (out / ".gitignore").read_text().splitlines()[-1] == "*"
    git = shutil.which("git")
    assert git, "git is installed by make test (scripts/ensure-system-deps.sh)"
    subprocess.run([git, "init", "-q", str(suite.path)], check=True)
    status = subprocess.run(
        [git, "-C", str(suite.path), "status", "--porcelain", "--untracked-files=all"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert ".acklab" not in status  # the directory ignores itself, as .pytest_cache does
    assert "test_orders.py" in status
    assert f"evidence in {out}" in result.stdout.str()


def test_the_last_n_runs_are_kept(user_suite):
    suite = user_suite("shop_fastapi")
    suite.makepyfile(test_orders=ATTACK_ONCE)
    seen = []
    for _ in range(3):
        suite.runpytest(*FAST, "--acklab-keep", "1").assert_outcomes(passed=1)
        seen.append(bundles(suite.path / ".acklab"))
    # Pruned when a session first attacks: one earlier run kept, then this session's.
    assert [len(s) for s in seen] == [1, 2, 2]
    assert seen[1][0] == seen[0][0]
    assert seen[0][0] not in seen[2]
    assert seen[2][0] == seen[1][1]
    suite.runpytest(*FAST, "--acklab-keep", "0").assert_outcomes(passed=1)
    assert len(bundles(suite.path / ".acklab")) == 3  # 0 keeps everything
    bad = suite.runpytest(*FAST, "--acklab-keep", "-1")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    assert "--acklab-keep: got -1" in bad.stderr.str()


@pytest.mark.slow  # two explorations, each a search, a shrink and its real runs
def test_explore_shrinks_a_failing_schedule_and_names_the_seed_that_replays_it(user_suite):
    suite = user_suite("shop_fastapi")
    suite.makepyfile(test_schedules=EXPLORE.replace("RECEIPTS", "False").replace("BUDGET", "30"))
    result = suite.runpytest("-p", "no:cacheprovider", "-s")
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    assert "acklab explore: test_schedules FAILED" in text
    assert "the shrunk schedule" in text
    assert re.search(r"violated [a-z-]+ on evt_\w+", text)
    rerun = re.search(r"reproduce: pytest '(test_schedules\.py::test_schedules)' --acklab-seed (\d+)", text)
    assert rerun, text[-3000:]
    incident = re.search(r"incident: (\S+\.json)", text)
    assert incident
    assert Path(incident.group(1)).is_file()
    assert Path(incident.group(1)).is_relative_to(suite.path / ".acklab")
    # The seed replays the same search: the same shrunk schedule.
    again = suite.runpytest("-p", "no:cacheprovider", "-s", "--acklab-seed", rerun.group(2))
    again.assert_outcomes(failed=1)
    schedule = re.findall(r"^E?\s+(\d+\. .+)$", text, flags=re.M)
    assert schedule
    assert re.findall(r"^E?\s+(\d+\. .+)$", again.stdout.str(), flags=re.M) == schedule


def test_explore_passes_a_handler_that_keeps_the_invariant(user_suite):
    suite = user_suite("shop_fastapi")
    suite.makepyfile(test_schedules=EXPLORE.replace("RECEIPTS", "True").replace("BUDGET", "8"))
    result = suite.runpytest("-p", "no:cacheprovider", "-s")
    result.assert_outcomes(passed=1)
    assert re.search(r"EXAMPLES [1-8] SEED \d+", result.stdout.str())
