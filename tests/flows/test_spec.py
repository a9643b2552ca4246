"""The flow spec: the shipped one validates; bad ones are refused with the value and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from acklab.flows.errors import FlowSpecInvalid
from acklab.flows.spec import load_spec, parse_spec
from tests.flows.conftest import ROOT

SPEC = ROOT / "flows" / "repair.yaml"


def spec_doc() -> dict:
    return yaml.safe_load(SPEC.read_text())


def test_the_shipped_spec_is_valid_and_scoped_to_the_handler():
    spec = load_spec(SPEC)
    assert spec.scope.allow == ("app/webhooks.py",)
    for denied in [
        "tests/",
        "harness/",
        "flows/",
        "evidence/schemas/",
        ".gitlab-ci.yml",
        ".ci/",
        "pyproject.toml",
        "Makefile",
    ]:
        assert denied in spec.scope.deny
    assert spec.limits.max_files == 1
    assert spec.checkpoints == (
        "reproduce",
        "propose",
        "approve",
        "apply",
        "verify",
        "strike-again",
        "publish",
    )
    assert spec.proposer == "recipe"
    assert len(spec.sha256) == 64


@pytest.mark.parametrize(
    ("path", "allowed"),
    [
        ("app/webhooks.py", True),
        ("app/unsafe.py", False),
        ("tests/test_x.py", False),
        ("tests/app/test_handler.py", False),
        (".gitlab-ci.yml", False),
        ("flows/repair.yaml", False),
        ("evidence/schemas/trail.schema.json", False),
        ("Makefile", False),
    ],
)
def test_scope(path, allowed):
    assert load_spec(SPEC).scope.permits(path) is allowed


def test_deny_wins_over_allow():
    doc = spec_doc()
    doc["scope"] = {"allow": ["app/*"], "deny": ["app/unsafe.py"]}
    scope = parse_spec(doc).scope
    assert scope.permits("app/webhooks.py")
    assert not scope.permits("app/unsafe.py")
    assert "denied by scope rule 'app/unsafe.py'" in (scope.why_not("app/unsafe.py") or "")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(kind="target"), "kind"),
        (lambda d: d["scope"].update(allow=["/etc/passwd"]), "scope/allow/0"),
        (lambda d: d["scope"].update(allow=["app/../tests/x.py"]), "scope/allow/0"),
        (
            lambda d: d.update(checkpoints=["reproduce", "approve", "propose", "apply", "verify", "publish"]),
            "order",
        ),
        (
            lambda d: d.update(
                checkpoints=["reproduce", "propose", "apply", "verify", "strike-again", "publish"]
            ),
            "missing",
        ),
        (lambda d: d["experiments"].update(strike_again=["lost-ack"]), "both"),
        (lambda d: d["limits"].update(max_files=0), "limits/max_files"),
        (lambda d: d["proposer"].update(retries=2), "proposer/retries"),
    ],
)
def test_invalid_specs_are_refused_with_exit_3(change, message):
    doc = spec_doc()
    change(doc)
    with pytest.raises(FlowSpecInvalid) as info:
        parse_spec(doc, what="repair.yaml")
    assert message in str(info.value)
    assert int(info.value.exit_code) == 3


def test_a_missing_spec_names_the_path_and_the_fix(tmp_path: Path):
    with pytest.raises(FlowSpecInvalid, match=r"cannot read the flow spec .*nope.yaml.*flows/repair.yaml"):
        load_spec(tmp_path / "nope.yaml")
