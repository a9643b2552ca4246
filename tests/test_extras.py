"""The slim core: importing it pulls no extra's package, and a missing extra is exit 4 naming
the pip command that installs it the way acklab itself was installed (never a traceback).

Each check runs in an interpreter of its own: this test process has imported everything already.
An extra is made missing by ``sys.modules[name] = None``, which makes its import fail as an
uninstalled package's does (ModuleNotFoundError).

The first check runs in a fresh interpreter and proves the core imports no extra. The others
are forked from one interpreter that has imported that same core (and checked, before it forks,
that no extra came with it): a child then imports, blocks and exits as a fresh interpreter
would, without importing the core again (0.6 s of CPU each, eleven times in this file).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import IO

import pytest

from acklab.evidence.extras import EXTRAS, PACKAGES, install_command

ROOT = Path(__file__).resolve().parents[1]
# Every import name an extra brings (and nothing the core lists).
EXTRA_MODULES = sorted(name for name, (_, extra) in PACKAGES.items() if extra and extra != "dev")
CORE_IMPORTS = [
    "acklab",
    "acklab.cli",
    "acklab.pytest_plugin",
    "acklab.harness.cli.run",
    "acklab.harness.cli.init",
    "acklab.harness.engine.api",
    "acklab.harness.engine.runner",
    "acklab.harness.experiments",
    "acklab.harness.targets.spec",
    "acklab.harness.targets.app_spec",
    "acklab.evidence.cli",
    "acklab.evidence.bundle",
]
SPEC = """\
apiVersion: acklab/v1
kind: target
name: shop
endpoint: http://127.0.0.1:9/hooks
signing: {scheme: none}
event: {id: "{{event_id}}", type: order.paid, data: {amount: 1200}}
effects: {sql: {url: "sqlite:////tmp/shop.db", count: "SELECT count(*) FROM t WHERE e = :event_id"}}
"""


# The forking interpreter: imports the core, refuses to go on if an extra came with it, then for
# each request (a JSON line: code, modules to block, cwd, files for stdout and stderr) forks a
# child that blocks the modules and runs the code as `python -c` would, and answers its exit code.
FORK_SERVER = """\
import importlib, json, os, sys, traceback
for _module in CORE_IMPORTS:
    importlib.import_module(_module)
_leaked = sorted(n for n in EXTRA_MODULES if n in sys.modules)
print(json.dumps({"leaked": _leaked}), flush=True)
for _line in sys.stdin:
    _request = json.loads(_line)
    _pid = os.fork()
    if _pid == 0:
        os.dup2(os.open(_request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 1)
        os.dup2(os.open(_request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 2)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.chdir(_request["cwd"])
        for _name in _request["block"]:
            sys.modules[_name] = None
        _code = 0
        try:
            exec(compile(_request["code"], "<string>", "exec"), {"__name__": "__main__"})
        except SystemExit as _exit:  # as the interpreter reads it: None 0, an int, else printed and 1
            _code = _exit.code if isinstance(_exit.code, int) else 0 if _exit.code is None else 1
            if not isinstance(_exit.code, int) and _exit.code is not None:
                print(_exit.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
            _code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_code & 0xFF)
    _, _status = os.waitpid(_pid, 0)
    print(json.dumps({"exit": os.waitstatus_to_exitcode(_status)}), flush=True)
"""


class Forks:
    """One interpreter with the core imported, forking a child for each check."""

    def __init__(self, where: Path) -> None:
        self.where = where
        prelude = f"CORE_IMPORTS = {CORE_IMPORTS!r}\nEXTRA_MODULES = {EXTRA_MODULES!r}\n"
        self.server = subprocess.Popen(
            [sys.executable, "-c", prelude + FORK_SERVER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        ready = json.loads(self.answer())
        assert ready == {"leaked": []}, f"the core imported an extra before any block: {ready}"
        self.count = 0

    def answer(self) -> str:
        out: IO[str] | None = self.server.stdout
        assert out is not None
        line = out.readline()
        assert line, f"the forking interpreter ended (exit {self.server.wait(timeout=10)})"
        return line

    def run(self, code: str, block: tuple[str, ...], cwd: Path | None) -> subprocess.CompletedProcess[str]:
        self.count += 1
        stdout, stderr = self.where / f"{self.count}.out", self.where / f"{self.count}.err"
        request = {"code": code, "block": list(block), "cwd": str(cwd or os.getcwd()),
                   "stdout": str(stdout), "stderr": str(stderr)}  # fmt: skip
        assert self.server.stdin is not None
        self.server.stdin.write(json.dumps(request) + "\n")
        self.server.stdin.flush()
        code_ = json.loads(self.answer())["exit"]
        return subprocess.CompletedProcess(code, code_, stdout.read_text(), stderr.read_text())

    def close(self) -> None:
        self.server.communicate(timeout=30)  # its stdin closed: the loop ends, and so does it


@pytest.fixture(scope="module")
def forks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Forks]:
    server = Forks(tmp_path_factory.mktemp("forks"))
    yield server
    server.close()


def python(
    code: str, *, block: tuple[str, ...] = (), cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """`python -c code` in a fresh interpreter, with the modules in block missing."""
    prelude = f"import sys\nfor _name in {list(block)!r}:\n    sys.modules[_name] = None\n"
    return subprocess.run(
        [sys.executable, "-c", prelude + code],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=cwd,
    )


def acklab(
    forks: Forks, *argv: str, block: tuple[str, ...] = (), cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return forks.run(f"from acklab.cli import main\nmain({list(argv)!r})", block, cwd)


def test_the_pyproject_extras_are_the_documented_ones():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(extras) == {*EXTRAS, "all", "dev"}
    assert extras["all"] == [f"acklab[{','.join(EXTRAS)}]"]
    assert extras["dev"][0] == "acklab[all]"  # make test, make demo and dev install everything


def test_importing_the_core_and_validating_a_spec_pulls_no_extra(tmp_path):
    (tmp_path / "shop.yaml").write_text(SPEC)
    code = (
        "import importlib, json\n"
        f"for m in {CORE_IMPORTS!r}: importlib.import_module(m)\n"
        "from click.testing import CliRunner\n"
        "from acklab.cli import cli\n"
        "done = CliRunner().invoke(cli, ['validate', 'shop.yaml'])\n"
        "assert done.exit_code == 0, done.output\n"
        f"print(json.dumps(sorted(n for n in {EXTRA_MODULES!r} if n in sys.modules)))\n"
    )
    done = python(code, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


@pytest.mark.parametrize(
    ("argv", "blocked", "extra"),
    [
        (["console", "--evidence", "."], ("fastapi", "jinja2"), "console"),
        (["pages", "--evidence", ".", "--out", "public"], ("jinja2",), "console"),
        (["explore", "--target", "fixture:live", "--budget", "1"], ("hypothesis",), "explore"),
        (["run", "--target", "fixture:live", "--trials", "1"], ("fastapi", "starlette"), "fixture"),
        (["serve", "fixture"], ("fastapi", "starlette"), "fixture"),
        (["evidence", "pull", "--project", "1", "--pipeline", "2"], ("gitlab",), "gitlab"),
    ],
    ids=["console", "pages", "explore", "run-fixture", "serve", "evidence-pull"],
)
def test_a_missing_extra_is_exit_4_naming_the_pip_command(forks, tmp_path, argv, blocked, extra):
    done = acklab(forks, *argv, block=blocked, cwd=tmp_path)
    assert done.returncode == 4, done.stderr
    assert install_command(extra) in done.stderr  # this venv's route: the editable checkout
    assert "Traceback" not in done.stderr


def test_a_single_packet_burst_without_h2_names_the_extra(forks, tmp_path):
    (tmp_path / "shop.yaml").write_text(SPEC)
    code = (
        "import asyncio\n"
        "from acklab.evidence.extras import MissingExtra\n"
        "from acklab.harness.targets.spec import load_target\n"
        "from acklab.harness.core.bursts import check_burst_sync\n"
        "target = load_target(__import__('pathlib').Path('shop.yaml'), allow_remote=False)\n"
        "try:\n"
        "    asyncio.run(check_burst_sync(target, 'single-packet'))\n"
        "except MissingExtra as exc:\n"
        "    print(int(exc.exit_code), exc)\n"
    )
    done = forks.run(code, ("h2",), tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("4 ")
    assert install_command("h2") in done.stdout


def test_effects_in_postgresql_without_psycopg_name_the_extra(forks):
    code = (
        "import asyncio\n"
        "from acklab.evidence.extras import MissingExtra\n"
        "from acklab.harness.targets.effects import SqlProbe\n"
        "probe = SqlProbe('postgresql://u@127.0.0.1:9/shop', 'SELECT count(*) FROM t WHERE e = :event_id')\n"
        "try:\n"
        "    asyncio.run(probe.count('evt_1'))\n"
        "except MissingExtra as exc:\n"
        "    print(exc)\n"
    )
    done = forks.run(code, ("psycopg",), None)
    assert done.returncode == 0, done.stderr
    assert install_command("postgres") in done.stdout


@pytest.mark.parametrize(
    ("direct_url", "command"),
    [
        (None, "pip install 'acklab[sinks]'"),
        (
            {"url": "https://gitlab.example.com/acme/acklab.git",
             "vcs_info": {"vcs": "git", "commit_id": "887c0c16aa", "requested_revision": "1.2.0"}},
            "pip install 'acklab[sinks] @ git+https://gitlab.example.com/acme/acklab.git@1.2.0'",
        ),
        (
            {"url": "file:///opt/wheels/acklab-1.2.0-py3-none-any.whl", "archive_info": {}},
            "pip install '/opt/wheels/acklab-1.2.0-py3-none-any.whl[sinks]'",
        ),
        ({"url": "file:///home/ada/acklab", "dir_info": {"editable": True}}, "pip install -e '/home/ada/acklab[sinks]'"),
        ({"url": "file:///home/ada/acklab", "dir_info": {}}, "pip install '/home/ada/acklab[sinks]'"),
    ],
    ids=["package-registry", "git-url", "wheel", "editable-clone", "clone"],
)  # fmt: skip
def test_the_install_command_is_the_route_acklab_came_by(tmp_path, direct_url, command):
    info = tmp_path / "acklab-1.2.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acklab\nVersion: 1.2.0\n")
    if direct_url is not None:
        (info / "direct_url.json").write_text(json.dumps(direct_url))
    assert install_command("sinks", metadata.PathDistribution(info)) == command


def test_validate_names_the_extras_and_the_tools_a_spec_needs_that_are_missing(forks, tmp_path):
    spec = SPEC.replace(
        'effects: {sql: {url: "sqlite:////tmp/shop.db", count: "SELECT count(*) FROM t WHERE e = :event_id"}}',
        'effects: {sql: {url: "sqlite:////tmp/shop.db", count: "SELECT count(*) FROM t WHERE e = :event_id"},\n'
        '          smtp: {listen: "127.0.0.1:{{smtp_port}}"}}\n'
        'command: {argv: [shop-server-not-installed, --port, "{{port}}"]}\n'
        f"setup: {{argv: [{sys.executable}, -m, no_such_migrations_tool]}}",
    ).replace("http://127.0.0.1:9/hooks", "http://127.0.0.1:{{port}}/hooks")
    (tmp_path / "shop.yaml").write_text(spec)
    done = acklab(forks, "validate", "shop.yaml", block=("aiosmtpd",), cwd=tmp_path)
    assert done.returncode == 4, done.stdout + done.stderr
    assert (
        f"missing: the sinks extra (the SMTP and outbound API sinks (effects.smtp, effects.outbound)): the "
        f"Python package 'aiosmtpd' is not installed; {install_command('sinks')}" in done.stdout
    )
    assert "missing: command.argv: 'shop-server-not-installed' is not on PATH" in done.stdout
    assert (
        f"missing: setup.argv: {sys.executable} -m no_such_migrations_tool: {sys.executable} cannot import"
        in (done.stdout)
    )
    assert "cannot run it yet" in done.stdout
    # The extra there: only the tools are missing.
    installed = acklab(forks, "validate", "shop.yaml", cwd=tmp_path)
    assert "missing: the sinks extra" not in installed.stdout
    assert installed.returncode == 4
