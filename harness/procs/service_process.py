"""A target's own service, started by the lab from the spec's ``command:`` (argv, never a shell).

The lab starts it before the first trial and ends it when the run ends, even on error. It
runs in its own session (the janitor can end its whole process group), from ``cwd:`` when
the spec gives one, and is leased in the journal while alive. The endpoint's port is fixed
in the spec: the command must serve there, so a restart after a crash serves the same URL
the sender retries.

Readiness, at start and after every restart: a port that accepts connections is not a
service that works — many answer 503 while they boot. The lab polls ``ready.url`` (default:
the endpoint) with GET until it answers one of ``ready.status`` (default: anything but a
refused connection, 502, 503 or 504), within ``ready_timeout_s``. A kill waits for the whole
process group to die and the port to be free, so a restart never races the old workers.

Its stdout and stderr go to a log file per start, in a temporary directory that is leased
too (the janitor removes it after a crash) and removed when the run ends; the run's
bundle keeps them as ``service.log`` (`ServiceProcess.log_bytes`: every start, capped at
`LOG_CAP_BYTES`; the bundle writer redacts it).
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess  # nosec B404
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit

import httpx

from acklab.evidence.redaction import redact
from acklab.harness.errors import HarnessError, TargetUnreachable
from acklab.harness.procs.confinement import Bridged, Confined, Launch, unconfined_env
from acklab.harness.procs.leased_process import LeasedProcess
from acklab.harness.procs.leases import NO_LEASES, LeaseBook
from acklab.harness.wire.transports import tls

DEFAULT_READY_TIMEOUT_S = 15.0
DEFAULT_SETUP_TIMEOUT_S = 120.0
SETUP_LOG_CAP_BYTES = 256 << 10
NOT_READY = frozenset({502, 503, 504})  # a proxy or a booting service, not the handler
PORT_FREE_S = 10.0
POLL_S = 0.05
LOG_CAP_BYTES = 1 << 20  # service.log in a bundle: the first LOG_HEAD_BYTES and the rest from the end
LOG_HEAD_BYTES = 128 << 10


@dataclass(frozen=True)
class Setup:
    """``setup:`` of a target spec: argv run once in the service's working directory before it is
    first served (migrations, fixtures), with the command's environment and its own ``env``."""

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    timeout_s: float = DEFAULT_SETUP_TIMEOUT_S
    cwd: Path | None = None
    # ``template: false``: it acts outside its scratch and database, so every serve runs it
    # (harness.targets.templates).
    template: bool = True


class SetupReuse(Protocol):
    """What an identical setup made before, copied instead of running it again
    (`harness.targets.templates.TemplatedSetup`)."""

    def reuse(self) -> str | None:
        """Copy what an identical setup made into this serve's places; what to say of it, or None: run it."""

    def keep(self, took_s: float) -> str | None:
        """The setup ran (in `took_s`): keep what it made for later serves; None, or what to say."""


@dataclass(frozen=True)
class Command:
    """``command:`` of a target spec: how the lab starts the service, and how it knows it is ready."""

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    ready_timeout_s: float = DEFAULT_READY_TIMEOUT_S
    cwd: Path | None = None
    ready_url: str | None = None  # default: the endpoint
    ready_status: tuple[int, ...] = ()  # default: anything but 502/503/504
    ready_method: str = "GET"  # ready: a request (method, url, body, status)
    ready_body: str | None = None
    # The lab's signed probe delivery of an unknown event type may not be answered 404/405
    # (routes not there yet) before the service counts as ready (ready.routes: false: no check).
    ready_routes: bool = True
    setup: Setup | None = None  # run once, before the first start


def host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or (443 if parts.scheme == "https" else 80)


def accepts(host: str, port: int, timeout_s: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


# A route that is not there yet: what a service whose health URL answers before its webhook
# routes exist says to the lab's probe delivery.
NO_ROUTE = frozenset({404, 405})
# Builds the lab's signed probe delivery (method, url, headers, body) of an unknown event type.
RouteProbe = Callable[[], tuple[str, str, dict[str, str], bytes]]


def readiness(
    url: str,
    statuses: tuple[int, ...],
    client: httpx.Client,
    *,
    hang_is_ready: bool = False,
    method: str = "GET",
    body: str | None = None,
) -> tuple[bool, str]:
    """One readiness poll: (ready, what was seen).

    `hang_is_ready`: a service the lab did not start, that accepted the connection but did not
    answer a GET in time, is taken as it is (its webhook route may simply not serve GET).
    """
    content = body.encode() if body is not None else None
    headers = {"Content-Type": "application/json"} if body is not None else {}
    try:
        response = client.request(method, url, content=content, headers=headers)
    except httpx.TimeoutException as exc:
        answer = f"{method} {url}: no answer ({exc})"
        return hang_is_ready and not isinstance(exc, httpx.ConnectTimeout), answer
    except httpx.HTTPError as exc:
        return False, f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    status = response.status_code
    ok = status in statuses if statuses else status not in NOT_READY
    return ok, f"{method} {url} answered {status}"


def routes_ready(probe: RouteProbe, client: httpx.Client) -> tuple[bool, str]:
    """Whether the endpoint's route exists: the signed probe delivery is not answered 404/405."""
    method, url, headers, body = probe()
    try:
        response = client.request(method, url, content=body, headers=headers)
    except httpx.HTTPError as exc:
        # Only "no such route" holds the run back: a handler that chokes on an event type it
        # does not know (a closed connection, a hang) has its route.
        return True, f"the probe delivery to {url}: {type(exc).__name__} (a route that exists)"
    if response.status_code in NO_ROUTE:
        return False, f"the probe delivery to {url} answered {response.status_code} (no route yet)"
    return True, f"the probe delivery to {url} answered {response.status_code}"


def describe_rule(url: str, statuses: tuple[int, ...], method: str = "GET") -> str:
    wanted = " or ".join(map(str, statuses)) if statuses else "anything but 502, 503 or 504"
    return f"{method} {url} answering {wanted}"


def wait_ready(
    url: str,
    statuses: tuple[int, ...],
    timeout_s: float,
    *,
    alive: Callable[[], bool] | None = None,
    hang_is_ready: bool = False,
    method: str = "GET",
    body: str | None = None,
    routes: RouteProbe | None = None,
    no_route: Callable[[str], None] | None = None,
) -> tuple[bool, str]:
    """Poll until ready or `timeout_s`; (ready, the last thing seen). `alive()` False stops early.
    `routes`: once the rule holds, the signed probe delivery must not be answered 404/405 either;
    `no_route` is told, once, the moment the service is up but the route is not (said at once:
    a wrong path waits out the whole timeout)."""
    deadline = time.monotonic() + timeout_s
    seen = "nothing yet"
    told = False
    with httpx.Client(timeout=2.0, trust_env=False, follow_redirects=False, verify=tls()) as client:
        while True:
            if alive is not None and not alive():
                return False, seen
            ready, seen = readiness(
                url, statuses, client, hang_is_ready=hang_is_ready, method=method, body=body
            )
            if ready and routes is not None:
                up = seen
                ready, seen = routes_ready(routes, client)
                if not ready and no_route is not None and not told:
                    told = True
                    no_route(f"{up}, but {seen}")
            if ready or time.monotonic() >= deadline:
                return ready, seen
            time.sleep(POLL_S)


class ServiceProcess(LeasedProcess):
    """The service of ``command:``; start, kill -9 (the whole process group) and restart it."""

    what = "service of command:"

    def __init__(
        self,
        command: Command,
        endpoint: str,
        *,
        name: str,
        leases: LeaseBook = NO_LEASES,
        routes: RouteProbe | None = None,
        confined: Confined | None = None,
        after_setup: Callable[[], None] | None = None,
        reaches: tuple[int, ...] = (),
        also_serves: tuple[int, ...] = (),
        templated: SetupReuse | None = None,
    ) -> None:
        """`routes`: the lab's signed probe delivery, awaited not to be answered 404/405 at every start;
        `confined`: the place the service (and its setup) runs in, as the sandbox's user, with its
        own variables only (`command.env`), in a network of its own from which it `reaches` these
        loopback ports of the lab's (its database server, the sinks) and nothing else, and where the
        lab reaches it on its endpoint's and ready URL's ports and `also_serves` (an effects URL);
        `after_setup`: called once setup has run, before the first start (the lab pins the schema
        the setup made); `templated`: the setup's template, copied instead of running it when an
        identical setup ran before in this process (`setup_note` says so)."""
        self.command, self.endpoint, self.name = command, endpoint, name
        self.templated = templated
        self.setup_note: str | None = None  # e.g. "setup: from the template made at ..."
        self.routes = routes if command.ready_routes else None
        self.confined, self._after_setup = confined, after_setup
        self.host, self.port = host_port(endpoint)
        ready_port = host_port(command.ready_url)[1] if command.ready_url else self.port
        self.network = Bridged(serves=tuple(sorted({self.port, ready_port, *also_serves})), reaches=reaches)
        self.ready_url = command.ready_url or endpoint
        log_dir = Path(tempfile.mkdtemp(prefix="acklab-service-log-"))
        # Leased: a lab killed mid-run leaves the directory to the janitor, not to $TMPDIR forever.
        self._log_lease = leases.acquire("directory", str(log_dir), path=str(log_dir))
        self._kept_log: bytes | None = None
        self._setup_output: bytes | None = None  # None: setup has not run (or there is none)
        super().__init__(log_dir=log_dir, log_prefix=f"service-{self.port}", leases=leases)

    def log_bytes(self, cap: int = LOG_CAP_BYTES) -> bytes:
        """The output of every start so far, oldest first, at most `cap` bytes (head and tail kept)."""
        if self._kept_log is not None:  # the directory is gone: what it held when it was removed
            return self._kept_log
        parts = []
        if self._setup_output is not None:
            parts.append(b"--- acklab: setup: ---\n" + self._setup_output)
        for n in range(1, self.starts + 1):
            path = self._log_dir / f"{self._log_prefix}-{n}.log"
            with contextlib.suppress(OSError):
                parts.append(
                    f"--- acklab: start {n} of the service of command: ---\n".encode() + path.read_bytes()
                )
        data = b"".join(parts)
        if len(data) <= cap:
            return data
        head, tail = data[:LOG_HEAD_BYTES], data[-(cap - LOG_HEAD_BYTES) :]
        cut = len(data) - len(head) - len(tail)
        return head + f"\n--- acklab: {cut} bytes cut (service.log keeps {cap} bytes) ---\n".encode() + tail

    def remove_logs(self) -> None:
        """Remove the log directory and release its lease; `log_bytes` keeps answering (capped)."""
        self._kept_log = self.log_bytes()
        shutil.rmtree(self._log_dir, ignore_errors=True)
        self._leases.release(self._log_lease, outcome="removed by its owner")

    def start(self) -> None:
        """Start the command and wait until it is ready; `down_reason` says why when it is not."""
        self.launch()
        self.await_ready()

    def launch(self) -> None:
        """Run the setup (once) and start the command, without waiting for it to be ready.

        Call it from a thread that outlives the process: a sandbox's bubblewrap dies with the
        thread that started it (``--die-with-parent``); `await_ready` may run in any thread.
        """
        try:
            self._launch()
        except HarnessError as exc:
            self.down_reason = str(exc)
            raise

    def await_ready(self) -> None:
        """Wait until the launched command is ready; `down_reason` says why when it is not."""
        try:
            self._wait_ready()
        except HarnessError as exc:
            self.down_reason = str(exc)
            raise
        self.down_reason = None

    def _run_setup(self, setup: Setup) -> None:
        """setup: argv once, before the first start; TargetUnreachable (exit 4) with its output when it fails."""
        cwd = setup.cwd or self.command.cwd
        argv: tuple[str, ...] = setup.argv
        if self.confined is not None:
            launch = self.confined.launch(
                Launch(argv, {**self.command.env, **setup.env}, cwd),
                network=Bridged(reaches=self.network.reaches),
            )
            argv, env, cwd = launch.argv, dict(launch.env), launch.cwd
        else:
            env = unconfined_env({**self.command.env, **setup.env})
        try:
            # The spec's own argv list, never a shell; its own session, so a timeout ends all of it.
            done = subprocess.run(  # nosec B603
                list(argv),
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=setup.timeout_s,
                check=False,
                start_new_session=True,
            )
        except subprocess.TimeoutExpired as exc:
            self._setup_output = _capped((exc.stdout or b"") + (exc.stderr or b""))
            raise TargetUnreachable(
                f"target {self.name!r}: setup.argv {list(setup.argv)!r} did not finish within "
                f"setup.timeout_s={setup.timeout_s:g} s; raise it, or make the setup faster"
            ) from exc
        except OSError as exc:
            raise TargetUnreachable(
                f"target {self.name!r}: setup.argv {list(setup.argv)!r} could not start"
                + (f" in {str(cwd)!r}" if cwd else "")
                + f": {exc}"
            ) from exc
        self._setup_output = _capped(done.stdout + done.stderr)
        if done.returncode != 0:
            tail = self._setup_output[-2000:].decode(errors="replace")
            raise TargetUnreachable(
                f"target {self.name!r}: setup.argv {list(setup.argv)!r} exited {done.returncode} before the "
                f"service was started:\n{tail}"
            )

    def _set_up(self, setup: Setup) -> None:
        """Run the setup, or copy what an identical one made (its template); then `after_setup`."""
        note = self.templated.reuse() if self.templated is not None else None
        if note is not None:
            self._setup_output = f"{note}\n".encode()
        else:
            started = time.monotonic()
            self._run_setup(setup)
            took = time.monotonic() - started
            note = self.templated.keep(took) if self.templated is not None else None
            if note is not None:
                self._setup_output = (self._setup_output or b"") + f"--- acklab: {note} ---\n".encode()
        if note is not None:
            self.setup_note = note
            print(f"acklab: target {self.name!r}: {note}", file=sys.stderr)
        if self._after_setup is not None:
            self._after_setup()

    def _launch(self) -> None:
        if self.command.setup is not None and self._setup_output is None:
            self._set_up(self.command.setup)
        if not self.running() and accepts(self.host, self.port):
            raise TargetUnreachable(
                f"target {self.name!r}: something already accepts connections at {self.host}:{self.port} "
                "before the lab started command:; stop it (the lab starts the service itself) or remove "
                "command: from the spec"
            )
        try:
            self._spawn(
                self.command.argv,
                dict(self.command.env) if self.confined is not None else unconfined_env(self.command.env),
                lease_what=f"target {self.name} command: {self.command.argv[0]} (port {self.port})",
                cwd=self.command.cwd,
                confined=self.confined,
                network=self.network,
            )
        except OSError as exc:
            raise TargetUnreachable(
                f"target {self.name!r}: command.argv {list(self.command.argv)!r} could not start"
                + (f" in command.cwd {str(self.command.cwd)!r}" if self.command.cwd else "")
                + f": {exc}"
            ) from exc

    def _wait_ready(self) -> None:
        command = self.command
        rule = describe_rule(self.ready_url, command.ready_status, command.ready_method)
        if self.routes is not None:
            rule += ", and the lab's signed probe delivery not answered 404 or 405"
        path = urlsplit(self.endpoint).path or "/"
        waited: list[str] = []

        def no_route(seen: str) -> None:
            waited.append(seen)
            print(
                f"acklab: target {self.name!r}: the service is up ({redact(seen)}): nothing at {path} yet. "
                f"Waiting up to command.ready_timeout_s={command.ready_timeout_s:g} s for its routes; if {path} "
                "is not the webhook's path, fix the spec's endpoint",
                file=sys.stderr,
            )

        ready, seen = wait_ready(
            self.ready_url,
            command.ready_status,
            command.ready_timeout_s,
            alive=self.running,
            method=command.ready_method,
            body=command.ready_body,
            routes=self.routes,
            no_route=no_route,
        )
        if ready:
            self.ready = True
            return
        if not self.running():
            code = self._proc.returncode if self._proc else None
            self._finish()
            raise TargetUnreachable(
                f"target {self.name!r}: the service of command: exited ({code}) while starting, before it "
                f"was ready ({rule}):\n{self.log_tail()}"
            )
        self.kill()
        if waited and "(no route yet)" in seen:
            raise TargetUnreachable(
                f"target {self.name!r}: the service answered, but nothing at {path}: {redact(seen)} for "
                f"{command.ready_timeout_s:g} s. Is {path} the webhook's path (the spec's endpoint, against "
                "the app's routes)? Raise command.ready_timeout_s only if its routes take that long to "
                f"appear:\n{self.log_tail()}"
            )
        raise TargetUnreachable(
            f"target {self.name!r}: the service of command: never became ready within "
            f"command.ready_timeout_s={self.command.ready_timeout_s:g} s of starting (readiness: {rule}; "
            f"last: {seen}); raise ready_timeout_s, or set command.ready to a URL and status that say "
            f"it is up:\n{self.log_tail()}"
        )

    def kill(self) -> int | None:
        """SIGKILL the whole group, then wait (bounded) until nothing accepts on the port."""
        if self._proc is None:
            return None
        code = super().kill()
        deadline = time.monotonic() + PORT_FREE_S
        while accepts(self.host, self.port, timeout_s=0.2):
            if time.monotonic() > deadline:
                raise HarnessError(
                    f"target {self.name!r}: {self.host}:{self.port} still accepts connections "
                    f"{PORT_FREE_S:g} s after the service's process group was killed; something else "
                    "serves that port"
                )
            time.sleep(0.01)
        return code


def _capped(data: bytes, cap: int = SETUP_LOG_CAP_BYTES) -> bytes:
    if len(data) <= cap:
        return data
    return data[: cap // 2] + f"\n--- acklab: {len(data) - cap} bytes cut ---\n".encode() + data[-cap // 2 :]
