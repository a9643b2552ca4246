"""Run placeholders: {{port}}, {{scratch}}, {{database_url}} and setup:, checked and served.

A real service (gunicorn, two workers) whose schema comes from a migration step is served
on a port the lab picks, with its database in a directory (or a PostgreSQL database) the lab
makes for the run; two runs at once never meet, and nothing is left behind.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from acklab.harness.engine.runner import RunOptions, RunResult, run
from acklab.harness.errors import RemoteRefused, SpecError
from acklab.harness.procs.pgtemp import PostgresServer
from acklab.harness.specs import placeholders
from acklab.harness.specs.target import RUN_PLACEHOLDERS, read_target
from acklab.harness.targets.spec import load_target
from acklab.harness.targets.validate import validate_target
from tests.consumers.migrated_shop import EFFECTS_QUERY
from tests.consumers.scenarios import ROOT, SECRETS

SHOP = "tests.consumers.migrated_shop"


def shop_spec(
    path: Path,
    *,
    db_url: str,
    dedupe: str = "claim",
    extra: dict[str, Any] | None = None,
    name: str = "migrated-shop",
) -> Path:
    doc: dict[str, Any] = {
        "apiVersion": "acklab/v1",
        "kind": "target",
        "name": f"{name}-{dedupe}",
        "endpoint": "http://127.0.0.1:{{port}}/hooks",
        "signing": {"scheme": "standard", "secret": "env:ACKLAB_TEST_WEBHOOK_SECRET"},
        "event": {"id": "{{event_id}}", "type": "order.paid", "data": {"order_id": "{{order_id}}"}},
        "setup": {"argv": [sys.executable, "-m", SHOP, "migrate"]},
        "command": {
            "argv": [
                sys.executable,
                *("-m", "gunicorn", "--workers", "2", "--bind", "127.0.0.1:{{port}}"),
                *("--log-level", "warning", f"{SHOP}:create_app()"),
            ],
            "env": {"SHOP_DB_URL": db_url, "SHOP_DEDUPE": dedupe, "PYTHONPATH": str(ROOT)},
            "cwd": str(ROOT),
            "ready": {"url": "http://127.0.0.1:{{port}}/health", "status": [200]},
            "ready_timeout_s": 30,
        },
        "effects": {"sql": {"url": db_url, "count": EFFECTS_QUERY}},
        "expect": {"max_effects": 1},
        **(extra or {}),
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.fixture
def secrets_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)


def attack(spec: Path, out: Path, experiments: tuple[str, ...] = ("lost-ack",)) -> RunResult:
    return run(RunOptions(target=str(spec), experiments=experiments, trials=1, seed=11, out=out))


def scratch_dirs(name: str) -> set[str]:
    """The scratch directories of targets called `name`-*: a name no other test file uses, since
    xdist runs other files' migrated shops beside this one."""
    import tempfile

    return {p.name for p in Path(tempfile.gettempdir()).glob(f"acklab-scratch-{name}-*")}


# -- checks (no service) ---------------------------------------------------------------------


def test_used_and_fill_leave_the_event_body_and_per_event_placeholders_alone() -> None:
    doc = {
        "endpoint": "http://127.0.0.1:{{port}}/hooks",
        "event": {"id": "{{event_id}}", "note": "{{port}}"},
        "effects": {"http": {"url": "http://127.0.0.1:{{ port }}/effects/{{event_id}}"}},
    }
    assert placeholders.used(doc, RUN_PLACEHOLDERS) == {"port"}
    filled = placeholders.fill(doc, {"port": "4321"})
    assert filled["endpoint"] == "http://127.0.0.1:4321/hooks"
    assert filled["effects"]["http"]["url"] == "http://127.0.0.1:4321/effects/{{event_id}}"
    assert filled["event"] == doc["event"]  # the body is a template of its own


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (
            {"endpoint": "http://127.0.0.1:{{prot}}/h", "command": {"argv": ["x"]}},
            "{{prot}} is not a placeholder",
        ),
        ({"endpoint": "http://127.0.0.1:{{port}}/h"}, "without command:"),
        (
            {"endpoint": "http://h:1/", "command": {"argv": ["x"], "env": {"DB": "{{database_url}}"}}},
            "no database: section",
        ),
        ({"endpoint": "http://h:1/", "database": {"url": "env:X"}}, "no field uses {{database_url}}"),
    ],
    ids=["typo", "port-without-command", "database-url-without-server", "server-without-use"],
)
def test_a_misused_placeholder_is_refused_with_the_fix(doc: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError, match=r"shop\.yaml") as caught:
        placeholders.check(doc, RUN_PLACEHOLDERS, source="shop.yaml")
    assert message in str(caught.value)


def test_validate_checks_a_placeholder_spec_with_stand_ins_and_says_so(
    tmp_path: Path, secrets_env: None
) -> None:
    spec = shop_spec(tmp_path / "shop.yaml", db_url="sqlite:///{{scratch}}/shop.db")
    doc = yaml.safe_load(spec.read_text())
    notes = validate_target(
        read_target(doc, source=str(spec)), source=str(spec), allow_unset=False, allow_remote=False
    )
    assert any("{{port}}, {{scratch}}: picked by the lab" in n for n in notes), notes
    remote = read_target({**doc, "endpoint": "http://203.0.113.9:{{port}}/hooks"}, source=str(spec))
    with pytest.raises(RemoteRefused, match="loopback"):
        validate_target(remote, source=str(spec), allow_unset=False, allow_remote=False)


def test_loading_allocates_nothing_until_the_service_is_served(tmp_path: Path, secrets_env: None) -> None:
    before = scratch_dirs("placeholder-load")
    target = load_target(
        shop_spec(tmp_path / "s.yaml", db_url="sqlite:///{{scratch}}/shop.db", name="placeholder-load"),
        allow_remote=False,
    )
    assert target.isolation is None
    assert target.ephemeral_effects
    assert scratch_dirs("placeholder-load") == before


# -- served ------------------------------------------------------------------------------------


@pytest.mark.slow  # gunicorn served after its migration
def test_a_placeholder_spec_is_served_on_its_own_port_and_scratch_and_leaves_nothing(
    tmp_path: Path, secrets_env: None
) -> None:
    name = "placeholder-leaves"
    before = scratch_dirs(name)
    good = attack(
        shop_spec(tmp_path / "good.yaml", db_url="sqlite:///{{scratch}}/shop.db", name=name), tmp_path / "out"
    )
    bad = attack(
        shop_spec(tmp_path / "bad.yaml", db_url="sqlite:///{{scratch}}/shop.db", dedupe="none", name=name),
        tmp_path / "out",
    )
    assert good.verdict == "pass", good.as_json()
    assert bad.verdict == "fail", bad.as_json()  # the effects were read from the service's own database
    assert scratch_dirs(name) == before  # the scratch directories went with the runs
    log = (bad.bundle / "service.log").read_text()
    assert "--- acklab: setup: ---" in log


@pytest.mark.slow  # gunicorn served after its migration
def test_two_runs_at_once_never_share_a_port_or_a_database(tmp_path: Path, secrets_env: None) -> None:
    spec = shop_spec(tmp_path / "shop.yaml", db_url="sqlite:///{{scratch}}/shop.db")
    targets = [load_target(spec, allow_remote=False) for _ in range(2)]
    for target in targets:
        target.provision()
    try:
        ports = {t.endpoint for t in targets}
        databases = {t.effects.sql.url for t in targets if t.effects.sql is not None}
        assert len(ports) == 2
        assert len(databases) == 2
    finally:
        for target in targets:
            assert target.isolation is not None
            target.isolation.release()
    results: list[RunResult] = []
    runs = [
        threading.Thread(target=lambda n=n: results.append(attack(spec, tmp_path / f"o{n}")))
        for n in range(2)
    ]
    for thread in runs:
        thread.start()
    for thread in runs:
        thread.join(300)
    assert [r.verdict for r in results] == ["pass", "pass"], [r.as_json() for r in results]


def test_a_failing_setup_is_the_lab_failing_with_its_output(tmp_path: Path, secrets_env: None) -> None:
    spec = shop_spec(
        tmp_path / "shop.yaml",
        db_url="sqlite:///{{scratch}}/shop.db",
        extra={
            "setup": {"argv": [sys.executable, "-c", "import sys; print('no migrations today'); sys.exit(3)"]}
        },
    )
    with pytest.raises(Exception, match="no migrations today") as caught:
        attack(spec, tmp_path / "out")
    assert getattr(caught.value, "exit_code", None) == 4


def test_database_url_is_a_fresh_postgres_database_dropped_after_the_run(
    tmp_path: Path, secrets_env: None, postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:

    monkeypatch.setenv("ACKLAB_TEST_PG_SERVER", postgres_server.url("postgres"))

    def databases() -> set[str]:
        with postgres_server.connect() as c:
            names = {r[0] for r in c.execute("SELECT datname FROM pg_database WHERE datname LIKE 'acklab_%'")}
            return names | {
                r[0] for r in c.execute("SELECT rolname FROM pg_roles WHERE rolname LIKE 'acklab_%'")
            }

    before = databases()
    spec = shop_spec(
        tmp_path / "pg.yaml",
        db_url="{{database_url}}",
        dedupe="none",
        extra={"database": {"url": "env:ACKLAB_TEST_PG_SERVER"}},
    )
    result = attack(spec, tmp_path / "out", experiments=("lost-ack",))
    assert result.verdict == "fail", result.as_json()
    assert databases() == before


def test_database_url_logs_in_as_a_role_of_its_own_that_can_reach_nothing_else(
    postgres_server: PostgresServer,
) -> None:
    import psycopg

    from acklab.harness.targets.isolation import Isolation

    other = postgres_server.create_database()  # another run's, on the same server
    isolation = Isolation.allocate(
        frozenset({"database_url"}), database_server=postgres_server.url("postgres")
    )
    try:
        url = isolation.values["database_url"].replace("postgresql+psycopg://", "postgresql://")
        name = url.rsplit("/", 1)[1]
        assert url.split("://", 1)[1].startswith(f"{name}:")  # not the server's role: its own
        with psycopg.connect(url, autocommit=True) as conn:
            assert conn.execute(
                "SELECT rolsuper, rolcreaterole, rolcreatedb FROM pg_roles WHERE rolname = current_user"
            ).fetchone() == (False, False, False)
            conn.execute("CREATE TABLE migrated (id int)")  # its own database: its migrations run
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("COPY (SELECT 1) TO PROGRAM 'true'")
        with pytest.raises(psycopg.OperationalError, match="permission denied for database"):
            psycopg.connect(url.rsplit("/", 1)[0] + "/" + other.rsplit("/", 1)[1]).close()
    finally:
        isolation.release()
