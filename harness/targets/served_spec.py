"""``--target SPEC --checkout DIR``: a user's own service, served from a checkout by the spec's
``command:``, confined, and judged from this process.

The repair flow serves the head, the patched copy and each option's copy of a repository the
lab did not write. Each is one `ServedSpecTarget`: the spec file is read from the checkout
(``SPEC`` is relative to it), the service's ``setup:`` and ``command:`` run in a private copy
of the checkout in the sandbox (`harness.procs.confinement`, the caller's), with run
placeholders of its own — ``{{port}}`` a free port, ``{{scratch}}`` a directory inside its
sandbox place, ``{{database_url}}`` a fresh database — so two checkouts served at once never
share a port, a directory, a database or a process. The lab attacks it over a loopback socket
and counts effects itself (``effects:``), in this process.

The schema the counts read is pinned once the service's ``setup:`` made it (or, without a
setup, once the service first answered): every count checks the fingerprint first, and a
change fails the invariant ``schema-unchanged`` (`harness.targets.schema_pin`), so a patch
cannot make its own count lie by renaming the table and putting a view in its place.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from sqlalchemy import create_engine
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from acklab.evidence.redaction import redact
from acklab.harness.errors import HarnessError, SpecError, TargetUnreachable
from acklab.harness.procs.confinement import Confined, Confinement, loopback_ports
from acklab.harness.procs.service_process import Command
from acklab.harness.specs.credentials import shared_names
from acklab.harness.specs.target import TargetSpec
from acklab.harness.targets.capabilities import Capabilities, Queue
from acklab.harness.targets.effects import EffectsProbe
from acklab.harness.targets.isolation import Isolation
from acklab.harness.targets.prepare import Preparer
from acklab.harness.targets.schema_pin import PinnedSqlProbe, SchemaPin, fingerprint
from acklab.harness.targets.served_parts import database_server, served_parts, sql_url
from acklab.harness.targets.spec import SpecTarget, load_target

__all__ = ["ServedSpecTarget", "served_spec_target", "shared_env", "shared_names"]
from acklab.harness.targets.templates import TemplatedSetup, plan


@dataclass
class ServedSpecTarget(SpecTarget):
    """A target spec's service, started by its ``command:`` from a confined copy of `checkout`."""

    checkout: Path = field(default_factory=Path)
    spec_ref: str = ""  # the spec's path inside the checkout
    confinement: Confinement | None = field(default=None, repr=False)
    _place: Confined | None = field(default=None, repr=False)
    _pin: SchemaPin | None = field(default=None, repr=False)
    _pinning: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def place(self) -> Confined:
        """The private copy the service runs from (`provision` made it)."""
        if self._place is None:
            raise HarnessError("the checkout's private copy was asked for before the target was provisioned")
        return self._place

    def source_dir(self) -> Path | None:
        return self.checkout

    def _confined(self) -> Confined | None:
        return self.place  # the checkout's commit, not the copy's (which has no .git)

    def provision(self) -> None:
        """The private copy of the checkout, and this checkout's port, database and scratch
        directory (inside that copy), filled in; once."""
        if self._place is None:
            if self.confinement is None:
                raise SpecError("--checkout: no confinement was given for the checkout's code")
            self._place = self.confinement.prepare(self.checkout, label="served")
        unbound = self.unbound
        if unbound is None or self.isolation is not None:
            return
        place = self.place
        server = database_server(unbound.spec)
        isolation = Isolation.allocate(unbound.names - {"scratch"}, database_server=server, label=self.name)
        try:
            values = {**isolation.values, **self.fleet.allocate(isolation.values)}
            if "scratch" in unbound.names:
                values["scratch"] = str(_scratch_of(place))
            spec_dir = place.root / PurePosixPath(self.spec_ref).parent
            filled = unbound.spec.filled(values)
            parts = served_parts(filled, spec_dir=spec_dir, allow_remote=False, workdir=place.root)
            self._replica_parts = [
                (endpoint, shared_env(command, unbound.spec) or command)
                for endpoint, command in self._served_at(values, spec_dir=spec_dir, workdir=place.root)
            ]
            self.queueing.bind(filled, spec_dir=spec_dir, workdir=place.root)
        except BaseException:
            isolation.release()
            self.fleet.stop()
            raise
        self.isolation = isolation
        self.take(dataclasses.replace(parts, command=shared_env(parts.command, unbound.spec)))
        self.preparer = Preparer.of(filled, sql_url(self.effects), allow_remote=False)

    def _templated(self) -> TemplatedSetup | None:
        """The setup's template, keyed by the content of this checkout's private copy: a patched
        checkout whose migrations differ makes its own."""
        if self.unbound is None or self.command is None or self.command.setup is None:
            return None
        return plan(
            doc=self.unbound.spec.dump(),
            written=self.loaded_command,
            tree=self.place.root,
            root=self.checkout,
            scratch=self.place.scratch / "data" if "scratch" in self.unbound.names else None,  # _scratch_of's
            database=self.isolation.database if self.isolation is not None else None,
            confined=True,
        )

    def start_service(self) -> None:
        self.fleet.start_services(self.place)
        self.queueing.start(self.fleet.services, self.place, reaches=self.reaches())
        if self.command is None or (self.service is not None and self.service.running()):
            return
        if self.service is None:
            self.service = self._consumer(
                confined=self.place, after_setup=self.pin, reaches=self.reaches(), also_serves=self.serves()
            )
        self.service.start()
        self.pin()  # without a setup: the schema as the service made it when it first answered

    def capabilities(self) -> Capabilities:
        can = super().capabilities()
        if (
            isinstance(can.queue, Queue)
            and self.confinement is not None
            and self.confinement.name.startswith("bubblewrap")
        ):
            # bubblewrap gives the broker a network namespace of its own: its clients' addresses are its own.
            can = dataclasses.replace(can, queue=dataclasses.replace(can.queue, named=False))
        return can

    def serves(self) -> tuple[int, ...]:
        """Loopback ports besides the endpoint's where the lab reaches the service: its effects URL,
        the competitor's (each listened on, on the host, only once the service listens on it)."""
        http = self.effects.http.url if self.effects.http is not None else None
        competitor = self.objects.competitor.url if self.objects.competitor is not None else None
        return loopback_ports(http, competitor)

    def reaches(self) -> tuple[int, ...]:
        """The lab's loopback ports the served code may reach from its namespace: the database server
        of ``{{database_url}}``, the services the lab starts (``{{redis_url}}``), the sinks (SMTP,
        outbound, the provider's API), the database ``effects.sql`` counts in; nothing else."""
        values = self.isolation.values if self.isolation is not None else {}
        ports = {
            int(values[name]) for name in ("smtp_port", "outbound_port") if values.get(name, "").isdigit()
        }
        urls = [
            values.get("database_url"),
            values.get("provider_api_url"),
            self.effects.sql.url if self.effects.sql is not None else None,
        ]
        if self.fleet.services is not None:
            urls += self.fleet.services.values.values()
        if (sinks := self.sinks_of()) is not None:  # started before the service: where they listen
            ports |= {sinks.smtp_port} if sinks.smtp_port is not None else set()
            urls += [sinks.outbound_url, sinks.provider_api_url]
        return tuple(sorted({*loopback_ports(*urls), *ports}))

    def pin(self) -> None:
        """Fingerprint the schema the counts read (once); TargetUnreachable (exit 4) when it cannot be read."""
        with self._pinning:
            if self._pin is not None or self.effects.sql is None:
                return
            url = make_url(self.effects.sql.url)
            if url.get_backend_name() == "postgresql":
                url = url.set(drivername="postgresql+psycopg")
            engine = create_engine(url)
            try:
                with engine.connect() as conn:
                    pinned = fingerprint(conn)
            except SQLAlchemyError as exc:
                raise TargetUnreachable(
                    f"target {self.name!r}: could not read the schema of effects.sql.url after setup: "
                    f"{redact(str(getattr(exc, 'orig', exc)))}; make setup: create the tables the count reads"
                ) from exc
            finally:
                engine.dispose()
            file = None
            if url.get_backend_name() == "sqlite" and url.database:
                info = Path(url.database).stat()
                file = (info.st_dev, info.st_ino)
            self._pin = SchemaPin(pinned, file=file)

    def _probe(self) -> EffectsProbe:
        sql = self.effects.sql
        if sql is not None and self._pin is not None:
            return PinnedSqlProbe(sql.url, sql.count, self._pin)
        return super()._probe()

    def schema_change(self) -> str | None:
        return self._pin.change if self._pin is not None else None

    async def aclose(self) -> None:
        await super().aclose()
        if self._place is not None:
            self._place.close()
            self._place = None


def shared_env(command: Command | None, doc: Mapping[str, Any] | TargetSpec) -> Command | None:
    """`command` with the variables the spec reads with ``env:`` for what the service must agree on with
    the lab — its signing secret, the headers the lab sends — under their own names, unless
    ``command.env`` sets them: confined, the service gets no other variable of the lab's environment,
    and unconfined it would have inherited these (credentials of the lab are dropped all the same)."""
    if command is None:
        return None
    names = shared_names(doc.dump() if isinstance(doc, TargetSpec) else doc)
    shared = {name: os.environ[name] for name in names if name in os.environ and name not in command.env}
    return dataclasses.replace(command, env={**shared, **command.env}) if shared else command


def _scratch_of(place: Confined) -> Path:
    """``{{scratch}}``: a fresh directory in the place's scratch, owned like it (the sandbox user)."""
    path = place.scratch / "data"
    path.mkdir(mode=0o700, exist_ok=True)
    owner = place.scratch.stat()
    if os.geteuid() == 0:
        os.chown(path, owner.st_uid, owner.st_gid)
    return path


def served_spec_target(ref: str, checkout: Path, *, confinement: Confinement | None) -> ServedSpecTarget:
    """The target spec `ref` (a path inside `checkout`) served from `checkout`; SpecError (exit 3)
    when the spec cannot be served from a checkout (it needs ``command:`` and ``{{port}}``)."""
    root = Path(checkout).expanduser()
    if not root.is_dir():
        raise SpecError(
            f"--checkout: got {str(checkout)!r}, which is not a directory; pass the repository's root"
        )
    root = root.resolve()
    relative = PurePosixPath(ref)
    if relative.is_absolute():
        try:
            relative = PurePosixPath(Path(ref).resolve().relative_to(root))
        except ValueError:
            raise SpecError(
                f"--target {ref!r} with --checkout {str(root)!r}: the spec must be a file of the checkout; "
                "name it relative to the checkout's root, e.g. --target shop.target.yaml"
            ) from None
    if ".." in relative.parts:
        raise SpecError(f"--target {ref!r}: name the spec relative to the checkout's root, without '..'")
    path = root / relative
    if not path.is_file():
        raise SpecError(
            f"--target {ref!r}: no such file in the checkout {str(root)!r}; the spec is read from the "
            "checkout it serves, relative to its root"
        )
    base = load_target(path, allow_remote=False, workdir=root)
    names = base.unbound.names if base.unbound is not None else frozenset()
    if base.command is None or "port" not in names:
        raise SpecError(
            f"{ref}: a target served from a checkout needs command: (how the lab starts the service) and "
            "{{port}} in its endpoint and command, so that every checkout served at once gets a port of its "
            "own; e.g. command: {argv: [python, -m, gunicorn, -b, '127.0.0.1:{{port}}', 'shop.app:app']}"
        )
    fields = {
        f.name: getattr(base, f.name)
        for f in dataclasses.fields(base)
        if f.init and not f.name.startswith("_")
    }
    return ServedSpecTarget(**fields, checkout=root, spec_ref=str(relative), confinement=confinement)
