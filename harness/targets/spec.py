"""Targets from spec files (``kind: target``, DESIGN.md): a user's own webhook endpoint."""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlsplit

from acklab.harness.errors import SpecError, TargetUnreachable
from acklab.harness.leases import current_book
from acklab.harness.providers import profile
from acklab.harness.service_process import DEFAULT_READY_TIMEOUT_S, Command, ServiceProcess
from acklab.harness.signing import SIGNERS
from acklab.harness.specs import load_spec
from acklab.harness.targets.base import Endpoint, Expect, Needs, Target, check_local
from acklab.harness.targets.effects import EffectsProbe, HttpProbe, SqlProbe, database_kind
from acklab.harness.templates import KNOWN, unknown_placeholders
from acklab.harness.transports import socket_transport

ENV_REF = re.compile(r"^env:([A-Za-z_][A-Za-z0-9_]*)$")
DEFAULT_CONFLICT = {"acklab_conflict": "this body differs from the original"}


def resolve_env(value: str, *, field_name: str) -> str:
    """``env:VAR`` -> the variable's value (exit 3 naming VAR when unset); a literal stays as is."""
    match = ENV_REF.match(value)
    if not match:
        return value
    name = match.group(1)
    resolved = os.environ.get(name)
    if not resolved:
        raise SpecError(
            f"{field_name}: {value!r} names the environment variable {name}, which is not set; export {name}=..."
        )
    return resolved


def _mentions_event_id(template: Any) -> bool:
    if isinstance(template, dict):
        return any(_mentions_event_id(v) for v in template.values())
    if isinstance(template, list):
        return any(_mentions_event_id(v) for v in template)
    return isinstance(template, str) and re.search(r"\{\{\s*event_id\s*\}\}", template) is not None


@dataclass
class ServiceEndpoint(Endpoint):
    """A spec target's endpoint; `service` is the process of its ``command:`` (None without one)."""

    service: ServiceProcess | None = None


@dataclass
class SpecTarget(Target):
    """A target described by a spec file; always reached through a real socket."""

    socket_only: ClassVar[bool] = True
    effects: Mapping[str, Any] = field(default_factory=dict)
    source: str = ""
    command: Command | None = None
    service: ServiceProcess | None = field(default=None, repr=False)

    def start_service(self) -> None:
        """Start the service of ``command:`` for the run (once); a no-op without one."""
        if self.command is None or (self.service is not None and self.service.running()):
            return
        if self.service is None:
            self.service = ServiceProcess(self.command, self.endpoint, name=self.name, leases=current_book())
        self.service.start()

    def _probe(self) -> EffectsProbe:
        if "sql" in self.effects:
            sql = self.effects["sql"]
            return SqlProbe(resolve_env(sql["url"], field_name="effects.sql.url"), sql["count"])
        http = self.effects["http"]
        return HttpProbe(http["url"], http["json_path"])

    def database_urls(self) -> tuple[str, ...]:
        if "sql" not in self.effects:
            return ()
        return (resolve_env(self.effects["sql"]["url"], field_name="effects.sql.url"),)

    def source_dir(self) -> Path | None:
        # The lab cannot see a service's code; the working directory is the best witness
        # (`acklab run` in the service's pipeline runs in its checkout).
        try:
            return Path.cwd()
        except OSError:  # the working directory was removed
            return None

    async def preflight(self) -> None:
        await asyncio.to_thread(self.start_service)
        parts = urlsplit(self.endpoint)
        host = parts.hostname or "127.0.0.1"
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout=5)
        except (OSError, TimeoutError) as exc:
            raise TargetUnreachable(
                f"target {self.name!r}: nothing accepts connections at {self.endpoint} ({exc or 'timeout'}); "
                "start the service, or fix endpoint in the spec"
            ) from exc
        writer.close()
        await writer.wait_closed()
        probe = self._probe()
        try:
            await probe.count("acklab-preflight")
        finally:
            await probe.aclose()

    @asynccontextmanager
    async def serve(self, needs: Needs) -> AsyncIterator[Endpoint]:
        probe = self._probe()
        transport = socket_transport()
        try:
            yield ServiceEndpoint(
                url=self.endpoint, transport=transport, probe=probe, socket=True, service=self.service
            )
        finally:
            await probe.aclose()
            await transport.aclose()

    async def aclose(self) -> None:
        if self.service is not None:
            await asyncio.to_thread(self.service.stop)


def check_target_doc(doc: Mapping[str, Any], *, source: str) -> None:
    """The checks a schema cannot express: placeholders, and where the event id must be."""
    scheme = doc["signing"]["scheme"]
    unknown = unknown_placeholders(doc["event"])
    if unknown:
        raise SpecError(
            f"{source}: {unknown[0]}: unknown placeholder; use one of {', '.join('{{' + k + '}}' for k in KNOWN)}"
        )
    if not _mentions_event_id(doc["event"]):
        raise SpecError(
            f'{source}: event: no {{{{event_id}}}} in the template; add e.g. id: "{{{{event_id}}}}"'
        )
    if scheme == "stripe" and doc["event"].get("id") != "{{event_id}}":
        raise SpecError(
            f"{source}: event.id: got {doc['event'].get('id')!r}; Stripe carries the event id in the body: "
            'set id: "{{event_id}}"'
        )


def load_target(path: Path, *, allow_remote: bool) -> SpecTarget:
    """Load and check a target spec; refuse remote endpoints (exit 5) before any traffic."""
    _, doc = load_spec(path, expected_kind="target")
    source = str(path)
    check_target_doc(doc, source=source)
    check_local(doc["endpoint"], field_name="endpoint", allow_remote=allow_remote)
    effects = doc["effects"]
    if "http" in effects:
        check_local(effects["http"]["url"], field_name="effects.http.url", allow_remote=allow_remote)
    scheme = doc["signing"]["scheme"]
    secret = resolve_env(doc["signing"].get("secret", ""), field_name="signing.secret")
    SIGNERS[scheme].check_secret(secret)
    expect = doc.get("expect", {})
    delivery = doc.get("delivery", {})
    database = (
        database_kind(resolve_env(effects["sql"]["url"], field_name="effects.sql.url"))
        if "sql" in effects
        else "http"
    )
    command = doc.get("command")
    return SpecTarget(
        name=doc["name"],
        kind="spec",
        handler=doc["name"],
        endpoint=doc["endpoint"],
        database=database,
        scheme=scheme,
        secret=secret,
        timeout_s=float(delivery.get("timeout_s", profile(scheme).timeout_s)),
        template=doc["event"],
        conflict_set=doc.get("conflict", {}).get("set", DEFAULT_CONFLICT),
        expect=Expect(
            max_effects=int(expect.get("max_effects", 1)),
            conflict_status=tuple(expect.get("conflict_status", (409, 422))),
        ),
        effects=effects,
        source=source,
        command=_command(command) if command is not None else None,
    )


def _command(doc: Mapping[str, Any]) -> Command:
    env = {str(k): resolve_env(str(v), field_name=f"command.env.{k}") for k, v in doc.get("env", {}).items()}
    return Command(
        argv=tuple(str(a) for a in doc["argv"]),
        env=env,
        ready_timeout_s=float(doc.get("ready_timeout_s", DEFAULT_READY_TIMEOUT_S)),
    )
