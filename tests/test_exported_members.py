"""The public API of ``acklab`` (after httpx's tests/test_exported_members.py).

Every name in ``__all__`` exists and is documented; nothing public is missing from it; and
``import acklab`` stays cheap: the names are imported on first use.
"""

from __future__ import annotations

import inspect
import subprocess
import sys
import types

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
