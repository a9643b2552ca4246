"""User test suites that attack their own webhook apps with ``webhook_lab`` (run by pytester).

Each suite is what a user would write next to their code: a FastAPI app with a
check-then-insert handler and its receipt-based fix, a Flask app with a dedupe bug, a
Django view. The suites run in this process (pytester's in-process run), one trial per
experiment; what is checked is what the user sees: the outcomes, the assertion message
(it names the experiments that failed, the invariant, the event, observed vs expected, the
incident file) and the evidence (bundles that verify, the JUnit property).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import acklab
from tests.pytest_plugin.conftest import FAST, LEAN, RACES

FASTAPI_SUITE = """
import pytest
from shop_fastapi import SECRET, count_fulfillments, create_app


@pytest.fixture
def db_url(tmp_path):
    return f"sqlite:///{tmp_path / 'shop.db'}"


def attack(webhook_lab, db_url, **app_options):
    return webhook_lab.attack(
        create_app(db_url, **app_options),
        endpoint="/webhooks/orders",
        secret=SECRET,
        effects=lambda event_id: count_fulfillments(db_url, event_id),
    )


def test_check_then_insert(webhook_lab, db_url):
    result = attack(webhook_lab, db_url)
    assert result.passed, result.explain()


def test_receipts(webhook_lab, db_url):
    result = attack(webhook_lab, db_url, receipts=True)
    assert result.passed, result.explain()
"""


def _bundles(out: Path) -> list[Path]:
    return sorted(p.parent for p in out.glob("*/run.json"))


def test_a_fastapi_check_then_insert_handler_fails_and_its_receipt_fix_passes(user_suite):
    pytester = user_suite("shop_fastapi")
    pytester.makepyfile(test_shop=FASTAPI_SUITE)
    result = pytester.runpytest(*RACES, "--acklab-out", "evidence", "--junitxml", "junit.xml")
    result.assert_outcomes(failed=1, passed=1)
    failure = "\n".join(result.outlines)
    # The assertion message: which experiments failed, with the invariant and the numbers.
    # Sixteen duplicates released together meet inside the check-to-insert window in nearly every
    # trial; of three (RACES), one does.
    assert "concurrent-duplicates: FAIL" in failure
    assert re.search(r"at-most-once-effect on event evt_\w+: observed (\d+), expected <= 1", failure)
    assert "one of 16 duplicates released together" in failure
    # One retry is a race of one: lost-ack-reset's (and timeout-overlap's) retry usually lands
    # inside the handler's 20 ms window, but on a loaded machine it can come after the commit,
    # and a trial then passes. Either way the fault landed, and a failure names the retry.
    reset = re.search(r"lost-ack-reset: (FAIL|pass) — .*the fault landed in 3 of 3 trial", failure)
    assert reset, failure
    if reset[1] == "FAIL":
        assert "sent after seq 0 had reached the handler" in failure  # the reset's retry, named
    # Sequential retries find the record: a check-then-insert handler survives a plain lost ack.
    assert "lost-ack: pass" in failure
    assert "reproduce: pytest 'test_shop.py::test_check_then_insert' --acklab-seed " in failure
    incidents = re.findall(r"incident: (\S+\.json)", failure)
    assert incidents
    assert all(Path(p).is_file() for p in incidents)
    # Evidence like every run: one bundle per attack, each intact; its path in the JUnit report.
    bundles = _bundles(pytester.path / "evidence")
    assert len(bundles) == 2
    assert all(acklab.verify_bundle(b).ok for b in bundles)
    verdicts = sorted(acklab.RunResult.load(b).verdict for b in bundles)
    assert verdicts == ["fail", "pass"]
    junit = ET.parse(pytester.path / "junit.xml").getroot()
    recorded = [p.attrib["value"] for p in junit.iter("property") if p.get("name") == "acklab_bundle"]
    assert sorted(recorded) == [str(b.resolve()) for b in bundles]
    assert "2 attack(s); evidence in" in result.stdout.str()


FLASK_SUITE = """
from shop_flask import SECRET, count_fulfillments, create_app


def test_orders_webhook(webhook_lab, tmp_path):
    db = str(tmp_path / "shop.db")
    result = webhook_lab.attack(
        create_app(db),
        endpoint="/hooks/orders",
        secret=SECRET,
        effects=lambda event_id: count_fulfillments(db, event_id),
        experiments=["lost-ack", "concurrent-duplicates"],
    )
    assert result.passed, result.explain()
"""


def test_a_flask_app_with_a_dedupe_bug_fails_under_concurrent_duplicates(user_suite):
    pytester = user_suite("shop_flask")
    pytester.makepyfile(test_shop=FLASK_SUITE)
    result = pytester.runpytest(*RACES)
    result.assert_outcomes(failed=1)
    failure = result.stdout.str()
    assert "concurrent-duplicates: FAIL" in failure
    assert re.search(r"at-most-once-effect on event evt_\w+: observed \d+, expected <= 1", failure)
    assert "lost-ack: pass" in failure


DJANGO_SUITE = """
import pytest
import shop_django
from django.core.wsgi import get_wsgi_application


def test_orders_view(webhook_lab):
    shop_django.create_tables()
    result = webhook_lab.attack(
        get_wsgi_application(),
        endpoint="/hooks/orders",
        secret=shop_django.SECRET,
        effects=shop_django.count_fulfillments,
        experiments=["lost-ack", "concurrent-duplicates", "conflicting-payload"],
    )
    assert result.passed, result.explain()
"""


@pytest.mark.slow  # Django's setup, then every default experiment's real run
def test_a_django_view_with_receipts_passes(user_suite, monkeypatch):
    pytester = user_suite("shop_django")
    monkeypatch.setenv("SHOP_DB", str(pytester.path / "shop.db"))
    pytester.makepyfile(test_shop=DJANGO_SUITE)
    # In a subprocess: Django's settings are configured once per process.
    result = pytester.runpytest_subprocess(*FAST, *LEAN, "-p", "no:xdist")
    result.assert_outcomes(passed=1)
