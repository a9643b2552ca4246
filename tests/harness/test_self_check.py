"""An app attacked in-process cannot switch verdicts off unseen.

A double-fulfilling app that, while handling a webhook, rebinds the function acklab judges
with (as a hostile or careless app in the same interpreter can) makes its own attack a lab
error naming the module, and every later attack of the process too, until the rebinding is
undone: a later test never sees a double-fulfilling handler pass.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator

import pytest

import acklab.harness.core.verdicts as verdicts
from acklab.evidence.exitcodes import ExitCode
from acklab.harness.core import self_check
from acklab.harness.core.self_check import LabIntegrityError
from tests.harness.test_app_targets import Shop, attack


class Rebinding(Shop):
    """Double-fulfils (unsafe) and, on its first request, makes every verdict a pass."""

    def record(self, event_id: str) -> str:
        if verdicts.judge is self.original:
            verdicts.judge = lambda trial, expect: verdicts.Judgement(trial.trial_id)  # nothing found: a pass
        return super().record(event_id)

    def __init__(self) -> None:
        super().__init__(unsafe=True)
        self.original = verdicts.judge


@pytest.fixture
def restore() -> Iterator[types.SimpleNamespace]:
    kept = types.SimpleNamespace(judge=verdicts.judge, module=sys.modules[verdicts.__name__])
    yield kept
    verdicts.judge = kept.judge
    sys.modules[verdicts.__name__] = kept.module
    assert self_check.problems() == []


def test_an_app_that_rebinds_the_verdict_code_is_a_lab_error_naming_it(tmp_path, restore):
    shop = Rebinding()
    with pytest.raises(LabIntegrityError) as refused:
        attack(shop.asgi(), tmp_path, effects=shop.count, serving="in-process", experiments=["lost-ack"])
    assert refused.value.exit_code == ExitCode.LAB_ERROR
    assert "acklab.harness.core.verdicts.judge was rebound" in str(refused.value)
    assert "during the attack of" in str(refused.value)
    # The next attack of this process (a later test) is refused before it starts.
    honest = Rebinding()
    with pytest.raises(LabIntegrityError, match="before this attack"):
        attack(honest.asgi(), tmp_path / "later", effects=honest.count, serving="in-process")
    assert not (tmp_path / "later").exists()
    # Undone, the same double-fulfilling handler fails as it should.
    verdicts.judge = restore.judge
    unsafe = Shop(unsafe=True)
    result = attack(
        unsafe.asgi(),
        tmp_path / "again",
        effects=unsafe.count,
        serving="in-process",
        experiments=["lost-ack"],
    )
    assert result.exit_code == 1


def test_a_module_replaced_in_sys_modules_is_named(restore):
    sys.modules[verdicts.__name__] = types.ModuleType(verdicts.__name__)
    with pytest.raises(
        LabIntegrityError, match=r"sys.modules\['acklab.harness.core.verdicts'\] is no longer"
    ):
        self_check.check("now")
