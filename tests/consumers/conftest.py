"""The consumers' secrets in the lab's environment (their target specs name them with env:)."""

from __future__ import annotations

import pytest

from tests.consumers.scenarios import SECRETS


@pytest.fixture(autouse=True)
def _consumer_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in SECRETS.items():
        monkeypatch.setenv(key, value)
