"""The public API of ``acklab`` (after httpx's tests/test_exported_members.py).

Every name in ``__all__`` exists and is documented; nothing public is missing from it; and
``import acklab`` stays cheap: the names are imported on first use.
"""

from __future__ import annotations

import dataclasses
import inspect
import subprocess
import sys
import types
from collections.abc import Callable

import pytest

import acklab


def test_all_has_no_duplicates():
    # (its order is ruff's: RUF022 sorts __all__ isort-style)
    assert len(acklab.__all__) == len(set(acklab.__all__))


@pytest.mark.parametrize("name", acklab.__all__)
def test_every_exported_name_exists_and_is_documented(name):
    value = getattr(acklab, name)
    if inspect.isclass(value) or inspect.isfunction(value):
        assert inspect.getdoc(value), f"acklab.{name} has no docstring"
    # Constants, and classes and functions alike, are listed in the package's docstring.
    assert f"``{name}" in (acklab.__doc__ or ""), f"acklab.{name} is not in acklab's docstring"
    assert name in dir(acklab)


def test_nothing_public_is_missing_from_all():
    for name in acklab.__all__:
        getattr(acklab, name)  # every lazy name resolved: the namespace now holds all of them
    public = {
        name
        for name, value in vars(acklab).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public == set(acklab.__all__) - {"__version__"}


def test_an_unknown_name_is_an_attribute_error_naming_it():
    with pytest.raises(AttributeError, match="module 'acklab' has no attribute 'attak'"):
        acklab.attak  # noqa: B018


def test_import_acklab_imports_nothing_of_the_lab():
    code = (
        "import sys, acklab; "
        "print(sorted(m for m in sys.modules if m.startswith('acklab.') or m.split('.')[0] in "
        "('httpx', 'fastapi', 'sqlalchemy', 'jsonschema', 'click', 'pytest')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_classes_a_caller_meets_are_exported():
    # What acklab.attack takes and returns, and what the pytest fixture is, are importable from acklab.
    assert {"Sinks", "ExploreResult", "WebhookLab", "TargetSpec", "AttackOptions", "RunKeywords"} <= set(
        acklab.__all__
    )


def test_the_front_door_takes_typed_keywords_shared_with_the_pytest_fixture():
    # One TypedDict per door, the same for acklab.* and webhook_lab.*: mypy checks every caller's keywords.
    doors: dict[Callable[..., object], str] = {
        acklab.run: "RunKeywords",
        acklab.attack: "AttackOptions",
        acklab.WebhookLab.run: "RunKeywords",
        acklab.WebhookLab.attack: "AttackOptions",
        acklab.WebhookLab.explore: "ExploreOptions",
    }
    for door, keywords in doors.items():
        options = inspect.signature(door).parameters["options"]
        assert options.kind is inspect.Parameter.VAR_KEYWORD
        assert options.annotation == f"Unpack[{keywords}]", door
    # acklab.run's keywords are RunOptions' fields, beside the target it takes first.
    fields = [f.name for f in dataclasses.fields(acklab.RunOptions) if f.name != "target"]
    assert list(acklab.RunKeywords.__annotations__) == fields
    # attack's keywords include every section of a spec the app may be given over its spec file.
    from acklab.harness.specs.target import FIELDS

    assert set(FIELDS) <= set(acklab.AttackOptions.__annotations__)
    assert set(FIELDS) <= set(acklab.ExploreOptions.__annotations__)


def test_an_unknown_keyword_names_the_nearest_and_the_options():
    with pytest.raises(
        TypeError, match=r"acklab.attack\(\): unexpected keyword 'endpont' \(did you mean 'endpoint'\?\)"
    ):
        acklab.attack(object(), endpont="/webhooks")  # type: ignore[call-arg]  # a caller mypy does not check


def test_a_result_and_a_prepared_run_are_frozen(tmp_path):
    from acklab.harness.engine.runner import Prepared, prepare

    result = acklab.run("fixture:live", experiments="lost-ack", trials=1, seed=1, out=tmp_path)
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.rerun = "again"  # type: ignore[misc]
    assert result.but(rerun="again").rerun == "again"
    assert result.rerun is None
    prepared = prepare(acklab.RunOptions(target="fixture:live", experiments=("lost-ack",), trials=1, seed=1))
    assert isinstance(prepared, Prepared)
    with pytest.raises(dataclasses.FrozenInstanceError):
        prepared.run_id = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        prepared.finished["lost-ack"] = None  # type: ignore[index]
