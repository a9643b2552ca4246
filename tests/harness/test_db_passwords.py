"""A password in ``--db`` never reaches a written byte, stdout or stderr: records show ``user:***@``."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest

from acklab.harness.engine.runner import RunOptions, _secrets
from acklab.harness.procs.pgtemp import PostgresServer
from acklab.harness.specs.credentials import redact, url_password, url_secrets
from acklab.harness.targets import resolve_target

ACKLAB = [sys.executable, "-c", "import sys; from acklab.cli import main; main(sys.argv[1:])"]


def acklab(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ACKLAB, *argv], capture_output=True, text=True, timeout=240, check=False)


def spellings(password: str) -> set[str]:
    """Every way the password can be written: decoded, URL-quoted, form-quoted."""
    return {password, quote(password, safe=""), quote_plus(password)}


def every_byte_under(root: Path) -> list[tuple[Path, bytes]]:
    return [(p, p.read_bytes()) for p in sorted(root.rglob("*")) if p.is_file()]


def role_with_password(server: PostgresServer, password: str) -> str:
    """A login role with `password` owning a fresh database; its URL with the password URL-quoted."""
    from psycopg import sql

    role, database = f"u_{uuid.uuid4().hex[:10]}", f"t_{uuid.uuid4().hex[:12]}"
    with server.connect() as conn:
        conn.execute(
            sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(sql.Identifier(role), sql.Literal(password))
        )
        # The owner may create tables in the database's public schema (PostgreSQL 15+ no longer
        # lets every role do so).
        conn.execute(
            sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(database), sql.Identifier(role))
        )
    return f"postgresql+psycopg://{role}:{quote(password, safe='')}@127.0.0.1:{server.port}/{database}"


@pytest.mark.parametrize(
    ("url", "password"),
    [
        ("postgresql+psycopg://app:planted-pw-123@db:5432/shop", "planted-pw-123"),
        ("postgresql+psycopg://app:pl%40nted%2Fpw-123@db:5432/shop", "pl@nted/pw-123"),
        ("postgresql+psycopg://app:pl+nted%20pw-123@db:5432/shop", "pl+nted pw-123"),
    ],
)
def test_every_spelling_of_the_password_is_refused(url, password):
    found = url_secrets(url)
    assert spellings(password) <= found
    assert url in found
    assert redact(url) == url.replace(f":{url_password(url)}@", ":***@")
    assert not any(secret in redact(url) for secret in found)


def test_the_run_refuses_the_db_password_and_the_callers_own_secrets():
    url = "postgresql+psycopg://app:planted-pw-123@127.0.0.1:5432/shop"
    target = resolve_target("fixture:live", db_url=url)
    refused = _secrets(target, RunOptions(db=url, secrets=("caller-token-0123", "short")))
    assert {"planted-pw-123", ":planted-pw-123@", url, target.secret, "caller-token-0123"} <= set(refused)
    assert "short" not in refused  # too short: the guard would trip on ordinary text
    assert target.describe().database == "postgresql"
    assert "planted" not in repr(RunOptions(db=None, secrets=("planted-pw-123",)))


def test_a_url_the_fixture_refuses_is_named_redacted_on_stderr(tmp_path):
    done = acklab(
        "run",
        "--experiment",
        "lost-ack",
        "--trials",
        "1",
        "--db",
        "sqlite://u:planted-pw-123@/:memory:",
        "--out",
        str(tmp_path / "out"),
    )
    assert done.returncode == 3, done.stderr
    assert "sqlite://u:***@/:memory:" in done.stderr
    assert "planted-pw-123" not in done.stdout + done.stderr


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.parametrize("password", ["planted-pw-123", "pl@nted/pw 123"])
def test_a_run_with_a_password_in_db_writes_it_nowhere(postgres_server, tmp_path, password):
    url = role_with_password(postgres_server, password)
    out = tmp_path / "out"
    done = acklab(
        "run", "--experiment", "lost-ack", "--trials", "1", "--db", url, "--out", str(out), "--json"
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["verdict"] == "pass"
    incident = json.loads(Path(result["experiments"][0]["incident"]).read_text())
    assert incident["target"]["database"] == "postgresql"
    written = every_byte_under(out)
    assert any(p.name == "journal.sqlite" for p, _ in written)  # the journal is among what was read
    leaks = [
        (str(path), spelling)
        for path, data in written
        for spelling in spellings(password)
        if spelling.encode() in data
    ]
    assert leaks == []
    for spelling in spellings(password):
        assert spelling not in done.stdout
        assert spelling not in done.stderr
