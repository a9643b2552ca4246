"""User suites for the plugin's tests: the apps in ``apps/`` copied beside a test file in a
pytester directory, and the run's options every suite shares."""

from __future__ import annotations

from pathlib import Path

import pytest

import acklab

# pytester's in-process runs drop, after each run, the modules first imported during it. A
# library that keeps references between its modules (SQLAlchemy's ORM registers itself in
# sqlalchemy.util.preloaded) breaks when the next run imports a second copy beside the
# first's leftovers; imported here, once, they stay for every run.
import tests.pytest_plugin.apps.shop_fastapi
import tests.pytest_plugin.apps.shop_flask
import tests.pytest_plugin.apps.shop_orders  # noqa: F401

# acklab imports its public names on first use and keeps them: a module first imported inside a
# run would be dropped after it, and the next run's copy is not the one acklab.RunResult names,
# which the lab's self-check reports as verdict code rebound (whenever the worker ran no other
# test that imported them first). Every public name, resolved once, before any run.
for _name in acklab.__all__:
    getattr(acklab, _name)

APPS = Path(__file__).with_name("apps")
# One trial per experiment: each app's bug (or fix) shows on the first; the suites stay fast.
# These suites are plain pytest: pytest-django (installed for the Django shops' own suites) would
# take over a Django app's settings (its locmem mail backend, its database blocker).
FAST = ("-p", "no:cacheprovider", "-p", "no:django", "--acklab-trials", "1")
# A suite whose outcome rests on the lab winning a race (concurrent duplicates, the reset's retry,
# the webhook against the browser's return) gets the trials the race's proven rate needs: one
# trial catches it in 95 % of runs or more (docs/performance.md), so one trial lost it now and
# then on a loaded machine; an experiment fails on any of its trials, and three miss it about
# once in 8,000 runs.
RACES = (*FAST[:-1], "3")
# For suites run in processes of their own (a subprocess, xdist's workers): this project's
# environment has pytest plugins the user suites do not use, whose import costs ~1.3 s a process.
LEAN = ("-p", "no:hypothesispytest", "-p", "no:schemathesis")


@pytest.fixture
def user_suite(pytester: pytest.Pytester):
    """Copy the named apps into the pytester directory; returns pytester."""

    def make(*apps: str) -> pytest.Pytester:
        for name in apps:
            pytester.makepyfile(**{name: (APPS / f"{name}.py").read_text()})
        return pytester

    return make
