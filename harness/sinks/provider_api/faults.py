"""How the provider's API misbehaves for one event's objects, while an experiment holds the fault armed.

Each fault is a small frozen value with one question — does it answer this call? — and is
armed for one event (`Faults.arm`) until the experiment lifts it (`Faults.disarm`: the
provider's own commit has landed, its replica caught up, the rate window passed). What it
covers is the event and the objects it made or changed:

* `Lag`: a read of an object the event first made — or of the event itself — is answered
  ``404 resource_missing``, as from a replica that has not seen the write yet;
* `Stale`: a read of one of its objects is answered with the version before the event;
* `Throttle`: any call on its objects is answered ``429 rate_limit`` with ``Retry-After``;
* `Unavailable`: a call that would change one of its objects is answered ``503``.

A fault answer never reaches the idempotency layer: Stripe saves an answer only once the
endpoint began executing, so a consumer's retry with the same key runs for real.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar, Literal

ServedFault = Literal["lag", "stale", "throttled", "unavailable"]


@dataclass(frozen=True)
class Call:
    """What one API call touches: the objects it reads or changes (and events it reads), and whether it writes."""

    method: str
    path: str
    objects: tuple[str, ...]
    write: bool


class ApiFault(ABC):
    """One way the API answers calls on an armed event's objects."""

    name: ClassVar[ServedFault]

    @abstractmethod
    def answers(self, call: Call, *, event_id: str, made: frozenset[str], touched: frozenset[str]) -> bool:
        """Whether this fault answers `call` (`made`: the objects `event_id` first made; `touched`:
        every object it made or changed)."""


@dataclass(frozen=True)
class Lag(ApiFault):
    name: ClassVar[ServedFault] = "lag"

    def answers(self, call: Call, *, event_id: str, made: frozenset[str], touched: frozenset[str]) -> bool:
        return not call.write and any(o == event_id or o in made for o in call.objects)


@dataclass(frozen=True)
class Stale(ApiFault):
    name: ClassVar[ServedFault] = "stale"

    def answers(self, call: Call, *, event_id: str, made: frozenset[str], touched: frozenset[str]) -> bool:
        return not call.write and any(o in touched for o in call.objects)


@dataclass(frozen=True)
class Throttle(ApiFault):
    name: ClassVar[ServedFault] = "throttled"
    retry_after_s: int = 1

    def answers(self, call: Call, *, event_id: str, made: frozenset[str], touched: frozenset[str]) -> bool:
        return any(o == event_id or o in touched for o in call.objects)


@dataclass(frozen=True)
class Unavailable(ApiFault):
    name: ClassVar[ServedFault] = "unavailable"
    status: int = 503

    def answers(self, call: Call, *, event_id: str, made: frozenset[str], touched: frozenset[str]) -> bool:
        return call.write and any(o in touched for o in call.objects)


@dataclass(frozen=True)
class Armed:
    """A fault armed for one event, over the objects that event made and touched."""

    event_id: str
    fault: ApiFault
    made: frozenset[str]
    touched: frozenset[str]


@dataclass
class Faults:
    """The faults armed now, by event (the API's thread reads them, the lab's loop arms them)."""

    _lock: threading.Lock = field(default_factory=threading.Lock)
    _armed: dict[str, Armed] = field(default_factory=dict)

    def arm(self, armed: Armed) -> None:
        with self._lock:
            self._armed[armed.event_id] = armed

    def disarm(self, event_id: str) -> None:
        with self._lock:
            self._armed.pop(event_id, None)

    def answering(self, call: Call) -> Armed | None:
        """The armed fault that answers `call` (None: the API answers it as it should)."""
        with self._lock:
            armed = list(self._armed.values())
        return next(
            (a for a in armed if a.fault.answers(call, event_id=a.event_id, made=a.made, touched=a.touched)),
            None,
        )
