"""`pip install acklab` as a user's project gets it: the core wheel, no extras, in a fresh virtualenv
beside the project's own (plain WSGI) app — once at the newest dependencies, once at the lower bounds
(ci/constraints-lower.txt) — and the plugin attacks that app from the project's own test.

The virtualenvs install from the package index (the core's dependencies are not vendored);
pip's cache keeps a second run quick."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONSTRAINTS = ROOT / "ci" / "constraints-lower.txt"
EXTRA_MODULES = (
    "fastapi",
    "starlette",
    "jinja2",
    "psycopg",
    "gitlab",
    "hypothesis",
    "h2",
    "pydantic_settings",
)

pytestmark = pytest.mark.slow

SHOP = '''\
"""A user's shop: a plain WSGI app whose order webhook dedupes by event id (Standard Webhooks)."""
import json
import sqlite3

from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError


def create_app(database, secret, *, dedupe=True):
    with sqlite3.connect(database) as db:
        db.execute("CREATE TABLE IF NOT EXISTS orders (event_id TEXT, UNIQUE(event_id))" if dedupe
                   else "CREATE TABLE IF NOT EXISTS orders (event_id TEXT)")

    def answer(start_response, status, doc):
        body = json.dumps(doc).encode()
        start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
        return [body]

    def app(environ, start_response):
        if environ["REQUEST_METHOD"] != "POST" or environ["PATH_INFO"] != "/hooks":
            return answer(start_response, "404 Not Found", {})
        body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        headers = {k[5:].replace("_", "-").lower(): v for k, v in environ.items() if k.startswith("HTTP_")}
        try:
            event = Webhook(secret).verify(body, headers)
        except WebhookVerificationError:
            return answer(start_response, "401 Unauthorized", {})
        try:
            with sqlite3.connect(database, timeout=30) as db:
                db.execute("INSERT INTO orders VALUES (?)", (event["id"],))
        except sqlite3.IntegrityError:
            return answer(start_response, "200 OK", {"status": "duplicate"})
        return answer(start_response, "200 OK", {"status": "ok"})

    return app
'''

TEST = """\
import sqlite3
import sys

import pytest

from shop import create_app

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


@pytest.mark.parametrize("dedupe", [True, False], ids=["fixed", "buggy"])
def test_orders(webhook_lab, tmp_path, dedupe):
    database = str(tmp_path / "shop.db")

    def count(event_id):
        with sqlite3.connect(database) as db:
            return db.execute("SELECT count(*) FROM orders WHERE event_id = ?", (event_id,)).fetchone()[0]

    result = webhook_lab.attack(create_app(database, SECRET, dedupe=dedupe), endpoint="/hooks", secret=SECRET,
                                effects=count, experiments=["lost-ack", "concurrent-duplicates"], trials=1)
    loaded = sorted(m for m in EXTRAS if m in sys.modules)
    assert loaded == [], loaded
    assert result.passed is dedupe, result.explain()
"""


def make_venv(where: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True, timeout=120)
    return where / "bin" / "python"


def pip(python: Path, *args: str) -> None:
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    # --no-compile: the install is the same but for byte-compiling every module of every dependency,
    # which cost 5 of its 12 CPU-s; the test imports a few of them (compiled as they load).
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-compile", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]


@pytest.fixture(scope="module")
def core_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source, out = tmp_path_factory.mktemp("source"), tmp_path_factory.mktemp("wheel")
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        check=True,
        capture_output=True,
    ).stdout.decode()
    for rel in filter(None, listed.split("\0")):
        if (ROOT / rel).is_file():
            (source / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, source / rel)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(out),
            str(source),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (built,) = out.glob("acklab-*.whl")
    return built


def user_project(where: Path) -> Path:
    (where / "shop").mkdir(parents=True)
    (where / "shop" / "__init__.py").write_text(SHOP)
    (where / "tests").mkdir()
    (where / "tests" / "test_webhooks.py").write_text(TEST.replace("EXTRAS", repr(EXTRA_MODULES)))
    return where


def run_plugin(python: Path, project: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "VIRTUAL_ENV"))}
    env["PYTHONPATH"] = str(project)
    return subprocess.run(
        [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.mark.parametrize("bounds", ["newest", "lower"])
def test_the_core_wheel_alone_runs_the_plugin_against_a_users_app(core_wheel, tmp_path, bounds):
    python = make_venv(tmp_path / "venv")
    constraints = ["-c", str(CONSTRAINTS)] if bounds == "lower" else []
    pip(python, *constraints, str(core_wheel), "pytest", "standardwebhooks")
    listed = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True, check=True
    )
    installed = {
        line.split("==")[0].lower(): line.split("==")[1] for line in listed.stdout.split() if "==" in line
    }
    for extra in ("fastapi", "jinja2", "psycopg", "python-gitlab", "hypothesis", "h2", "pydantic-settings"):
        assert extra not in installed, f"the core pulled in {extra}"
    if bounds == "lower":
        for line in CONSTRAINTS.read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                name, version = line.split("==")
                assert installed[name.lower()] == version, (name, installed.get(name.lower()))
    done = run_plugin(python, user_project(tmp_path / "shop"))
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "2 passed" in done.stdout
    assert (tmp_path / "shop" / ".acklab" / ".gitignore").is_file()


def readme_install_block(readme: Path) -> list[str]:
    """The README's install commands: the sh block that begins ``# in a fresh clone of acklab``."""
    blocks = re.findall(r"```sh\n(.*?)```", readme.read_text(encoding="utf-8"), flags=re.DOTALL)
    [block] = [b for b in blocks if b.startswith("# in a fresh clone of acklab")]
    return [line.split("  #")[0].strip() for line in block.splitlines()[1:] if line.strip()]


def test_the_readmes_install_route_works_as_written_from_a_fresh_clone(tmp_path):
    clone = tmp_path / "acklab"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=120)
    python = make_venv(tmp_path / "venv")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))},
        "PATH": f"{python.parent}{os.pathsep}{os.environ['PATH']}",  # the venv activated
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    commands = readme_install_block(clone / "README.md")
    assert commands[0].startswith("python -m pip install"), commands
    for command in commands:
        done = subprocess.run(
            ["bash", "-c", command],
            cwd=clone,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        assert done.returncode == 0, f"{command}: {done.stdout[-2000:]}{done.stderr[-3000:]}"
    installed = subprocess.run(
        [str(python), "-c", "import aiosmtpd, acklab.harness.sinks.smtp; from acklab.evidence.extras import install_command; print(install_command('console'))"],
        capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr
    # What a missing extra of this installation asks for is the route it came by: the clone.
    assert installed.stdout.strip() == f"pip install '{clone}[console]'"
