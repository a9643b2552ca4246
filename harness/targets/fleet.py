"""A spec's consumer as production runs it: ``services:``, ``topology: {replicas: N}``, and its clock.

Read in one place (`Fleet.of`, from the `TargetSpec`'s ``services`` and ``topology``) and used by the spec targets at four
moments: when the run placeholders are filled (`allocate`: the services' ports, one more
``{{port}}`` per replica), when the consumer starts (`start_services` before it), when an
experiment needs the consumer's clock shifted (`use_clock`: the services and the consumer are
restarted once under libfaketime), and at the end (`stop`).
Deliveries reach the replicas through the `Balancer` transport (`transport`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import httpx

from acklab.harness.errors import SpecError
from acklab.harness.ports import free_port
from acklab.harness.procs import clock as clocks
from acklab.harness.procs.clock import ShiftedClock
from acklab.harness.procs.confinement import Confined
from acklab.harness.procs.replicas import ReplicaSet
from acklab.harness.procs.service_process import Command, ServiceProcess
from acklab.harness.services import Services
from acklab.harness.services import check as check_services
from acklab.harness.specs.target import TargetSpec
from acklab.harness.wire.balancer import Balancer

MAX_REPLICAS = 16
NO_COMMAND = (
    "the lab shifts the clock only of processes it starts: give the spec a command: (argv that serves the "
    "consumer) so the lab can start it under libfaketime"
)


def check(spec: TargetSpec, used: frozenset[str], *, source: str) -> None:
    """Refuse (exit 3) services the lab cannot start, and replicas without a command or a port of their own."""
    check_services(list(spec.services), used, source=source)
    replicas = spec.topology.replicas
    if replicas > 1 and (spec.command is None or "port" not in used):
        raise SpecError(
            f"{source}: topology.replicas is {replicas}: the lab starts command: that many times, each on a "
            "{{port}} of its own; add command: and use {{port}} in the endpoint and the command"
        )


@dataclass
class Fleet:
    """What the lab runs for one spec target besides one process of its command."""

    replicas: int = 1
    names: tuple[str, ...] = ()
    services: Services | None = field(default=None, repr=False)
    ports: tuple[int, ...] = ()  # the replicas' ports beyond the first ({{port}})
    clock: ShiftedClock | None = field(default=None, repr=False)

    @classmethod
    def of(cls, spec: TargetSpec) -> Fleet:
        return cls(replicas=spec.topology.replicas, names=spec.services)

    def allocate(self, taken: Mapping[str, str]) -> dict[str, str]:
        """Ports for the services and the extra replicas, none of them among the run placeholders
        already `taken` (``{{port}}``...); the placeholders the services fill."""
        used = {int(v) for k, v in taken.items() if k.endswith("port")}

        def fresh() -> int:
            while (port := free_port()) in used:
                continue
            used.add(port)
            return port

        if self.services is None:
            self.services = Services.allocate(self.names, fresh)
        if not self.ports and self.replicas > 1:
            self.ports = tuple(fresh() for _ in range(self.replicas - 1))
        return self.services.values

    def start_services(self, confined: Confined | None = None) -> None:
        if self.services is not None:
            self.services.start(clock=self.clock, confined=confined)

    def clock_unavailable(self, command: Command | None) -> str | None:
        """Why the consumer's clock cannot be shifted (None: it can)."""
        if command is None:
            return NO_COMMAND
        return clocks.unavailable() or clocks.static_reason(command.argv[0], command.cwd)

    def use_clock(
        self, service: ServiceProcess | ReplicaSet, confined: Confined | None = None
    ) -> ShiftedClock:
        """Run the services and the consumer on a shifted clock from now on (once: restarted under it)."""
        if self.clock is not None:
            return self.clock
        self.clock = clock = ShiftedClock.create(confined.scratch if confined is not None else None)
        service.stop()
        if self.services is not None:
            self.services.stop_servers()
            self.services.start(clock=clock, confined=confined)
        for process in service.replicas if isinstance(service, ReplicaSet) else [service]:
            process.command = dataclasses.replace(process.command, argv=clock.wrap(process.command.argv))
        service.start()
        return clock

    def transport(
        self, inner: httpx.AsyncBaseTransport, origins: Sequence[tuple[str, int]]
    ) -> httpx.AsyncBaseTransport:
        return Balancer(inner, origins) if len(origins) > 1 else inner

    def stop(self) -> None:
        """Stop the services (after the consumer) and remove the clock."""
        if self.services is not None:
            self.services.stop()
        if self.clock is not None:
            self.clock.close()
