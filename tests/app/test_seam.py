"""The handler seam: app/webhooks.py and app/unsafe.py are interchangeable, self-contained files."""

from __future__ import annotations

import ast
import importlib.util
import inspect
import sys
from pathlib import Path
from types import ModuleType

import pytest

import acklab.app.unsafe
import acklab.app.webhooks
from acklab.app import runtime
from tests.app.conftest import MakeClient, new_event_id, order_event, standard_headers

HANDLERS = {"live": Path(acklab.app.webhooks.__file__), "unsafe": Path(acklab.app.unsafe.__file__)}
# What a handler file may import from the fixture: the contract, the models, the dialect helper.
HANDLER_MAY_IMPORT = {"acklab.app.contract", "acklab.app.models", "acklab.app.db", "acklab.app.notify"}


def _load_copy(path: Path, name: str) -> ModuleType:
    """Load a handler file under another module name, as if it had been copied elsewhere."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_both_handlers_expose_the_same_interface() -> None:
    for module in (acklab.app.webhooks, acklab.app.unsafe):
        public = {
            name
            for name, value in vars(module).items()
            if inspect.isfunction(value) and value.__module__ == module.__name__ and not name.startswith("_")
        }
        assert public == {"process", "complete_checkout"}, module.__name__
    assert inspect.signature(acklab.app.webhooks.process) == inspect.signature(acklab.app.unsafe.process)
    assert inspect.signature(acklab.app.webhooks.complete_checkout) == inspect.signature(
        acklab.app.unsafe.complete_checkout
    )


@pytest.mark.parametrize("path", HANDLERS.values(), ids=HANDLERS.keys())
def test_a_handler_file_imports_only_the_contract(path: Path) -> None:
    imported = {
        node.module
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("acklab")
    }
    assert imported <= HANDLER_MAY_IMPORT
    assert not any(
        alias.name.startswith("acklab")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Import)
        for alias in node.names
    )


@pytest.mark.parametrize(("copied", "expected_effects"), [("unsafe", 2), ("live", 1)])
def test_copying_one_handler_over_the_other_yields_a_working_app(
    make_client: MakeClient, monkeypatch: pytest.MonkeyPatch, copied: str, expected_effects: int
) -> None:
    name = f"acklab_copied_{copied}_handler"
    monkeypatch.setitem(sys.modules, name, _load_copy(HANDLERS[copied], name))
    # The app serves "live" from whatever file now sits where app/webhooks.py was.
    monkeypatch.setitem(runtime.HANDLER_MODULES, "live", name)
    client = make_client(handler="live")
    event_id = new_event_id()
    body = order_event(event_id)

    responses = [client.deliver(body, standard_headers(event_id, body)) for _ in range(2)]

    assert [r.status_code for r in responses] == [200, 200]
    assert client.effects(event_id) == expected_effects
