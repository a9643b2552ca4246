"""`acklab init --app`: the app served as the spec will serve it — on a port of the lab's, its
database in a scratch directory (its tables made by the detected ``setup:``), its mail and API
calls pointed at the lab's sinks — so that discovery writes nothing of the developer's.

`command_section` is the spec's ``command:`` and ``setup:`` with run placeholders; `served` is
the same filled with this discovery's values, started, and stopped (its scratch removed) after.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import subprocess  # nosec B404 - the project's own interpreter, argv lists only
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from acklab.evidence.extras import install_command
from acklab.harness.init.heard import ANSWER
from acklab.harness.init.project import Project, run_probe
from acklab.harness.procs.service_process import DEFAULT_SETUP_TIMEOUT_S, Command, ServiceProcess, Setup
from acklab.harness.sinks import Sinks
from acklab.harness.sinks.outbound import Answer, OutboundConfig
from acklab.harness.sinks.smtp import SmtpConfig
from acklab.harness.specs.credentials import resolve_env
from acklab.harness.specs.service import Command as CommandSection
from acklab.harness.targets.isolation import Isolation

LOG_SETTLE_S = 0.5  # a server logs a handler's traceback around the moment it answers 500
PLACEHOLDERS = {
    "scratch": "{{scratch}}",
    "smtp_port": "{{smtp_port}}",
    "outbound_port": "{{outbound_port}}",
}


def python() -> str:
    """The program the spec's ``python`` names on this PATH (the project's), else this interpreter."""
    return shutil.which("python") or sys.executable


def has_module(interpreter: str, module: str, cwd: Path) -> bool:
    """Whether the project's interpreter imports `module` (gunicorn, uvicorn)."""
    if interpreter == sys.executable:
        return importlib.util.find_spec(module) is not None
    try:
        done = subprocess.run(  # nosec B603 - argv list
            [interpreter, "-c", f"import {module}"], cwd=cwd, capture_output=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def server_argv(app_ref: str, interface: str, *, gunicorn: bool) -> list[str]:
    """How the spec serves the app on ``{{port}}``: uvicorn for ASGI; gunicorn's threads for WSGI
    (one process: a kill ends the whole app), else uvicorn's WSGI interface."""
    bind = ["--host", "127.0.0.1", "--port", "{{port}}"]
    if interface == "asgi":
        return ["python", "-m", "uvicorn", app_ref, *bind]
    if gunicorn:
        return ["python", "-m", "gunicorn", "--workers", "1", "--threads", "4", "--bind", "127.0.0.1:{{port}}", app_ref]  # fmt: skip
    return ["python", "-m", "uvicorn", "--interface", "wsgi", app_ref, *bind]


@dataclass(frozen=True)
class Serving:
    """The app as the spec serves it: ``command:`` and ``setup:`` with run placeholders."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    cwd: str  # relative to the spec's folder
    setup: tuple[str, ...] | None

    def command_section(self, *, mail: bool, outbound: bool, project: Project) -> CommandSection:
        """``command:``; the mail and API variables only when the sinks they point at are in the spec."""
        dropped = set() if mail else set(project.mail)
        dropped |= set() if outbound else set(project.outbound)
        env = {k: v for k, v in self.env.items() if k not in dropped}
        return CommandSection(argv=tuple(self.argv), cwd=self.cwd, env=env)


def serving(project: Project, *, interpreter: str, spec_dir: Path) -> tuple[Serving, str]:
    """The spec's way to serve the app, and the app's framework (asked of the project's interpreter,
    with its database in a throwaway directory: an app that makes its tables on import makes them there)."""
    with contextlib.ExitStack() as stack:
        iso = Isolation.allocate(frozenset({"scratch", "smtp_port", "outbound_port"}), label="init-probe")
        stack.callback(iso.release)
        env = {
            k: resolve_env(v, field_name=f"command.env.{k}")
            for k, v in project.service_env(iso.values).items()
        }
        found = run_probe(interpreter, project.root, ["app", project.app_ref], env)
    interface, framework = str(found["interface"]), str(found.get("framework") or "")
    gunicorn = interface == "wsgi" and has_module(interpreter, "gunicorn", project.root)
    cwd = Path(os.path.relpath(project.root.resolve(), (project.root / spec_dir).resolve())).as_posix()
    return (
        Serving(
            argv=tuple(server_argv(project.app_ref, interface, gunicorn=gunicorn)),
            env=project.service_env(PLACEHOLDERS),
            cwd=cwd,
            setup=project.setup,
        ),
        project.framework or framework,
    )


@dataclass
class Served:
    """The app served for discovery: its webhook URL, the database it writes, the sinks it talks to."""

    url: str
    database_url: str
    sinks: Sinks
    service: ServiceProcess
    log_tail: Callable[[], str]


def sinks_installed() -> bool:
    """Whether the sinks extra is here (aiosmtpd, starlette): without it init counts rows only."""
    return all(importlib.util.find_spec(m) is not None for m in ("aiosmtpd", "starlette"))


def log_tail(service: ServiceProcess) -> Callable[[], str]:
    """The service's last output, once it has had a moment to write what it logs after answering."""

    def tail() -> str:
        time.sleep(LOG_SETTLE_S)
        return service.log_tail(3000)

    return tail


@contextlib.contextmanager
def served(
    project: Project,
    how: Serving,
    *,
    hook_path: str,
    interpreter: str,
    say: Callable[[str], None],
) -> Iterator[Served]:
    """Serve the app with this discovery's port, scratch directory and sinks; stop it all after."""
    names = frozenset({"port", "scratch", "smtp_port", "outbound_port"})
    with contextlib.ExitStack() as stack:
        iso = Isolation.allocate(names, label="init")
        stack.callback(iso.release)
        values = iso.values
        listening = sinks_installed()
        if not listening:
            say(
                "note: the sinks extra is not installed, so init cannot hear the app's emails or API calls "
                f"and counts rows only; {install_command('sinks')} to count them too"
            )
        outbound = (
            OutboundConfig(
                "127.0.0.1",
                int(values["outbound_port"]),
                otherwise=Answer.of(ANSWER),
            )
            if project.outbound and listening
            else None
        )
        smtp = SmtpConfig("127.0.0.1", int(values["smtp_port"])) if listening else None
        sinks = Sinks({name: c for name, c in (("smtp", smtp), ("outbound", outbound)) if c is not None})
        sinks.start()
        stack.callback(sinks.stop)
        env = {k: resolve_env(iso.fill(v), field_name=f"command.env.{k}") for k, v in how.env.items()}
        argv = tuple(iso.fill(a) for a in how.argv)
        setup = (
            Setup(
                argv=(interpreter, *how.setup[1:]),
                env={},
                timeout_s=DEFAULT_SETUP_TIMEOUT_S,
                cwd=project.root,
            )
            if how.setup
            else None
        )
        command = Command(argv=(interpreter, *argv[1:]), env=env, cwd=project.root, setup=setup)
        url = f"http://127.0.0.1:{values['port']}{hook_path}"
        service = ServiceProcess(command, url, name="init")
        say(
            f"serving {project.app_ref} on 127.0.0.1:{values['port']} ({' '.join(argv[:3])} ...), its database "
            f"in {values['scratch']}" + (f", after {' '.join(how.setup[1:])}" if how.setup else "")
        )
        stack.callback(service.remove_logs)
        stack.callback(service.stop)
        service.start()
        yield Served(url, project.database_url(values), sinks, service, log_tail(service))
