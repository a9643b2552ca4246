"""An app attacked in-process cannot make its failing run report ``passed: True`` by patching
what the caller reads the verdict through: `RunResult` (its properties too), the API module, or
the public ``acklab`` names. Each patch below is made by a double-fulfilling app while it
handles a webhook; each is a lab error naming what was changed (`harness.core.self_check`).
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import acklab
import acklab.harness.engine.api
import acklab.harness.engine.results
from acklab.harness.core import self_check
from acklab.harness.core.self_check import LabIntegrityError
from tests.harness.test_app_targets import Shop, attack

# The modules as a hostile app sees them: anything may be assigned to anything.
results: Any = acklab.harness.engine.results
api: Any = acklab.harness.engine.api
public: Any = acklab


def _always_passed() -> Any:
    return property(lambda self: True)


def _fake_code(_: Any) -> None:
    results.RunResult.passed.fget.__code__ = (lambda self: True).__code__


def _class_swapped(_: Any) -> None:
    class Passing(acklab.harness.engine.results.RunResult):
        passed = _always_passed()

    results.RunResult = Passing


def _hook_added(_: Any) -> None:
    def lie(self: Any, name: str) -> Any:
        return True if name == "passed" else object.__getattribute__(self, name)

    results.RunResult.__getattribute__ = lie


def _public_name(_: Any) -> None:
    public.attack = lambda *args, **kwargs: None


def _checker_bypassed(_: Any) -> None:
    api.self_check = types.SimpleNamespace(check=lambda when: None)


PATCHES: dict[str, tuple[Callable[[Any], None], str]] = {
    "property-replaced": (
        lambda _: setattr(results.RunResult, "passed", _always_passed()),
        "acklab.harness.engine.results.RunResult.passed.fget was rebound",
    ),
    "property-code-swapped": (_fake_code, "RunResult.passed.fget had its code replaced"),
    "class-swapped": (_class_swapped, "acklab.harness.engine.results.RunResult was rebound"),
    "attribute-hook-added": (_hook_added, "RunResult.__getattribute__ was added"),
    "public-name-rebound": (_public_name, "acklab.attack is no longer"),
}


class Patching(Shop):
    """Double-fulfils (unsafe) and, on its first request, applies `patch`."""

    def __init__(self, patch: Callable[[Any], None]) -> None:
        super().__init__(unsafe=True)
        self.patch, self.done = patch, False

    def record(self, event_id: str) -> str:
        if not self.done:
            self.done = True
            self.patch(self)
        return super().record(event_id)


@pytest.fixture
def restore() -> Iterator[None]:
    kept_class = results.RunResult
    kept_members = dict(vars(results.RunResult))
    kept_code = results.RunResult.passed.fget.__code__
    kept_attack = vars(public).get("attack")
    kept_checker = api.self_check
    yield
    results.RunResult = kept_class
    for name in set(vars(kept_class)) - set(kept_members):
        delattr(kept_class, name)
    for name in ("passed", "__getattribute__"):
        if name in kept_members:
            setattr(kept_class, name, kept_members[name])
    kept_class.passed.fget.__code__ = kept_code
    if kept_attack is None:
        vars(public).pop("attack", None)
    else:
        public.attack = kept_attack
    api.self_check = kept_checker
    assert self_check.problems() == []


@pytest.mark.parametrize("patch", list(PATCHES))
def test_a_failing_app_cannot_patch_its_result_into_a_pass(tmp_path, restore, patch):
    apply, named = PATCHES[patch]
    shop = Patching(apply)
    with pytest.raises(LabIntegrityError) as refused:
        attack(shop.asgi(), tmp_path, effects=shop.count, serving="in-process", experiments=["lost-ack"])
    assert named in str(refused.value)
    assert "during the attack of" in str(refused.value)


def test_a_bypassed_check_is_still_seen_by_the_next_check_of_the_process(tmp_path, restore):
    # The app swaps the API's own checker and patches the result: this attack cannot see it, the
    # next check made from anywhere else does (the pytest plugin's, after the test; the next attack's).
    def both(_: Any) -> None:
        _checker_bypassed(_)
        results.RunResult.passed = _always_passed()

    shop = Patching(both)
    result = attack(shop.asgi(), tmp_path, effects=shop.count, serving="in-process", experiments=["lost-ack"])
    assert result.verdict == "fail"  # the run document says what happened
    found = self_check.problems()
    assert "acklab.harness.engine.api.self_check was rebound" in "; ".join(found)
    assert "RunResult.passed.fget was rebound" in "; ".join(found)


def test_the_watched_modules_are_intact_in_a_fresh_process():
    assert self_check.problems() == []
    assert "acklab.harness.engine.results" in self_check.WATCHED
    assert "acklab.harness.engine.api" in self_check.WATCHED
    assert sys.modules["acklab.harness.engine.results"] is results
