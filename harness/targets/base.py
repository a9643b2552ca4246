"""What the lab needs to know about a target, however it is provided (fixture or spec file)."""

from __future__ import annotations

import ipaddress
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal
from urllib.parse import urlsplit

import httpx

from acklab.evidence.documents.incident import IncidentTarget
from acklab.evidence.documents.sinks import SinkLog
from acklab.harness.errors import RemoteRefused, SpecError
from acklab.harness.procs.clock import ShiftedClock
from acklab.harness.procs.replicas import Restart
from acklab.harness.sinks import Sinks
from acklab.harness.specs.credentials import MIN_SECRET_CHARS, redact, url_secrets
from acklab.harness.specs.target import Expect
from acklab.harness.targets.activity import Activity
from acklab.harness.targets.capabilities import (
    NO_PROVIDER_API,
    Capabilities,
    DbLink,
    HookedProcess,
    Missing,
    ProcessControl,
)
from acklab.harness.targets.effects import EffectsProbe
from acklab.harness.targets.objects import ObjectEvents, ObjectReads
from acklab.harness.targets.provenance import Revision, revision_of
from acklab.harness.targets.state import StateProbe
from acklab.harness.targets.totals import TotalProbe
from acklab.harness.wire.providers import event_type_header
from acklab.harness.wire.signing import Attempt, Signer

if TYPE_CHECKING:
    from acklab.harness.targets.queues import QueueControl
__all__ = ["Endpoint", "Expect", "Needs", "Target", "check_local", "is_loopback"]

LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})
NO_PROCESS = "the lab runs no process of this target that it could kill and start again"
NO_DB_LINK = (
    "the lab cannot route this target's database link through its fault proxy: the built-in fixture on "
    "PostgreSQL (--db postgresql+psycopg://...) is the target it can"
)


@dataclass(frozen=True)
class Needs:
    """What an experiment needs of the endpoint it is given."""

    socket: bool = False  # real TCP: concurrency, timeouts and resets need one
    processing_delay_ms: int = 0  # fixture only: simulated work inside the handler's transaction
    clock: bool = False  # the consumer's clock shifted by the lab (`Capabilities.clock`)
    process: bool = False  # the handler's process, to kill and start (`Capabilities.process`)
    db_link: bool = False  # the handler's database link through a fault proxy (`Capabilities.db_link`)


@dataclass
class Endpoint:
    """A served target: where to send, through which transport, and how to count effects."""

    url: str
    transport: httpx.AsyncBaseTransport
    probe: EffectsProbe
    socket: bool
    processing_delay_ms: int = 0
    state: StateProbe | None = None  # effects.sql.state / effects.http.state_path
    sinks: Sinks | None = None  # effects.smtp / effects.outbound (harness.sinks), run for the whole run
    clock: ShiftedClock | None = None  # the consumer's shifted clock (Needs.clock), None: the lab's own
    replicas: int = 1  # processes of the consumer behind the lab's balancer (topology.replicas)
    totals: TotalProbe | None = None  # expect.totals.sum: the consumer's running total of an object
    queue: QueueControl | None = None  # workers: and queues: (harness.targets.queues); None: no queue
    # What the experiment asked for (`Needs`), where the target offers it (`capabilities`).
    process: ProcessControl | None = None
    hooked: HookedProcess | None = None  # the same process, when its handler takes the lab's hooks
    db_link: DbLink | None = None
    # An app served in the lab's own process: what it is still doing (harness.targets.activity).
    activity: Activity | None = None

    def now(self) -> float:
        """The provider's time as the consumer sees it: the lab's clock, plus the shift when there is one."""
        return self.clock.now() if self.clock is not None else time.time()

    def service_state(self) -> tuple[bool, int] | None:
        """(ready, starts) of the process the lab runs for this endpoint; None: it runs none."""
        return None if self.process is None else self.process.state()

    def down(self) -> str | None:
        """Why the lab's own process is down and could not be brought back (None: it is not)."""
        return None if self.process is None else self.process.down_reason

    def probe_served_by_process(self) -> bool:
        """Whether the effects probe is an endpoint of the very process the lab may kill (read it
        only while that process is up)."""
        return False

    def restart(self) -> Restart | None:
        """Stop the lab's own service and start it again, as a deploy does (every replica), and wait
        until it is ready; what happened. None: the lab runs no service for this endpoint."""
        return None

    def consumer_pids(self) -> list[int]:
        """Every live process of the consumer the lab started (each replica's whole process group)."""
        return []

    def service_clocks(self) -> dict[str, float | None]:
        """The clocks of the services the lab started for the consumer (``services:``), by name."""
        return {}


@dataclass
class Target(ABC):
    """A webhook consumer under test plus the way to count its side effects."""

    name: str
    kind: Literal["fixture", "spec", "app"]
    handler: str | None
    endpoint: str
    database: str | None
    scheme: str
    secret: str = field(repr=False)
    timeout_s: float
    template: Mapping[str, Any]
    conflict_set: Mapping[str, Any]
    expect: Expect
    # Processing delays only a built-in fixture can simulate (timeout-overlap uses it).
    can_delay: bool = False
    # Every delivery crosses a real socket, whatever the experiment needs (a spec target, a
    # fixture served from a checkout by a process of its own).
    socket_only: ClassVar[bool] = False
    # Sent with every delivery (a spec's headers:, resolved); every value is a secret.
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    # The provider's event-type header (delivery.event_type); None: from the body.
    event_type: str | None = None
    # Beyond one event: lifecycle:, siblings:, competitor:, expect.order (harness.targets.objects).
    objects: ObjectEvents = field(default_factory=ObjectEvents)
    # signing.rotation: the secret a key rotation retires (key-rotation); None: no rotation.
    old_secret: str | None = field(default=None, repr=False)
    # Why the target cannot speak HTTP/2 when the lab knows it (the single-packet burst is
    # refused with it); None: the endpoint is asked when a run needs HTTP/2.
    http2_refusal: ClassVar[str | None] = None
    # Ids in varied formats and bodies with their fields in a drawn order (`harness.wire.variation`):
    # for a template the lab owns (the fixture), not a provider's shape a spec reproduces.
    varies: ClassVar[bool] = False
    # What the target noticed while it was prepared that a pass should be read with (run.json's
    # warnings; harness.engine.notices): a service outside the job it was allowed to attack.
    notices: list[str] = field(default_factory=list, repr=False, compare=False)

    def event_type_of(self, document: Mapping[str, Any], own: str | None = None) -> str:
        """The provider's event-type header value for one event's body (`own`: the type a lifecycle
        or sibling event names, in the provider's header spelling)."""
        if own is not None:
            return event_type_header(self.scheme, None, {"type": own})
        return event_type_header(self.scheme, self.event_type, document)

    def delivery_headers(self, signer: Signer, attempt: Attempt, secret: str) -> dict[str, str]:
        """The headers of one attempt: JSON, the provider's own (signed), then the spec's ``headers:``."""
        headers = {"Content-Type": "application/json", "User-Agent": "acklab"}
        headers.update(signer.headers(attempt, secret))
        headers.update(self.headers)
        return headers

    def describe(self) -> IncidentTarget:
        """The incident's ``target`` object (never a credential)."""
        return IncidentTarget(
            name=self.name,
            kind=self.kind,
            handler=self.handler,
            endpoint=self.endpoint,
            database=redact(self.database) if self.database else None,
            provider=self.scheme,
            sinks=list(sinks.sources) if (sinks := self.sinks_of()) is not None else None,  # type: ignore[arg-type]
            **self.revision.describe(),
        )

    def source_dir(self) -> Path | None:
        """A folder inside the checkout the handler's code comes from (None: unknown)."""
        return None

    def object_reads(self) -> ObjectReads:
        """Whether the effects and state probes read an event's object (``:object_id``)."""
        return ObjectReads()

    @cached_property
    def revision(self) -> Revision:
        """The handler's commit, read once: the runner pins it before it writes anything, so the
        run's own evidence directory never makes the checkout look dirty."""
        return replace(revision_of(self.source_dir()), handler_sha256=self.handler_sha256())

    def pin_revision(self, revision: Revision) -> None:
        """Record `revision` as the handler's commit instead of reading it (``--baseline``: the
        worktree of REF, where ``CI_COMMIT_SHA`` names the other side's commit)."""
        self.__dict__["revision"] = replace(revision, handler_sha256=self.handler_sha256())

    def handler_sha256(self) -> str | None:
        """The content hash of the handler's own module, where the lab knows it (the fixture)."""
        return None

    @property
    def ephemeral_effects(self) -> bool:
        """Whether the effects live in a store made for this process, gone when it ends (a
        temporary database): a resumed run cannot re-read what an interrupted process counted.
        True unless the target shows otherwise."""
        return True

    def database_urls(self) -> tuple[str, ...]:
        """The database URLs the lab holds for this target (never written: they may carry a password)."""
        return ()

    def credentials(self) -> set[str]:
        """What no written byte may contain: the signing secret, the header values, each database
        password in every spelling."""
        competitor = self.objects.competitor
        shared = (*self.headers.values(), *(competitor.headers.values() if competitor is not None else ()))
        found = {s for s in (self.secret, self.old_secret or "", *shared) if len(s) >= MIN_SECRET_CHARS}
        return found.union(*(url_secrets(url) for url in self.database_urls()))

    def prepare_object(self, event_id: str, order_id: str, object_id: str) -> None:  # noqa: B027 - optional hook
        """Make the object an event is about, once, before the event is sent (a spec's ``prepare:``)."""

    def schema_change(self) -> str | None:
        """How the schema the lab pinned for this target changed (`harness.targets.schema_pin`);
        None when it did not, or when the lab pins none."""
        return None

    def attachments(self) -> dict[str, bytes]:
        """Files for the run's bundle, by bundle path (a spec service's ``service.log``)."""
        return {}

    def sink_logs(self) -> dict[str, SinkLog]:
        """The sinks' logs by name (``smtp``, ``outbound``): the bundle's ``sinks/<name>.json``."""
        sinks = self.sinks_of()
        if sinks is None:
            return {}
        return {name: SinkLog.model_validate(doc) for name, doc in sinks.documents().items()}

    def sinks_of(self) -> Sinks | None:
        """The sinks this target runs for the whole run (None: none)."""
        return None

    def unservable(self, needs: Needs) -> str | None:
        """Why this target cannot be served with `needs` (its experiment is skipped with it), or None."""
        return None

    def capabilities(self) -> Capabilities:
        """What this target can do beyond taking deliveries (`harness.targets.capabilities`); a kind of
        target overrides what it offers over this (`dataclasses.replace`): here, the sinks it runs."""
        sinks = self.sinks_of()
        api = sinks.provider_api if sinks is not None else None
        return Capabilities(
            process=Missing(NO_PROCESS),
            db_link=Missing(NO_DB_LINK),
            sinks=sinks.names if sinks is not None else (),
            provider_api=api.config.provider if api is not None else Missing(NO_PROVIDER_API),
        )

    def provision(self) -> None:  # noqa: B027 - optional hook
        """Allocate what the target holds for the whole run (a temporary database, a scratch
        directory, a private copy): once, in this explicit step of serving; `aclose` releases
        it. Reading an attribute never allocates."""

    def waiting_on(self) -> str | None:
        """The user's code the lab is waiting on right now, in words (a callable that never
        returns: named when the run's deadline ends the wait); None: none."""
        return None

    async def preflight(self) -> None:  # noqa: B027 - optional hook
        """Raise TargetUnreachable/ProbeError before any trial when the target cannot be used."""

    @abstractmethod
    def serve(self, needs: Needs) -> AbstractAsyncContextManager[Endpoint]:
        """Serve (or connect to) the target for one experiment."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release what the target holds for the whole run (a temporary database)."""


def is_loopback(host: str) -> bool:
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_local(url: str, *, field_name: str, allow_remote: bool, shown: str | None = None) -> None:
    """Refuse (exit 5) a URL whose host is off the loopback range, unless allowed.

    `shown` names the URL in messages (``env:NAME`` when it came from the environment: the
    value may carry a token)."""
    name = redact(shown if shown is not None else url)
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SpecError(f"{field_name}: got {name!r}; expected an http(s):// URL with a host")
    if not allow_remote and not is_loopback(parts.hostname):
        raise RemoteRefused(
            f"{field_name} {name!r} is off the loopback range (host {parts.hostname!r}); acklab attacks "
            "it on purpose, so only local targets are allowed. Pass --allow-remote if you own it."
        )
