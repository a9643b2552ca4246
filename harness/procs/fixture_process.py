"""The webhook fixture as a process of its own (`acklab serve fixture`), for crash experiments
and for serving a checkout the lab must not import.

A crash must kill the whole server, mid-request, the way SIGKILL or a power cut does: only
a separate process can die like that while the lab watches. The process keeps its port
across restarts, so the sender retries to the same URL; it runs in its own session, so
the janitor can end its whole process group; and it is leased in the journal while alive.

With ``checkout=DIR`` the process serves *that* checkout's fixture (the repair flow's head or
patched worktree): ``python -I`` ignores PYTHONPATH and the working directory, the launcher
puts DIR first on ``sys.path`` itself and refuses to serve when the handler would be
imported from anywhere else. The process gets a minimal environment: the code it runs is
under test, and the lab's tokens (GitLab, the model's API key) are none of its business.
With ``confined=PLACE`` (`harness.procs.confinement`) it serves the place's private copy of
the checkout, confined by it: the environment is then the place's allowlist and the settings.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import httpx

from acklab.harness.errors import HarnessError
from acklab.harness.ports import free_port
from acklab.harness.procs.confinement import Bridged, Confined, loopback_ports, unconfined_env
from acklab.harness.procs.leased_process import LeasedProcess
from acklab.harness.procs.leases import NO_LEASES, LeaseBook
from acklab.harness.wire.transports import tls

READY_TIMEOUT_S = 30.0
# `acklab serve fixture ...` without depending on where the console script was installed.
LAUNCHER = "import sys; from acklab.cli import main; main(sys.argv[1:])"
# `python -I -B -u -c CHECKOUT_LAUNCHER DIR fixture ...`: the fixture of checkout DIR, and nothing else.
CHECKOUT_LAUNCHER = """
import sys
from importlib.util import find_spec
from pathlib import Path
root = Path(sys.argv[1]).resolve()
sys.path.insert(0, str(root))
from acklab.app import runtime
handler = sys.argv[sys.argv.index("--handler") + 1] if "--handler" in sys.argv else "live"
spec = find_spec(runtime.HANDLER_MODULES[handler])
origin = Path(spec.origin if spec and spec.origin else "?").resolve()
if not (Path(runtime.__file__).resolve().is_relative_to(root) and origin.is_relative_to(root)):
    sys.exit(f"acklab serve: refused: the {handler} handler would come from {origin}, not from {root}")
print(f"acklab serve: {handler} handler from {origin}", file=sys.stderr, flush=True)
from acklab.app.cli import main
main(sys.argv[2:])
"""
# What a checkout's server inherits of the lab's environment (everything else stays behind).
CHECKOUT_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR")


class FixtureProcess(LeasedProcess):
    """``acklab serve fixture`` on a fixed loopback port; start, kill -9 and restart it."""

    what = "fixture process"

    def __init__(
        self,
        *,
        handler: str,
        database_url: str,
        secret: str,
        scheme: str = "standard",
        leases: LeaseBook = NO_LEASES,
        log_dir: Path,
        checkout: Path | None = None,
        confined: Confined | None = None,
        notify: dict[str, str] | None = None,
    ) -> None:
        self.handler, self.database_url, self.scheme = handler, database_url, scheme
        # The lab's sinks the fixture tells of each fulfilment (ACKLAB_SMTP_PORT, ACKLAB_WAREHOUSE_URL).
        self.notify = dict(notify or {})
        self.confined = confined
        self.checkout = confined.root if confined is not None else checkout
        self._secret = secret
        self.port = free_port()
        super().__init__(
            log_dir=log_dir,
            log_prefix=f"fixture-{self.port}",
            leases=leases,
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, *, crash_after_commit: bool = False, processing_delay_ms: int = 0) -> None:
        """Start the fixture and wait until ``/health`` answers 200 (its database answers)."""
        args = ["serve", "fixture", "--handler", self.handler]
        args += ["--scheme", self.scheme, "--port", str(self.port), "--log-level", "warning"]
        if crash_after_commit:
            args.append("--crash-after-commit")
        if processing_delay_ms:
            args += ["--processing-delay-ms", str(processing_delay_ms)]
        # Secrets travel in the environment, not argv: a database URL may carry a password,
        # and any local user can read a process's arguments with ps.
        settings = {
            "ACKLAB_WEBHOOK_SECRET": self._secret,
            "ACKLAB_DATABASE_URL": self.database_url,
            **self.notify,
        }
        if self.checkout is None:
            argv = [sys.executable, "-c", LAUNCHER, *args]
            env = unconfined_env({**settings, "PYTHONUNBUFFERED": "1"})
        else:
            # -I: no PYTHONPATH, no working directory, no user site; -B: nothing written into
            # the checkout; -u: the log says at once where the handler came from.
            argv = [sys.executable, "-I", "-B", "-u", "-c", CHECKOUT_LAUNCHER, str(self.checkout), *args[1:]]
            env = (
                settings
                if self.confined
                else {k: v for k, v in os.environ.items() if k in CHECKOUT_ENV} | settings
            )
        where = f" from {self.checkout}" if self.checkout else ""
        self._spawn(
            argv,
            env,
            lease_what=f"acklab serve fixture --handler {self.handler} --port {self.port}{where}",
            confined=self.confined,
            network=self.network(),
        )
        self._wait_ready()

    def network(self) -> Bridged:
        """What it serves (its port) and reaches (its database server, the lab's sinks) when confined."""
        smtp = self.notify.get("ACKLAB_SMTP_PORT", "")
        reaches = loopback_ports(self.database_url, self.notify.get("ACKLAB_WAREHOUSE_URL"))
        return Bridged(serves=(self.port,), reaches=(*reaches, *([int(smtp)] if smtp.isdigit() else [])))

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        with httpx.Client(timeout=2.0, trust_env=False, verify=tls()) as client:
            while time.monotonic() < deadline:
                if not self.running():
                    raise HarnessError(f"the fixture process exited while starting:\n{self.log_tail()}")
                try:
                    if client.get(f"{self.url}/health").status_code == 200:
                        self.ready = True
                        return
                except httpx.HTTPError:
                    pass
                time.sleep(0.05)
        self.kill()
        raise HarnessError(
            f"the fixture did not answer /health within {READY_TIMEOUT_S} s:\n{self.log_tail()}"
        )
