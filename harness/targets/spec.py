"""Targets from spec files (``kind: target``, DESIGN.md): a user's own webhook endpoint."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlsplit

from acklab.evidence.redaction import remember
from acklab.harness.credentials import resolve_env, url_secrets
from acklab.harness.errors import TargetUnreachable
from acklab.harness.leases import current_book
from acklab.harness.providers import profile
from acklab.harness.service_process import DEFAULT_READY_TIMEOUT_S, Command, ServiceProcess
from acklab.harness.signing import SIGNERS
from acklab.harness.specs import load_spec
from acklab.harness.targets.base import Endpoint, Expect, Needs, Target
from acklab.harness.targets.effects import EffectsProbe, HttpProbe, SqlProbe, database_kind
from acklab.harness.targets.spec_checks import (
    DEFAULT_CONFLICT,
    check_database_url,
    check_reach,
    check_target_doc,
    check_url,
    shown,
)
from acklab.harness.transports import socket_transport

__all__ = ["ServiceEndpoint", "SpecTarget", "check_target_doc", "load_target", "resolve_env"]


def resolve_headers(headers: Mapping[str, str], *, field_name: str) -> dict[str, str]:
    """A spec's headers with ``env:NAME`` values read; every value becomes a secret (literal too)."""
    resolved = {str(k): resolve_env(str(v), field_name=f"{field_name}.{k}") for k, v in headers.items()}
    remember(*resolved.values())
    return resolved


@dataclass
class ServiceEndpoint(Endpoint):
    """A spec target's endpoint; `service` is the process of its ``command:`` (None without one)."""

    service: ServiceProcess | None = None


@dataclass
class SpecTarget(Target):
    """A target described by a spec file; always reached through a real socket."""

    socket_only: ClassVar[bool] = True
    effects: Mapping[str, Any] = field(default_factory=dict, repr=False)  # env: values read
    source: str = ""
    command: Command | None = None
    service: ServiceProcess | None = field(default=None, repr=False)
    endpoint_ref: str = ""  # the spec's endpoint as written (env:NAME, or the URL)

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
            return SqlProbe(sql["url"], sql["count"])
        http = self.effects["http"]
        return HttpProbe(http["url"], http["json_path"], headers=http.get("headers", {}), shown=http["shown"])

    def database_urls(self) -> tuple[str, ...]:
        if "sql" not in self.effects:
            return ()
        return (self.effects["sql"]["url"],)

    def describe(self) -> dict[str, Any]:
        # An endpoint read from the environment is named by its variable: it may carry a token.
        return {**super().describe(), "endpoint": shown(self.endpoint_ref, self.endpoint)}

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
                f"target {self.name!r}: nothing accepts connections at {shown(self.endpoint_ref, self.endpoint)} "
                f"({exc or 'timeout'}); start the service, or fix endpoint in the spec"
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

    def attachments(self) -> dict[str, bytes]:
        # The service's own output is the only witness of what it did; the writer redacts it.
        log = self.service.log_bytes() if self.service is not None else b""
        return {"service.log": log} if log else {}

    async def aclose(self) -> None:
        if self.service is not None:
            await asyncio.to_thread(self.service.stop)
            self.service.remove_logs()


def _effects(doc: Mapping[str, Any], *, allow_remote: bool) -> dict[str, Any]:
    """``effects:`` with every ``env:NAME`` read and every URL held to the loopback rule."""
    if "sql" in doc:
        url = check_database_url(doc["sql"]["url"], allow_remote=allow_remote)
        return {"sql": {"url": url, "count": doc["sql"]["count"]}}
    http = doc["http"]
    url = check_url(
        http["url"], field_name="effects.http.url", allow_remote=allow_remote, needs_event_id=True
    )
    return {
        "http": {
            "url": url,
            "shown": shown(http["url"], url),
            "json_path": http["json_path"],
            "headers": resolve_headers(http.get("headers", {}), field_name="effects.http.headers"),
        }
    }


def load_target(path: Path, *, allow_remote: bool) -> SpecTarget:
    """Load and check a target spec; refuse remote URLs (exit 5) before any traffic."""
    _, doc = load_spec(path, expected_kind="target")
    source = str(path)
    check_target_doc(doc, source=source)
    scheme = doc["signing"]["scheme"]
    secret = resolve_env(doc["signing"].get("secret", ""), field_name="signing.secret")
    remember(secret)
    SIGNERS[scheme].check_secret(secret)
    headers = resolve_headers(doc.get("headers", {}), field_name="headers")
    check_reach(doc, allow_remote=allow_remote)
    endpoint = check_url(doc["endpoint"], field_name="endpoint", allow_remote=allow_remote)
    effects = _effects(doc["effects"], allow_remote=allow_remote)
    if "sql" in effects:
        remember(*url_secrets(effects["sql"]["url"]))
    expect = doc.get("expect", {})
    delivery = doc.get("delivery", {})
    command = doc.get("command")
    return SpecTarget(
        name=doc["name"],
        kind="spec",
        handler=doc["name"],
        endpoint=endpoint,
        database=database_kind(effects["sql"]["url"]) if "sql" in effects else "http",
        scheme=scheme,
        secret=secret,
        timeout_s=float(delivery.get("timeout_s", profile(scheme).timeout_s)),
        template=doc["event"],
        conflict_set=doc.get("conflict", {}).get("set", DEFAULT_CONFLICT),
        expect=Expect(
            max_effects=int(expect.get("max_effects", 1)),
            conflict_status=tuple(expect.get("conflict_status", (409, 422))),
        ),
        headers=headers,
        event_type=delivery.get("event_type"),
        effects=effects,
        source=source,
        command=_command(command) if command is not None else None,
        endpoint_ref=doc["endpoint"],
    )


def _command(doc: Mapping[str, Any]) -> Command:
    env = {str(k): resolve_env(str(v), field_name=f"command.env.{k}") for k, v in doc.get("env", {}).items()}
    return Command(
        argv=tuple(str(a) for a in doc["argv"]),
        env=env,
        ready_timeout_s=float(doc.get("ready_timeout_s", DEFAULT_READY_TIMEOUT_S)),
    )
