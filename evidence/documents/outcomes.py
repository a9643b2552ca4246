"""How one side of a delivery attempt ended, as a value (``sender_outcome``, ``handler_outcome``).

Verdicts read outcomes, never error messages: rewording a message or a library renaming an
exception must not flip a verdict. The harness records both outcomes on every delivery it
writes. Bundles written before that hold only the error text (``"sender: timeout: ...;
handler: ReadTimeout: ..."``); `legacy_outcomes` reads it, once, the way the verdicts of that
time read it — so an old bundle re-judges to the verdicts it was written with.
"""

from __future__ import annotations

from typing import Literal

Outcome = Literal["answered", "timed-out", "reset", "refused", "cut-by-lab", "no-answer", "error"]
OUTCOMES: tuple[Outcome, ...] = (
    "answered",
    "timed-out",
    "reset",
    "refused",
    "cut-by-lab",
    "no-answer",
    "error",
)

_HANDLER = "handler: "
_SENDER = "sender: "
# What the error text of a side began with, by outcome (the exception's class name, as recorded).
_REFUSED = ("ConnectError", "ConnectTimeout")
_RESET = ("RemoteProtocolError", "ReadError", "WriteError")
# The lab's own faults said so in their messages (lost-ack-reset's reset, a withheld answer).
_CUT = ("(fault reset)", "(killed-after-answer)")


def _sides(error: str | None) -> tuple[str | None, str | None]:
    """(the sender's text, the handler's text) of a recorded ``error``."""
    if not error:
        return None, None
    if error.startswith(_HANDLER):
        return None, error.removeprefix(_HANDLER)
    cut = error.rfind("; " + _HANDLER)
    if cut < 0:
        return error.removeprefix(_SENDER), None
    return error[:cut].removeprefix(_SENDER), error[cut + 2 + len(_HANDLER) :]


def _sender(text: str | None) -> Outcome:
    if text is None:  # nothing recorded (the handler's side, if anything, says why)
        return "no-answer"
    if text.startswith("timeout:"):  # every httpx timeout the sender met was recorded so
        return "timed-out"
    if any(mark in text for mark in _CUT):
        return "cut-by-lab"
    return _by_class(text)


def _handler(text: str | None) -> Outcome:
    if text is None:
        return "no-answer"
    if text == "no answer reached the lab":  # the lab stopped waiting before the handler's side ended
        return "cut-by-lab"
    if text.startswith("ReadTimeout"):  # the lab's bound per delivery; other timeouts were not "hung"
        return "timed-out"
    return _by_class(text)


def _by_class(text: str) -> Outcome:
    if text.startswith(_REFUSED):
        return "refused"
    if text.startswith(_RESET):
        return "reset"
    return "error"


def legacy_outcomes(
    status: int | None, sender_status: int | None, error: str | None
) -> tuple[Outcome, Outcome]:
    """(sender outcome, handler outcome) of a delivery recorded without them, from its error text."""
    sender_text, handler_text = _sides(error)
    sender: Outcome = "answered" if sender_status is not None else _sender(sender_text)
    handler: Outcome = "answered" if status is not None else _handler(handler_text)
    return sender, handler
