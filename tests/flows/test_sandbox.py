"""The sandbox untrusted code runs in (flows/sandbox/): who it runs as, what it sees, what it keeps.

Each test starts a real confined process and asks it, from the inside, what it can do.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from acklab.flows import sandbox as sandbox_package
from acklab.flows.errors import SandboxUnavailable
from acklab.flows.sandbox import account, choose, confined_env, environment, modes, withheld
from acklab.harness.ports import free_port
from acklab.harness.procs.confinement import Bridged, Launch

ROOT = Path(__file__).resolve().parents[2]

PROBE = r"""
import json, os, sys
status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if ":" in line)
def can(action):
    try:
        action()
        return True
    except OSError:
        return False
evidence, original, repo = sys.argv[1:4]
site = [p for p in sys.path if p.endswith("site-packages")][0]
print(json.dumps({
    "root": sorted(os.listdir("/")),
    "original": os.path.exists(original),
    "repo_git": os.path.exists(os.path.join(repo, ".git")),
    "repo": sorted(os.listdir(repo)) if os.path.isdir(repo) else [],
    "uid": os.getuid(),
    "caps": [status[k].strip() for k in ("CapPrm", "CapEff", "CapBnd", "CapAmb")],
    "no_new_privs": status["NoNewPrivs"].strip(),
    "env": sorted(os.environ),
    "parent_environ": (lambda: sorted({v.split(b"=", 1)[0].decode() for v in open(f"/proc/{os.getppid()}/environ", "rb").read().split(b"\0") if v}) if can(lambda: open(f"/proc/{os.getppid()}/environ", "rb").read()) else [])(),
    "pid_1_environ": can(lambda: open("/proc/1/environ", "rb").read()),
    "processes": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
    "evidence": can(lambda: os.listdir(evidence)) and bool(os.listdir(evidence)),
    "venv_writable": can(lambda: open(os.path.join(site, "acklab-probe.pth"), "w").close()),
    "copy_writable": can(lambda: open("written-by-probe", "w").close()),
    "root_home": (lambda: sorted(os.listdir(os.path.expanduser("~root"))) if can(lambda: os.listdir(os.path.expanduser("~root"))) else [])(),
}))
"""


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    where = tmp_path / "checkout"
    (where / "app").mkdir(parents=True)
    (where / "app" / "webhooks.py").write_text("x = 1\n")
    (where / ".git").mkdir()  # never copied
    return where


def probe(checkout: Path, evidence: Path) -> tuple[dict[str, Any], list[str]]:
    sandbox = choose(hide=(evidence,))
    place = sandbox.prepare(checkout, label="probe")
    try:
        own = {"ACKLAB_WEBHOOK_SECRET": "its-own", "GITLAB_TOKEN": "glpat-passed-by-mistake"}
        argv = (sys.executable, "-I", "-c", PROBE, str(evidence), str(checkout), str(ROOT))
        done = run_confined(place.launch(Launch(argv, own), network=Bridged()))
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout), place.changed()
    finally:
        place.close()


def run_confined(launch: Launch) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(launch.argv),
        env=dict(launch.env),
        cwd=launch.cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_confined_code_runs_unprivileged_and_sees_nothing_of_the_lab(checkout, tmp_path):
    evidence = tmp_path / "out"
    evidence.mkdir(mode=0o700)
    (evidence / "journal.sqlite").write_text("the lab's evidence")
    seen, changed = probe(checkout, evidence)
    mode = choose().name
    if mode in ("bubblewrap+user", "user"):
        assert seen["uid"] == account.lookup().uid  # type: ignore[union-attr]
        assert seen["caps"] == ["0000000000000000"] * 4
        assert seen["no_new_privs"] == "1"
    # Its parent is the bridge's inner half, with the same allowlisted environment: never the lab's.
    assert set(seen["parent_environ"]) <= set(seen["env"])
    assert seen["evidence"] is False
    assert seen["venv_writable"] is False
    # the lab's home shows at most the folder its interpreter is bound back from, nothing of its own
    needed = {
        p.relative_to(Path.home()).parts[0]
        for p in modes.interpreter_paths()
        if p.is_relative_to(Path.home())
    }
    assert set(seen["root_home"]) <= needed or os.geteuid() != 0
    assert seen["copy_writable"] is True  # its own copy: written, and noticed
    if mode.startswith("bubblewrap"):
        # Not the host's root: the system, the interpreter and libraries, its copy; nothing of the
        # repository but the folders of an installed package (acklab's own, installed editable here).
        libraries = [
            *modes.interpreter_paths(), *modes.library_paths(), *(alias for _, alias in modes.interpreter_aliases())
        ]  # fmt: skip
        assert set(seen["root"]) <= {"bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "sbin"} | {
            "tmp", "usr", "var", *(p.parts[1] for p in libraries)
        }, seen["root"]  # fmt: skip
        assert seen["original"] is False  # the checkout itself, beside its copy
        assert seen["repo_git"] is False  # this repository's .git (its config: the remote, a token)
        assert set(seen["repo"]) <= {
            p.relative_to(ROOT).parts[0] for p in libraries if p.is_relative_to(ROOT)
        }
        assert "tests" not in seen["repo"]
    assert changed == []  # a new file is not a rewritten one
    env = set(seen["env"])
    assert "ACKLAB_WEBHOOK_SECRET" in env
    assert not env & environment.CREDENTIALS
    if mode.startswith("bubblewrap"):
        assert seen["pid_1_environ"] is False
        assert len(seen["processes"]) <= 3  # its own PID namespace: bwrap's init and itself


def test_the_copy_says_what_the_code_rewrote_and_holds_no_git(checkout):
    place = choose().prepare(checkout, label="rewrite")
    try:
        assert not (place.root / ".git").exists()
        assert (place.root / "app" / "webhooks.py").read_text() == "x = 1\n"
        launch = place.launch(
            Launch((sys.executable, "-I", "-c", "open('app/webhooks.py', 'w').write('x = 2\\n')"), {}),
            network="loopback",
        )
        subprocess.run(list(launch.argv), env=dict(launch.env), cwd=launch.cwd, check=True, timeout=60)
        assert place.changed() == ["app/webhooks.py"]
        assert (checkout / "app" / "webhooks.py").read_text() == "x = 1\n"  # the checkout is untouched
    finally:
        place.close()
    assert not place.top.exists()


def test_a_virtualenv_reached_through_a_link_starts_in_the_sandbox(checkout, tmp_path, monkeypatch):
    # `.venv -> /elsewhere/.venv`: the confined Python is started by the linked path, which is bound too.
    linked = tmp_path / "linked-venv"
    linked.symlink_to(Path(sys.prefix).resolve(), target_is_directory=True)
    python = linked / Path(sys.executable).relative_to(sys.prefix)
    monkeypatch.setattr(sys, "prefix", str(linked))
    assert (Path(sys.prefix).resolve(), linked) in modes.interpreter_aliases()
    place = choose().prepare(checkout, label="linked")
    try:
        done = run_confined(
            place.launch(Launch((str(python), "-I", "-c", "print('started')"), {}), network="loopback")
        )
        assert (done.returncode, done.stdout.strip()) == (0, "started"), done.stderr
    finally:
        place.close()


def test_checks_have_loopback_only(checkout, tmp_path):
    assert choose().name.startswith("bubblewrap"), (
        "bubblewrap is missing: make test installs it (scripts/ensure-system-deps.sh)"
    )
    script = "import socket; print(sorted(i[1] for i in socket.if_nameindex()))"
    place = choose().prepare(checkout, label="net")
    try:
        done = run_confined(
            place.launch(Launch((sys.executable, "-I", "-c", script), {}), network="loopback")
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout.replace("'", '"')) == ["lo"]
    finally:
        place.close()


def test_a_daemon_dies_with_the_sandbox(checkout, tmp_path):
    assert choose().name.startswith("bubblewrap"), (
        "bubblewrap is missing: make test installs it (scripts/ensure-system-deps.sh)"
    )
    mark = str(os.getpid()) + "424242"
    daemon = (
        "import os\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        f"    os.execv('/bin/sleep', ['sleep', '300.{mark}'])\n"
    )
    place = choose().prepare(checkout, label="daemon")
    try:
        launch = place.launch(Launch((sys.executable, "-I", "-c", daemon), {}), network="loopback")
        subprocess.run(list(launch.argv), env=dict(launch.env), cwd=launch.cwd, check=True, timeout=60)
    finally:
        place.close()
    # The kernel kills what is left in the sandbox's PID namespace as its init exits; the last of
    # it may still be listed for a moment after bwrap returns (it failed 1 run in 3, serially).
    deadline = time.monotonic() + 5
    while (alive := _running(f"300.{mark}")) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert alive == [], "the daemon outlived its sandbox by 5 s (it sleeps 300)"


def _running(mark: str) -> list[str]:
    return [p for p in os.listdir("/proc") if p.isdigit() and _cmdline(p).find(mark.encode()) >= 0]


def _cmdline(pid: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def test_without_a_sandbox_the_flow_refuses_and_says_what_to_install(monkeypatch):
    modes.usable_bwrap.cache_clear()
    monkeypatch.setattr(sandbox_package, "usable_bwrap", lambda as_root: None)
    monkeypatch.setattr(sandbox_package, "is_root", lambda: False)
    with pytest.raises(SandboxUnavailable, match=r"apt-get install bubblewrap.*--unsandboxed") as info:
        choose()
    assert info.value.exit_code == 5
    assert choose(unsandboxed=True).name == "none"
    assert "UNSANDBOXED" in choose(unsandboxed=True).describe()


def test_root_without_bubblewrap_drops_to_the_user_or_names_the_unreachable_interpreter(monkeypatch):
    monkeypatch.setattr(sandbox_package, "usable_bwrap", lambda as_root: None)
    monkeypatch.setattr(sandbox_package, "is_root", lambda: True)
    if os.geteuid() != 0:  # only root can be the sandbox user's root
        monkeypatch.setattr(account, "ensure", lambda: account.Account("acklab-sandbox", 64000, 64000))
    blocked = [p for p in modes.interpreter_paths() if modes.blocked_ancestor(p, account.ensure())]
    if blocked:  # this machine's Python lives under /root (0700): only bubblewrap can bind it in
        with pytest.raises(SandboxUnavailable, match=r"cannot reach the interpreter .*install bubblewrap"):
            choose()
    else:
        assert choose().name == "user"


def test_the_environment_is_an_allowlist_and_the_flow_withholds_its_credentials(monkeypatch, tmp_path):
    for name in (
        "GITLAB_TOKEN",
        "CI_JOB_TOKEN",
        "ACKLAB_LLM_API_KEY",
        "ACKLAB_MANIFEST_KEY",
        "SOMETHING_ELSE",
    ):
        monkeypatch.setenv(name, f"value-of-{name}")
    env = confined_env({"ACKLAB_DATABASE_URL": "sqlite:///x", "CI_JOB_TOKEN": "passed"}, tmp_path)
    assert "SOMETHING_ELSE" not in env
    assert not set(env) & environment.CREDENTIALS
    assert env["HOME"] == str(tmp_path / "home")
    assert env["ACKLAB_DATABASE_URL"] == "sqlite:///x"
    from acklab.evidence import manifest_signature

    with withheld():
        assert not {"GITLAB_TOKEN", "CI_JOB_TOKEN", "ACKLAB_LLM_API_KEY", "ACKLAB_MANIFEST_KEY"} & set(
            os.environ
        )
        assert manifest_signature.signing_key() == b"value-of-ACKLAB_MANIFEST_KEY"  # still signs
        child = subprocess.run(
            [sys.executable, "-c", "import os; print(sorted(os.environ))"],
            capture_output=True,
            text=True,
            check=True,
        )
        assert "GITLAB_TOKEN" not in child.stdout
        assert "ACKLAB_MANIFEST_KEY" not in child.stdout
    assert os.environ["GITLAB_TOKEN"] == "value-of-GITLAB_TOKEN"


def test_the_sandbox_user_is_made_once_and_is_unprivileged():
    if os.geteuid() != 0 and account.lookup() is None:
        with pytest.raises(SandboxUnavailable, match=r"only root can create it; .*useradd --system"):
            account.ensure()
        return
    first, second = account.ensure(), account.ensure()
    assert first == second
    assert first.name == account.USER
    assert first.uid != 0
    assert first.gid != 0


NETWORK_PROBE = r"""
import json, socket, sys, time
allowed, denied, serve = (int(a) for a in sys.argv[1:4])
def reach(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
            return conn.recv(100).decode()
    except OSError as exc:
        return type(exc).__name__
found = {"allowed": reach(allowed), "denied": reach(denied), "interfaces": sorted(n for _, n in socket.if_nameindex())}
found["padding"] = "x" * (1 << 20)  # written just before it exits: all of it still reaches the lab
time.sleep(1.0)  # the lab knocks meanwhile: nothing listens yet, so the bridge does not either
server = socket.socket()
server.bind(("127.0.0.1", serve))
server.listen()
conn, _ = server.accept()
conn.sendall(json.dumps(found).encode())
conn.close()
"""


class Listener:
    """A loopback server of the lab's that greets whoever connects, and counts them."""

    def __init__(self, greeting: bytes) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        threading.Thread(target=self._serve, args=(greeting,), daemon=True).start()

    def _serve(self, greeting: bytes) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            conn.sendall(greeting)
            conn.close()


def test_served_code_has_a_network_of_its_own_and_reaches_only_what_the_lab_bridges(checkout):
    assert choose().name.startswith("bubblewrap"), "bubblewrap is missing: make test installs it"
    allowed, denied = Listener(b"the-lab's-database"), Listener(b"another-job's-server")
    serve = free_port()
    place = choose().prepare(checkout, label="net")
    try:
        argv = (sys.executable, "-I", "-c", NETWORK_PROBE, str(allowed.port), str(denied.port), str(serve))
        launch = place.launch(Launch(argv, {}), network=Bridged(serves=(serve,), reaches=(allowed.port,)))
        proc = subprocess.Popen(
            list(launch.argv), env=dict(launch.env), cwd=launch.cwd, start_new_session=True
        )
        try:
            time.sleep(0.5)
            with pytest.raises(ConnectionRefusedError):  # not listening inside yet: refused outside too
                socket.create_connection(("127.0.0.1", serve), timeout=5).close()
            found = json.loads(_read_when_served(serve))
            assert proc.wait(timeout=30) == 0
        finally:
            proc.kill()
            proc.wait()
    finally:
        place.close()
    assert len(found.pop("padding")) == 1 << 20
    assert found == {
        "allowed": "the-lab's-database",
        "denied": "ConnectionRefusedError",  # the host's port is not the namespace's
        "interfaces": ["lo"],
    }
    assert denied.accepted == 0
    with pytest.raises(ConnectionRefusedError):  # the bridge ended with the service
        socket.create_connection(("127.0.0.1", serve), timeout=5).close()


def _read_when_served(port: int, timeout_s: float = 30.0) -> bytes:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
                chunks = []
                while chunk := conn.recv(4096):
                    chunks.append(chunk)
                return b"".join(chunks)
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_without_bubblewrap_each_place_has_a_uid_of_its_own(checkout, tmp_path):
    if os.geteuid() != 0:  # only root drops to other users
        return
    sandbox = modes.Sandbox("user", account.ensure(), None, modes.setpriv_path())
    mark = str(os.getpid()) + "535353"
    mine, theirs = sandbox.prepare(checkout, label="mine"), sandbox.prepare(checkout, label="theirs")
    try:
        assert mine.account is not None
        assert theirs.account is not None
        assert len({mine.account.uid, theirs.account.uid, account.ensure().uid}) == 3
        (theirs.scratch / "fixture.db").write_text("their run's database")
        os.chown(theirs.scratch / "fixture.db", theirs.account.uid, theirs.account.gid)
        script = (
            f"cat {theirs.scratch}/fixture.db; echo rewritten > {theirs.scratch}/fixture.db; "
            f"echo planted > {theirs.root}/app/webhooks.py; setsid sleep 300.{mark} >/dev/null 2>&1 & echo started"
        )
        done = run_confined(mine.launch(Launch(("/bin/sh", "-c", script), {}), network=Bridged()))
        assert "started" in done.stdout
        assert "their run's database" not in done.stdout
        assert done.stderr.count("Permission denied") >= 3, done.stderr
        assert (theirs.scratch / "fixture.db").read_text() == "their run's database"
        assert (theirs.root / "app" / "webhooks.py").read_text() == "x = 1\n"
        assert [p for p in os.listdir("/proc") if _cmdline(p).find(f"300.{mark}".encode()) >= 0]
    finally:
        mine.close()
        theirs.close()
    # The daemon it left lived until its place was closed.
    assert [p for p in os.listdir("/proc") if _cmdline(p).find(f"300.{mark}".encode()) >= 0] == []


def test_acklab_imports_in_the_sandbox_from_a_checkout_closed_to_the_sandbox_user(tmp_path):
    # An editable install points into its checkout; cloned under `mktemp -d` (0700) the sandbox user
    # cannot reach it. Hidden here like such a directory, its package folders must still import.
    import acklab

    root = Path(acklab.__file__).resolve().parents[1]
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / "README").write_text("a user's repository\n")
    place = choose(hide=(root,)).prepare(checkout, label="private")
    try:
        code = "import acklab.harness.engine.api, acklab.pytest_plugin, acklab.app; print('imported')"
        launch = place.launch(Launch((sys.executable, "-c", code), {}), network="loopback")
        done = subprocess.run(
            list(launch.argv), env=dict(launch.env), cwd=launch.cwd, capture_output=True, text=True,
            timeout=60, check=False,
        )  # fmt: skip
    finally:
        place.close()
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == "imported\n"
