"""Targets from spec files (``kind: target``, docs/targets.md): a user's own webhook endpoint."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar, Literal
from urllib.parse import urlsplit

from acklab.evidence.documents.incident import IncidentTarget
from acklab.evidence.redaction import redact, remember
from acklab.harness.errors import ForeignService, HarnessError, SpecError, TargetUnreachable
from acklab.harness.procs.confinement import Confined
from acklab.harness.procs.leased_process import live_members
from acklab.harness.procs.leases import current_book
from acklab.harness.procs.listener import Listener, in_ci, listener_of
from acklab.harness.procs.replicas import ReplicaSet, Restart, restart
from acklab.harness.procs.service_process import (
    DEFAULT_READY_TIMEOUT_S,
    Command,
    ServiceProcess,
    describe_rule,
    host_port,
    wait_ready,
)
from acklab.harness.services import Services
from acklab.harness.sinks import Sinks, sink_configs
from acklab.harness.specs.credentials import check_wire_value, resolve_env, shown
from acklab.harness.specs.target import (
    ProviderApiEffects,
    SqlEffects,
    TargetSpec,
    load_target_spec,
)
from acklab.harness.targets import fleet as fleets
from acklab.harness.targets import queues as queueing
from acklab.harness.targets.base import Endpoint, Needs, Target, is_loopback
from acklab.harness.targets.capabilities import Capabilities, Missing
from acklab.harness.targets.effects import (
    OBJECT_PARAMETER,
    OBJECT_PLACEHOLDER,
    EffectsProbe,
    HttpProbe,
    SqlProbe,
)
from acklab.harness.targets.fleet import Fleet
from acklab.harness.targets.isolation import Isolation
from acklab.harness.targets.objects import ObjectEvents, ObjectReads
from acklab.harness.targets.prepare import Preparer
from acklab.harness.targets.queues import Queueing
from acklab.harness.targets.served_parts import (
    Served,
    ServedEffects,
    database_server,
    resolve_headers,
    retired_secret,
    served_parts,
    sql_url,
    with_competitor_url,
)
from acklab.harness.targets.spec_checks import (
    check_target_doc,
    conflict_set,
)
from acklab.harness.targets.state import HttpState, SqlState, StateProbe
from acklab.harness.targets.templates import TemplatedSetup, plan
from acklab.harness.targets.totals import TotalProbe
from acklab.harness.wire.providers import profile
from acklab.harness.wire.signing import SIGNERS, Attempt
from acklab.harness.wire.transports import socket_transport

NEEDS_COMMAND = (
    "a target spec without command: runs nothing the lab could kill and restart; add command: (argv that "
    "starts the service on the endpoint's port) so the lab can start, kill and restart it"
)
# The event type of the lab's readiness probe delivery: one no consumer handles.
ROUTE_PROBE_TYPE = "acklab.readiness-probe"

__all__ = ["ServiceEndpoint", "SpecTarget", "check_target_doc", "load_target", "resolve_env"]


@dataclass
class ServiceEndpoint(Endpoint):
    """A spec target's endpoint; `process` is the service of its ``command:`` (None without one)."""

    service: ServiceProcess | ReplicaSet | None = None  # the same as `process`, as the lab started it
    probe_url: str | None = None  # effects.http.url, when the probe is HTTP
    services: Services | None = None  # services: the lab started for the consumer

    def restart(self) -> Restart | None:
        if self.service is None:
            return None
        return restart(self.service)

    def consumer_pids(self) -> list[int]:
        processes = self.service.replicas if isinstance(self.service, ReplicaSet) else [self.service]
        leaders = [p.pid for p in processes if p is not None and p.pid is not None and p.running()]
        return [member for leader in leaders for member in live_members(leader)]

    def service_clocks(self) -> dict[str, float | None]:
        return self.services.clocks() if self.services is not None else {}

    def probe_served_by_process(self) -> bool:
        """Whether the effects probe is an HTTP endpoint of the very service the lab may kill."""
        return (
            self.process is not None
            and self.probe_url is not None
            and host_port(self.probe_url) == host_port(self.url)
        )


@dataclass
class SpecTarget(Target):
    """A target described by a spec file; always reached through a real socket."""

    socket_only: ClassVar[bool] = True
    effects: ServedEffects = field(default_factory=ServedEffects, repr=False)  # env: values read
    source: str = ""
    command: Command | None = None
    service: ServiceProcess | ReplicaSet | None = field(default=None, repr=False)
    # services:, topology: and the consumer's clock (harness.targets.fleet)
    fleet: Fleet = field(default_factory=Fleet, repr=False)
    # workers: and queues: (harness.targets.queues)
    queueing: Queueing = field(default_factory=Queueing, repr=False)
    endpoint_ref: str = ""  # the spec's endpoint as written (env:NAME, or the URL)
    # A spec with run placeholders, until `bind` fills them for the service about to be served.
    unbound: _Unbound | None = field(default=None, repr=False)
    isolation: Isolation | None = field(default=None, repr=False)
    workdir: Path | None = None  # where command: runs without cwd:, and whose commit is recorded
    # A service the lab did not start: who listens on its endpoint (harness.procs.listener).
    allow_foreign_service: bool = False
    listener: Listener | None = field(default=None, repr=False)
    sinks: Sinks | None = field(default=None, repr=False)  # effects.smtp / effects.outbound, the whole run
    preparer: Preparer | None = field(default=None, repr=False)  # prepare: (harness.targets.prepare)
    _sink_rows: SqlProbe | None = field(default=None, repr=False)
    # The endpoint and command of each replica beyond the first (topology.replicas), once bound.
    _replica_parts: list[tuple[str, Command]] = field(default_factory=list, repr=False)
    # command: as loaded, run placeholders unfilled: what decides whether a setup's template fits.
    loaded_command: Command | None = field(default=None, repr=False)

    @property
    def ephemeral_effects(self) -> bool:
        """Whether the effects live in a store made for this run ({{scratch}}, {{database_url}}):
        a resumed run serves a fresh one, and cannot re-read what an earlier process counted."""
        return self.unbound is not None and bool(self.unbound.names & {"scratch", "database_url"})

    def capabilities(self) -> Capabilities:
        # The sinks and the provider's API as the spec asks for them: known before they start.
        sections = self.effects.sinks.values()
        api = next((s.provider for s in sections if isinstance(s, ProviderApiEffects)), None)
        offered = dataclasses.replace(
            super().capabilities(),
            sinks=tuple(self.effects.sinks),
            queue=self.queueing.capability(),
        )
        if api is not None:
            offered = dataclasses.replace(offered, provider_api=api)
        if self.command is None:
            return dataclasses.replace(offered, process=Missing(NEEDS_COMMAND))
        no_clock = self.fleet.clock_unavailable(self.command)
        clock: Literal["shifted"] | Missing = Missing(no_clock) if no_clock else "shifted"
        return dataclasses.replace(
            offered, process="killable", clock=clock, restart="deploy", replicas=self.fleet.replicas
        )

    def provision(self) -> None:
        """Allocate this run's port, scratch directory and database, and fill the spec with them
        (once; `aclose` releases them). A spec without run placeholders is bound already."""
        unbound = self.unbound
        if unbound is None or self.isolation is not None:
            return
        server = database_server(unbound.spec)
        isolation = Isolation.allocate(unbound.names, database_server=server, label=self.name)
        try:
            values = {**isolation.values, **self.fleet.allocate(isolation.values)}
            filled = unbound.spec.filled(values)
            parts = served_parts(
                filled, spec_dir=unbound.spec_dir, allow_remote=unbound.allow_remote, workdir=unbound.workdir
            )
            self._replica_parts = self._served_at(values, spec_dir=unbound.spec_dir, workdir=unbound.workdir)
            self.queueing.bind(filled, spec_dir=unbound.spec_dir, workdir=unbound.workdir)
        except BaseException:
            isolation.release()
            self.fleet.stop()
            raise
        self.isolation = isolation
        self.take(parts)
        self.preparer = Preparer.of(filled, sql_url(self.effects), allow_remote=unbound.allow_remote)

    def take(self, parts: Served) -> None:
        """Serve at what `parts` says (a bound spec's endpoint, effects, command and competitor)."""
        self.endpoint, self.effects, self.command = parts.endpoint, parts.effects, parts.command
        self.objects = with_competitor_url(self.objects, parts.competitor_url)

    def start_sinks(self) -> None:
        """Start the spec's sinks (``effects.smtp``, ``effects.outbound``, ``effects.provider_api``) for
        the whole run (once), before the service: a consumer that mails at boot finds its server. Each matched event's rows are read the
        moment a message or call arrives (effects.sql), so a send before the commit shows."""
        if self.sinks is not None:
            return
        configs = sink_configs(self.effects.sinks, self.isolation.values if self.isolation else None)
        if not configs:
            return
        rows_now = None
        if self.effects.sql is not None:
            self._sink_rows = probe = SqlProbe(self.effects.sql.url, self.effects.sql.count)
            rows_now = probe.count_now
        self.sinks = Sinks(configs, rows_now=rows_now)
        self.sinks.start()

    def _served_at(
        self, values: Mapping[str, str], *, spec_dir: Path, workdir: Path | None
    ) -> list[tuple[str, Command]]:
        """Each extra replica's endpoint and command: the spec filled with its own ``{{port}}``."""
        unbound = self.unbound
        if unbound is None:
            return []
        served = []
        for port in self.fleet.ports:
            parts = served_parts(
                unbound.spec.filled({**values, "port": str(port)}),
                spec_dir=spec_dir,
                allow_remote=unbound.allow_remote,
                workdir=workdir,
            )
            if parts.command is None:  # fleets.check: replicas need a command
                raise HarnessError(f"target {self.name!r}: topology.replicas without command:")
            # setup: runs once, before the first replica starts.
            served.append((parts.endpoint, dataclasses.replace(parts.command, setup=None)))
        return served

    def _process(self, command: Command, endpoint: str, **how: Any) -> ServiceProcess:
        routes = functools.partial(self._route_probe_to, endpoint)
        return ServiceProcess(command, endpoint, name=self.name, leases=current_book(), routes=routes, **how)

    def _consumer(self, **how: Any) -> ServiceProcess | ReplicaSet:
        """The consumer's process, or its replicas (``topology.replicas``); `how` for each
        (``after_setup`` for the first only: the setup runs once)."""
        if self.command is None:
            raise HarnessError(f"target {self.name!r}: no command: to start")
        first = self._process(self.command, self.endpoint, templated=self._templated(), **how)
        if self.fleet.replicas == 1:
            return first
        how.pop("after_setup", None)
        return ReplicaSet([first, *(self._process(c, e, **how) for e, c in self._replica_parts)])

    def _confined(self) -> Confined | None:
        """The place the consumer runs in (a checkout served confined); None: the lab's own user."""
        return None

    def _templated(self) -> TemplatedSetup | None:
        """The setup's template (`harness.targets.templates`): what an identical setup made earlier in
        this process, copied into this serve's scratch and database instead of running it again."""
        if self.unbound is None or self.command is None or self.command.setup is None:
            return None
        values = self.isolation.values if self.isolation is not None else {}
        tree = self.command.setup.cwd or self.command.cwd or Path.cwd()
        return plan(
            doc=self.unbound.spec.dump(),
            written=self.loaded_command,
            tree=tree,
            root=tree,
            scratch=Path(values["scratch"]) if "scratch" in values else None,
            database=self.isolation.database if self.isolation is not None else None,
            confined=False,
        )

    def start_service(self) -> None:
        """Start the services of ``services:``, then the service of ``command:`` (its replicas) for the
        run (once); a no-op without one."""
        self.fleet.start_services()
        self.queueing.start(self.fleet.services)
        if self.command is None or (self.service is not None and self.service.running()):
            return
        if self.service is None:
            self.service = self._consumer()
        self.service.start()

    def _route_probe_to(self, endpoint: str) -> tuple[str, str, dict[str, str], bytes]:
        """The lab's readiness probe delivery: signed as every delivery (at the consumer's time, when
        the lab moved its clock), of an event type no consumer handles (its id is never a trial's),
        to `endpoint` (a replica's own)."""
        event_id = f"acklab-ready-{uuid.uuid4().hex[:12]}"
        body = json.dumps({"id": event_id, "type": ROUTE_PROBE_TYPE, "data": {}}).encode()
        attempt = Attempt(
            event_id,
            self.event_type_of({"type": ROUTE_PROBE_TYPE}, ROUTE_PROBE_TYPE),
            body,
            int(self.fleet.clock.now() if self.fleet.clock is not None else time.time()),
            str(uuid.uuid4()),
            datetime.now(UTC).isoformat(),
        )
        return "POST", endpoint, self.delivery_headers(SIGNERS[self.scheme], attempt, self.secret), body

    def _probe(self) -> EffectsProbe:
        rows = self.effects.rows
        if isinstance(rows, SqlEffects):
            return SqlProbe(rows.url, rows.count)
        return HttpProbe(rows.url, rows.json_path, headers=rows.headers, shown=self.effects.http_shown)

    def _state(self) -> StateProbe | None:
        """``effects.sql.state`` or ``effects.http.state_path``: the committed state of one event."""
        sql, http = self.effects.sql, self.effects.http
        if sql is not None:
            return SqlState(sql.url, sql.state) if sql.state is not None else None
        if http is None or http.state_path is None:
            return None
        return HttpState(http.url, http.state_path, headers=http.headers)

    def database_urls(self) -> tuple[str, ...]:
        return (self.effects.sql.url,) if self.effects.sql is not None else ()

    def object_reads(self) -> ObjectReads:
        sql, http = self.effects.sql, self.effects.http
        if sql is not None:
            state = OBJECT_PARAMETER.search(sql.state) is not None if sql.state is not None else None
            return ObjectReads(OBJECT_PARAMETER.search(sql.count) is not None, state)
        if http is None:
            return ObjectReads()
        by_url = OBJECT_PLACEHOLDER.search(http.url) is not None
        return ObjectReads(by_url, by_url if http.state_path is not None else None)

    def describe(self) -> IncidentTarget:
        # An endpoint read from the environment is named by its variable: it may carry a token.
        listener = {"listener": self.listener.describe()} if self.listener is not None else {}
        return super().describe().but(endpoint=shown(self.endpoint_ref, self.endpoint), **listener)

    def check_listener(self, host: str, port: int) -> None:
        """Who serves a service the lab did not start: one outside the job is refused (exit 5) in CI,
        where it may be another job's leftover, and a warning on a developer's machine."""
        if not is_loopback(host):
            return  # another machine's processes: the OS here cannot say
        self.listener = found = listener_of(host, port)
        if found.in_job is not False or self.allow_foreign_service:
            return
        where = shown(self.endpoint_ref, self.endpoint)
        served = f"{where} is served by pid {found.pid} ({found.command or 'command unknown'}), which "
        ci = in_ci()
        if ci is None:
            self.notices.append(
                f"target {self.name!r}: {served}this run did not start ({found.how}); attacked as the service "
                "you started yourself. In CI (CI=true) it would be refused: there it may be another job's "
                "leftover; let the lab start it with command: and {{port}}"
            )
            return
        raise ForeignService(
            f"target {self.name!r}: {served}this job did not start: {found.how}. It may be a server left over "
            f"from another job ({ci}: in CI the check refuses). Let the lab start the service (command: with "
            "{{port}}, docs/ci.md), stop that process, or pass --allow-foreign-service if you started it "
            "yourself (a container's port)"
        )

    def source_dir(self) -> Path | None:
        # The lab cannot see a service's code; the working directory is the best witness
        # (`acklab run` in the service's pipeline runs in its checkout).
        if self.workdir is not None:
            return self.workdir
        try:
            return Path.cwd()
        except OSError:  # the working directory was removed
            return None

    async def preflight(self) -> None:
        await asyncio.to_thread(self.provision)
        await asyncio.to_thread(self.start_sinks)
        await asyncio.to_thread(self.start_service)
        parts = urlsplit(self.endpoint)
        host = parts.hostname or "127.0.0.1"
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout=5)
        except (OSError, TimeoutError) as exc:
            raise TargetUnreachable(
                f"target {self.name!r}: nothing accepts connections at {shown(self.endpoint_ref, self.endpoint)} "
                f"({exc or 'timeout'}); start the service, or fix endpoint in the spec"
            ) from exc
        writer.close()
        await writer.wait_closed()
        if self.command is None:
            await asyncio.to_thread(self.check_listener, host, port)
            # A service the lab did not start may still be booting: wait for it as for our own.
            ready, seen = await asyncio.to_thread(
                functools.partial(wait_ready, self.endpoint, (), DEFAULT_READY_TIMEOUT_S, hang_is_ready=True)
            )
            if not ready:
                where = shown(self.endpoint_ref, self.endpoint)
                raise TargetUnreachable(
                    f"target {self.name!r}: the service at {where} never became ready within "
                    f"{DEFAULT_READY_TIMEOUT_S:g} s (readiness: {describe_rule(where, ())}; last: "
                    f"{redact(seen)}); wait for it to boot, or let the lab start it with command: and "
                    "command.ready"
                )
        probe, state = self._probe(), self._state()
        try:
            await probe.count("acklab-preflight", "acklab-preflight")
            if state is not None:
                await state.read("acklab-preflight", "acklab-preflight")
        finally:
            await probe.aclose()
            if state is not None:
                await state.aclose()

    @asynccontextmanager
    async def serve(self, needs: Needs) -> AsyncIterator[Endpoint]:
        if needs.clock and self.service is not None and self.fleet.clock is None:
            # From now on the consumer and its services run under a clock the lab moves.
            clock = await asyncio.to_thread(self.fleet.use_clock, self.service, self._confined())
            await asyncio.to_thread(self.queueing.use_clock, clock)  # the workers keep the consumer's time
        if self.service is not None and not self.service.running():
            # Down since a crash it did not come back from: try once more for this experiment;
            # its trials are lab errors with the cause when it still does not come back.
            try:
                await asyncio.to_thread(self.service.start)
            except HarnessError as exc:
                raise TargetUnreachable(f"the lab's service is down and did not come back: {exc}") from exc
        await asyncio.to_thread(self.queueing.revive)
        probe, state = self._probe(), self._state()
        origins = self.service.origins if isinstance(self.service, ReplicaSet) else []
        totals = self.expect.totals
        total = (
            TotalProbe(self.effects.sql.url, totals.sum) if totals and self.effects.sql is not None else None
        )
        transport = self.fleet.transport(socket_transport(), origins)
        try:
            yield ServiceEndpoint(
                url=self.endpoint,
                transport=transport,
                probe=probe,
                socket=True,
                state=state,
                process=self.service,
                service=self.service,
                probe_url=self.effects.http.url if self.effects.http is not None else None,
                sinks=self.sinks,
                clock=self.fleet.clock,
                replicas=self.fleet.replicas,
                services=self.fleet.services,
                totals=total,
                queue=self.queueing.control(self.fleet.services),
            )
        finally:
            await probe.aclose()
            if state is not None:
                await state.aclose()
            if total is not None:
                await total.aclose()
            await transport.aclose()

    def sinks_of(self) -> Sinks | None:
        return self.sinks

    def prepare_object(self, event_id: str, order_id: str, object_id: str) -> None:
        if self.preparer is not None:
            self.preparer.run(event_id, order_id, object_id)

    def attachments(self) -> dict[str, bytes]:
        # The service's own output is the only witness of what it did; the writer redacts it.
        log = self.service.log_bytes() if self.service is not None else b""
        services = self.fleet.services.log_bytes() if self.fleet.services is not None else b""
        workers = self.queueing.log_bytes()  # each start of each worker, under its own header
        return {"service.log": log + services + workers} if log or services or workers else {}

    async def aclose(self) -> None:
        if self.service is not None:
            await asyncio.to_thread(self.service.stop)
            self.service.remove_logs()
        await asyncio.to_thread(self.queueing.stop)  # the workers, before the broker they use
        await asyncio.to_thread(self.fleet.stop)  # after the consumer: it may still write on its way down
        if self.sinks is not None:  # after the service: what it sent on its way down still counts
            await asyncio.to_thread(self.sinks.stop)
        if self._sink_rows is not None:
            await self._sink_rows.aclose()
        if self.isolation is not None:
            await asyncio.to_thread(self.isolation.release)


@dataclass(frozen=True)
class _Unbound:
    """A spec whose run placeholders are not filled yet: the spec and how to check it again."""

    spec: TargetSpec
    names: frozenset[str]
    spec_dir: Path
    allow_remote: bool
    workdir: Path | None = None


def load_target(
    path: Path, *, allow_remote: bool, workdir: Path | None = None, allow_foreign_service: bool = False
) -> SpecTarget:
    """Load and check a target spec; refuse remote URLs (exit 5) before any traffic.

    A spec with run placeholders (``{{port}}``, ``{{scratch}}``, ``{{database_url}}``...) is
    checked with stand-ins here and bound to real values when it is served (`SpecTarget.bind`).
    `workdir`: where ``command:`` runs without a ``cwd:`` and whose commit the run records
    (default: the lab's working directory; `--baseline` passes the worktree of its REF).
    """
    spec = load_target_spec(path)
    source = str(path)
    spec.check_placeholders(source=source)
    names = spec.run_placeholders
    fleets.check(spec, names, source=source)
    queueing.check(spec, source=source)
    spec_dir = path.resolve().parent
    checked = spec.stand_in() if names else spec
    check_target_doc(checked, source=source)
    scheme = spec.signing.scheme
    secret = resolve_env(spec.signing.secret or "", field_name="signing.secret")
    remember(secret)
    check_wire_value(secret, field_name="signing.secret", shown="the secret")  # a header, or a header's key
    SIGNERS[scheme].check_secret(secret)
    old_secret = retired_secret(spec.signing)
    if spec.expect.totals is not None and spec.effects.sql is None:
        raise SpecError(
            f"{source}: expect.totals.sum is a query on the consumer's database, but the spec has no effects.sql; "
            "add effects.sql (url, count), or remove expect.totals"
        )
    headers = resolve_headers(spec.headers, field_name="headers")
    parts = served_parts(checked, spec_dir=spec_dir, allow_remote=allow_remote, workdir=workdir)
    competitor = spec.competitor
    return SpecTarget(
        name=spec.name,
        kind="spec",
        handler=spec.name,
        database=parts.database,
        scheme=scheme,
        secret=secret,
        timeout_s=profile(scheme).timeout_s if spec.delivery.timeout_s is None else spec.delivery.timeout_s,
        template=spec.event,
        conflict_set=conflict_set(spec),
        expect=spec.expect,
        headers=headers,
        event_type=spec.delivery.event_type,
        endpoint=parts.endpoint,
        effects=parts.effects,
        command=parts.command,
        objects=with_competitor_url(
            ObjectEvents.from_spec(
                spec,
                competitor_headers=resolve_headers(
                    competitor.headers if competitor is not None else {}, field_name="competitor.headers"
                ),
            ),
            parts.competitor_url,
        ),
        source=source,
        endpoint_ref=spec.endpoint,
        unbound=_Unbound(spec, names, spec_dir, allow_remote, workdir) if names else None,
        workdir=workdir,
        allow_foreign_service=allow_foreign_service,
        fleet=Fleet.of(spec),
        old_secret=old_secret,
        queueing=Queueing.of(spec),
        preparer=Preparer.of(checked, sql_url(parts.effects), allow_remote=allow_remote),
        loaded_command=parts.command,
    )
