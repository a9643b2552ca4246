"""The plugin in a user's pytest session: inert unless used, the marker, the options, -x, xdist."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

import acklab
from acklab.cli import main
from tests.pytest_plugin.conftest import FAST, LEAN, RACES

UNRELATED_SUITE = """
import pytest


def test_adds():
    assert 1 + 1 == 2


def test_fails():
    assert [1, 2] == [1, 3]


@pytest.mark.skip(reason="not today")
def test_skipped():
    pass


@pytest.mark.xfail(strict=True)
def test_expected_to_fail():
    assert False


@pytest.fixture(params=["a", "b"])
def letter(request):
    return request.param


def test_params(letter):
    assert letter in "ab"
"""


def test_a_suite_that_does_not_use_the_plugin_is_unchanged(pytester):
    pytester.makepyfile(test_unrelated=UNRELATED_SUITE)
    with_plugin = pytester.runpytest("-p", "no:cacheprovider", "-rA")
    without = pytester.runpytest("-p", "no:cacheprovider", "-rA", "-p", "no:acklab")
    expected = {"passed": 3, "failed": 1, "skipped": 1, "xfailed": 1}
    with_plugin.assert_outcomes(**expected)
    without.assert_outcomes(**expected)
    assert with_plugin.ret == without.ret

    def shown(lines: list[str]) -> list[str]:
        # pytest's header lists the plugins it loaded, and the last line says how long it took.
        return [line for line in lines if not line.startswith("plugins:") and " in " not in line]

    # Nothing of acklab's, and otherwise the same lines: tests, order, results, messages.
    assert shown(with_plugin.outlines) == shown(without.outlines)
    assert "acklab" not in "\n".join(shown(with_plugin.outlines)).lower()


def test_the_plugin_is_loaded_with_its_options_and_marker(pytester):
    result = pytester.runpytest("--help")
    out = result.stdout.str()
    for option in ("--acklab-trials=N", "--acklab-seed=SEED", "--acklab-out=DIR"):
        assert option in out
    markers = pytester.runpytest("--markers").stdout.str()
    assert "@pytest.mark.webhook_spec(path=None, *, experiments=None)" in markers


SPEC = """
apiVersion: acklab/v1
kind: target
name: shop
endpoint: http://127.0.0.1:9000/webhooks/orders
signing: {scheme: standard, secret: whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw}
event:
  id: "{{event_id}}"
  type: order.paid
  data: {order_id: "{{order_id}}", amount_cents: 1200}
conflict: {set: {data.amount_cents: 9900}}
effects:
  sql: {url: "sqlite:///shop.db", count: "SELECT count(*) FROM fulfillments WHERE event_id = :event_id"}
"""

MARKED_SUITE = """
import pytest
from shop_fastapi import create_app

app = create_app("sqlite:///shop.db", receipts=True)


@pytest.mark.webhook_spec("acklab.yaml", experiments=["lost-ack", "concurrent-duplicates", "crash-after-commit"])
def test_webhook(webhook_lab, webhook_experiment):
    result = webhook_lab.attack(app)
    assert result.passed, result.explain()
    assert [e.name for e in result.experiments] == [webhook_experiment]
"""


def test_the_marker_makes_one_test_per_experiment_and_skips_what_does_not_apply(user_suite):
    pytester = user_suite("shop_fastapi")
    pytester.makefile(".yaml", acklab=SPEC)
    pytester.makepyfile(test_marked=MARKED_SUITE)
    result = pytester.runpytest(*FAST, "-v", "-rs", "--junitxml", "junit.xml", "--acklab-out", "evidence")
    result.assert_outcomes(passed=2, skipped=1)
    result.stdout.fnmatch_lines(
        [
            "*test_webhook?lost-ack? PASSED*",
            "*test_webhook?concurrent-duplicates? PASSED*",
            "*test_webhook?crash-after-commit? SKIPPED*",
            "*crash-after-commit: crash experiments kill the handler's process*",
        ]
    )
    cases = ET.parse(pytester.path / "junit.xml").getroot().findall(".//testcase")
    assert sorted(c.attrib["name"] for c in cases) == [
        "test_webhook[concurrent-duplicates]",
        "test_webhook[crash-after-commit]",
        "test_webhook[lost-ack]",
    ]
    (skipped,) = [s for c in cases if (s := c.find("skipped")) is not None]
    assert "the lab cannot kill it without killing the tests" in skipped.get("message", "")
    # The spec's name names the target; the skipped experiment is recorded as such.
    runs = [json.loads(p.read_text()) for p in (pytester.path / "evidence").glob("*/run.json")]
    assert {r["target"] for r in runs} == {"shop"}
    assert sorted(e["verdict"] for r in runs for e in r["experiments"]) == ["pass", "pass", "skipped"]


SEEDED_SUITE = """
from shop_fastapi import SECRET, count_fulfillments, create_app


def test_first(webhook_lab, tmp_path):
    url = f"sqlite:///{tmp_path / 'shop.db'}"
    result = webhook_lab.attack(
        create_app(url), endpoint="/webhooks/orders", secret=SECRET, trials=5, seed=5,
        effects=lambda event_id: count_fulfillments(url, event_id), experiments=["concurrent-duplicates"],
    )
    assert result.passed, result.explain()


def test_second(webhook_lab, tmp_path):
    url = f"sqlite:///{tmp_path / 'shop.db'}"
    result = webhook_lab.attack(
        create_app(url, receipts=True), endpoint="/webhooks/orders", secret=SECRET,
        effects=lambda event_id: count_fulfillments(url, event_id), experiments=["lost-ack"],
    )
    assert result.passed, result.explain()
"""


def test_x_stops_at_the_first_failing_attack_and_the_options_override_the_tests(user_suite):
    pytester = user_suite("shop_fastapi")
    pytester.makepyfile(test_seeded=SEEDED_SUITE)
    result = pytester.runpytest(*RACES, "-x", "--acklab-seed", "77", "--acklab-out", "evidence")
    result.assert_outcomes(failed=1)
    assert "stopping after 1 failures" in result.stdout.str()
    (run,) = [json.loads(p.read_text()) for p in (pytester.path / "evidence").glob("*/run.json")]
    assert run["seed"] == 77  # --acklab-seed over the test's seed=5
    assert run["trials_per_experiment"] == 3  # --acklab-trials over the test's trials=5
    assert "reproduce: pytest 'test_seeded.py::test_first' --acklab-seed 77" in result.stdout.str()


@pytest.mark.slow  # the attacks run twice: in this process, then in two xdist workers
def test_the_plugin_works_with_xdist_absent_and_present(user_suite):
    pytester = user_suite("shop_fastapi")
    pytester.makepyfile(test_seeded=SEEDED_SUITE)
    without = pytester.runpytest(*RACES, "-p", "no:xdist", "--acklab-out", "alone")
    without.assert_outcomes(failed=1, passed=1)
    with_xdist = pytester.runpytest(*RACES, *LEAN, "-n", "2", "--acklab-out", "workers")
    with_xdist.assert_outcomes(failed=1, passed=1)
    assert "concurrent-duplicates: FAIL" in with_xdist.stdout.str()
    # Both workers wrote their bundles into the one evidence directory, each intact.
    bundles = [p.parent for p in (pytester.path / "workers").glob("*/run.json")]
    assert len(bundles) == 2
    assert all(acklab.verify_bundle(b).ok for b in bundles)
    # `acklab evidence verify` reads the directory: both bundles, and the journal both wrote to.
    with pytest.raises(SystemExit) as verified:
        main(["evidence", "verify", str(pytester.path / "workers")])
    assert verified.value.code == 0


def test_webhook_experiment_without_the_marker_says_what_to_add(pytester):
    pytester.makepyfile(
        test_unmarked="def test_one(webhook_experiment):\n    pass\n",
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    assert "webhook_experiment is given by @pytest.mark.webhook_spec(...)" in result.stdout.str()


def test_a_marker_naming_an_unknown_experiment_is_a_usage_error(pytester):
    pytester.makepyfile(
        test_bad="""
import pytest

@pytest.mark.webhook_spec(experiments=["lost-akc"])
def test_one(webhook_lab, webhook_experiment):
    pass
""",
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret != 0
    assert "Did you mean 'lost-ack'?" in result.stdout.str() + result.stderr.str()
