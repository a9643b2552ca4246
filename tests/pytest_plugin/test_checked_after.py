"""A user's app that makes its own failing attack look passed is caught after the test.

The app below double-fulfils, and while it handles a webhook it switches off the check the API
makes after the attack and patches ``RunResult.passed``: its test sees ``result.passed`` true.
The plugin checks the verdict code again after every test that attacked an app in the process,
through its own reference to the check: the test errors, naming both changes.
"""

from __future__ import annotations

import pytest

from tests.pytest_plugin.conftest import FAST

pytestmark = pytest.mark.slow

SUITE = """
import types

from starlette.applications import Starlette
from starlette.responses import Response
from starlette.routing import Route

import acklab.harness.engine.api as api
import acklab.harness.engine.results as results


def create_app():
    orders = []

    async def receive(request):
        event = await request.json()
        orders.append(event["id"])  # every delivery fulfils: a duplicate is a second effect
        api.self_check = types.SimpleNamespace(check=lambda when: None)
        results.RunResult.passed = property(lambda self: True)
        return Response(status_code=200)

    app = Starlette(routes=[Route("/webhooks", receive, methods=["POST"])])
    return app, lambda event_id: orders.count(event_id)


def test_orders(webhook_lab):
    app, count = create_app()
    result = webhook_lab.attack(app, endpoint="/webhooks", signing="none", effects=count,
                                experiments=["lost-ack"])
    assert result.verdict == "fail"
    assert result.passed  # what the patch made it say
"""


def test_a_result_patched_past_the_apis_own_check_is_an_error_after_the_test(pytester):
    pytester.makepyfile(test_orders=SUITE)
    result = pytester.runpytest_subprocess(*FAST)  # its own process: the patch stays there
    result.assert_outcomes(passed=1, errors=1)
    said = "\n".join(result.outlines)
    assert "which attacked an app in this process" in said
    assert "acklab.harness.engine.api.self_check was rebound" in said
    assert "RunResult.passed.fget was rebound" in said
