"""Targets from spec files (``kind: target``, DESIGN.md): a user's own webhook endpoint."""

from __future__ import annotations

import asyncio
import functools
import os
import re
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from acklab.harness.errors import HarnessError, SpecError, TargetUnreachable
from acklab.harness.leases import current_book
from acklab.harness.providers import profile
from acklab.harness.service_process import (
    DEFAULT_READY_TIMEOUT_S,
    Command,
    ServiceProcess,
    describe_rule,
    host_port,
    wait_ready,
)
from acklab.harness.signing import SIGNERS
from acklab.harness.specs import load_spec
from acklab.harness.targets.base import Endpoint, Expect, Needs, Target, check_local
from acklab.harness.targets.effects import EffectsProbe, HttpProbe, SqlProbe, database_kind
from acklab.harness.targets.state import HttpState, SqlState, StateProbe
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
    probe_url: str | None = None  # effects.http.url, when the probe is HTTP

    def service_state(self) -> tuple[bool, int] | None:
        return None if self.service is None else self.service.state()

    def down(self) -> str | None:
        return None if self.service is None else self.service.down_reason

    def probe_served_by_service(self) -> bool:
        """Whether the effects probe is an HTTP endpoint of the very service the lab may kill."""
        http = getattr(self.probe, "source", "") == "http"
        return (
            http
            and self.service is not None
            and self.probe_url is not None
            and (host_port(self.probe_url) == host_port(self.url))
        )


@dataclass
class SpecTarget(Target):
    """A target described by a spec file; always reached through a real socket."""

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

    def _state(self) -> StateProbe | None:
        """``effects.sql.state`` or ``effects.http.state_path``: the committed state of one event."""
        if "sql" in self.effects:
            sql = self.effects["sql"]
            if "state" not in sql:
                return None
            return SqlState(resolve_env(sql["url"], field_name="effects.sql.url"), sql["state"])
        http = self.effects["http"]
        if "state_path" not in http:
            return None
        headers = {
            str(k): resolve_env(str(v), field_name=f"effects.http.headers.{k}")
            for k, v in http.get("headers", {}).items()
        }
        return HttpState(http["url"], http["state_path"], headers=headers)

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
        if self.command is None:
            # A service the lab did not start may still be booting: wait for it as for our own.
            ready, seen = await asyncio.to_thread(
                functools.partial(wait_ready, self.endpoint, (), DEFAULT_READY_TIMEOUT_S, hang_is_ready=True)
            )
            if not ready:
                raise TargetUnreachable(
                    f"target {self.name!r}: the service at {self.endpoint} never became ready within "
                    f"{DEFAULT_READY_TIMEOUT_S:g} s (readiness: {describe_rule(self.endpoint, ())}; last: "
                    f"{seen}); wait for it to boot, or let the lab start it with command: and command.ready"
                )
        probe, state = self._probe(), self._state()
        try:
            await probe.count("acklab-preflight")
            if state is not None:
                await state.read("acklab-preflight")
        finally:
            await probe.aclose()
            if state is not None:
                await state.aclose()

    @asynccontextmanager
    async def serve(self, needs: Needs) -> AsyncIterator[Endpoint]:
        if self.service is not None and not self.service.running():
            # Down since a crash it did not come back from: try once more for this experiment;
            # its trials are lab errors with the cause when it still does not come back.
            try:
                await asyncio.to_thread(self.service.start)
            except HarnessError as exc:
                raise TargetUnreachable(f"the lab's service is down and did not come back: {exc}") from exc
        probe, state = self._probe(), self._state()
        transport = socket_transport()
        try:
            yield ServiceEndpoint(
                url=self.endpoint,
                transport=transport,
                probe=probe,
                socket=True,
                state=state,
                service=self.service,
                probe_url=self.effects["http"]["url"] if "http" in self.effects else None,
            )
        finally:
            await probe.aclose()
            if state is not None:
                await state.aclose()
            await transport.aclose()

    async def aclose(self) -> None:
        if self.service is not None:
            await asyncio.to_thread(self.service.stop)


def check_target_doc(doc: Mapping[str, Any], *, source: str) -> None:
    """The checks a schema cannot express: placeholders, where the event id must be, contradictions."""
    check_expect(doc, source=source)
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


def check_expect(doc: Mapping[str, Any], *, source: str) -> None:
    """Refuse (exit 3) an ``expect:`` or ``command:`` that contradicts itself or cannot work."""
    expect = doc.get("expect", {})
    if expect.get("conflict") == "ignore" and "conflict_status" in expect:
        raise SpecError(
            f"{source}: expect: conflict: ignore says a conflicting body is answered 2xx (dedupe by id), but "
            f"conflict_status {expect['conflict_status']!r} lists the statuses that reject it; remove "
            "conflict_status, or set conflict: reject"
        )
    command = doc.get("command", {})
    cwd = command.get("cwd")
    if isinstance(cwd, str) and not ENV_REF.match(cwd) and not (Path(source).parent / cwd).is_dir():
        raise SpecError(
            f"{source}: command.cwd: got {cwd!r}, which is not a directory ({Path(source).parent / cwd}); "
            "a relative cwd is read from the spec file's folder"
        )
    statuses = command.get("ready", {}).get("status", [])
    if statuses and all(s in (502, 503, 504) for s in statuses):
        raise SpecError(
            f"{source}: command.ready.status: got {statuses!r}; 502, 503 and 504 are what a booting service "
            "or its proxy answers, not readiness; use the status the service answers once it is up (e.g. [200])"
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
    ready_url = doc.get("command", {}).get("ready", {}).get("url")
    if ready_url is not None:
        check_local(ready_url, field_name="command.ready.url", allow_remote=allow_remote)
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
            conflict=str(expect.get("conflict", "reject")),
            effects_within_s=float(expect.get("effects_within_s", 0)),
        ),
        effects=effects,
        source=source,
        command=_command(command, spec_dir=path.resolve().parent) if command is not None else None,
    )


def _command(doc: Mapping[str, Any], *, spec_dir: Path) -> Command:
    env = {str(k): resolve_env(str(v), field_name=f"command.env.{k}") for k, v in doc.get("env", {}).items()}
    cwd = None
    if "cwd" in doc:
        # Relative to the spec file: a spec committed beside the service names its folder.
        cwd = (spec_dir / resolve_env(str(doc["cwd"]), field_name="command.cwd")).resolve()
        if not cwd.is_dir():
            raise SpecError(
                f"command.cwd: got {doc['cwd']!r}, which is not a directory ({cwd}); a relative cwd is "
                "read from the spec file's folder"
            )
    ready = doc.get("ready", {})
    return Command(
        argv=tuple(str(a) for a in doc["argv"]),
        env=env,
        ready_timeout_s=float(doc.get("ready_timeout_s", DEFAULT_READY_TIMEOUT_S)),
        cwd=cwd,
        ready_url=resolve_env(ready["url"], field_name="command.ready.url") if "url" in ready else None,
        ready_status=tuple(int(s) for s in ready.get("status", ())),
    )
