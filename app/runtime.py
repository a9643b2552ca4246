"""One running fixture: its settings, its engine and its handler, and how a delivery is run."""

from __future__ import annotations

import importlib
import os
import signal
import time
from dataclasses import dataclass
from typing import cast

from sqlalchemy import Engine

from acklab.app.contract import CheckoutReturn, Delivery, Handler, HandlerResult
from acklab.app.db import write_session
from acklab.app.errors import ConfigError
from acklab.app.notify import NOTIFIER, Notifier
from acklab.app.settings import Settings

HANDLER_MODULES = {"live": "acklab.app.webhooks", "unsafe": "acklab.app.unsafe"}


def load_handler(name: str) -> Handler:
    """The handler module for ``name`` (``live`` or ``unsafe``), checked for ``process``."""
    if name not in HANDLER_MODULES:
        raise ConfigError(f"got handler {name!r}; expected one of {sorted(HANDLER_MODULES)}")
    module = importlib.import_module(HANDLER_MODULES[name])
    if not callable(getattr(module, "process", None)):
        raise ConfigError(
            f"{module.__name__} has no process(session, delivery) function; restore it from git"
        )
    return cast(Handler, module)


@dataclass(frozen=True)
class Fixture:
    """The state of one app instance, kept on ``app.state.fixture``."""

    settings: Settings
    engine: Engine
    handler: Handler

    @property
    def notifier(self) -> Notifier:
        """Where the handler's fulfilments are told (`acklab.app.notify`; none unless configured)."""
        return Notifier(self.settings.smtp_port, self.settings.warehouse_url)

    def deliver(self, delivery: Delivery) -> HandlerResult:
        """Run the handler in one write transaction and commit it (blocking: call from a thread).

        The lab-only processing delay and crash hook live here, outside the handler module,
        so that a repair of ``app/webhooks.py`` can neither remove nor depend on them.
        """
        with write_session(self.engine) as session:
            session.info[NOTIFIER] = self.notifier
            result = self.handler.process(session, delivery)
            if self.settings.processing_delay_ms:
                time.sleep(self.settings.processing_delay_ms / 1000)
            session.commit()
        if self.settings.crash_after_commit:
            crash()
        return result

    def complete_checkout(self, checkout: CheckoutReturn) -> HandlerResult | None:
        """The handler's ``complete_checkout`` in one write transaction, committed (blocking: call
        from a thread); None when the handler module has none."""
        complete = getattr(self.handler, "complete_checkout", None)
        if not callable(complete):
            return None
        with write_session(self.engine) as session:
            session.info[NOTIFIER] = self.notifier
            result: HandlerResult = complete(session, checkout)
            session.commit()
        return result


def crash() -> None:
    """Die at once, as a power cut would: no response, no cleanup, no flushing."""
    os.kill(os.getpid(), signal.SIGKILL)
