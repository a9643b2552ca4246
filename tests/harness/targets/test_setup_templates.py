"""A spec's ``setup:`` runs once per scope; later serves start from a template of what it made.

A user's Flask shop (`tests.consumers.user_repos`), its tables made by its ``setup:``, served
more than once in one scope as a pytest session or a repair flow serves it: on PostgreSQL each
later copy is a database of its own made from the template, its tables owned by its own role and
its rows its own; from a confined checkout on SQLite the copy is a file copy, pinned to the same
schema; a checkout whose migration differs runs its own setup; a setup that writes its scratch's
absolute path, or says ``template: false``, runs on every serve.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from acklab.evidence.journal import Journal, journal_path
from acklab.flows.sandbox import choose
from acklab.harness.procs.janitor import open_leases
from acklab.harness.procs.lease_witness import WITNESSES
from acklab.harness.procs.leases import leasing
from acklab.harness.procs.pgtemp import PostgresServer
from acklab.harness.procs.service_process import ServiceProcess
from acklab.harness.targets.served_spec import ServedSpecTarget, served_spec_target
from acklab.harness.targets.spec import SpecTarget, load_target
from acklab.harness.targets.templates import keeping
from tests.consumers.user_repos import SECRET, make_flask_shop

# Every test serves the shop on gunicorn, most from confined checkouts: seconds each.
pytestmark = pytest.mark.slow

FROM_TEMPLATE = "setup: from the template made at "


@pytest.fixture
def shop_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The shop's secret, and this interpreter's `python` first on PATH (the spec says `python`)."""
    monkeypatch.setenv("SHOP_WEBHOOK_SECRET", SECRET)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:/usr/bin:/bin")


def served(target: SpecTarget) -> SpecTarget:
    target.provision()
    target.start_service()
    return target


def close(*targets: SpecTarget) -> None:
    for target in targets:
        asyncio.run(target.aclose())


def note(target: SpecTarget) -> str:
    assert isinstance(target.service, ServiceProcess)
    assert target.service.setup_note is not None
    return target.service.setup_note


def change_migration(repo: Path) -> None:
    """The patch a migration makes: one more column on the fulfilments table."""
    models = repo / "shop/models.py"
    models.write_text(
        models.read_text().replace(
            "    amount_cents: Mapped[int] = mapped_column(Integer)\n",
            "    amount_cents: Mapped[int] = mapped_column(Integer)\n"
            "    refunded_cents: Mapped[int] = mapped_column(Integer, default=0)\n",
        )
    )


def acklab_objects(server: PostgresServer) -> set[str]:
    with server.connect() as conn:
        found = {r[0] for r in conn.execute("SELECT datname FROM pg_database WHERE datname LIKE 'acklab_%'")}
        return found | {
            r[0] for r in conn.execute("SELECT rolname FROM pg_roles WHERE rolname LIKE 'acklab_%'")
        }


def as_role(target: SpecTarget) -> psycopg.Connection:
    """A connection to the serve's own database, as the role its service logs in as."""
    assert target.isolation is not None
    url = target.isolation.values["database_url"].replace("postgresql+psycopg://", "postgresql://")
    return psycopg.connect(url, autocommit=True)


@pytest.fixture
def scope() -> Iterator[None]:
    with keeping():
        yield


def test_a_postgres_copy_is_its_own_database_owned_by_its_own_role_and_a_changed_checkout_migrates_again(
    tmp_path: Path, shop_env: None, postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHOP_TEST_DB_URL", postgres_server.url("postgres"))
    repo = make_flask_shop(tmp_path / "shop", postgres=True)
    before = acklab_objects(postgres_server)
    with keeping():
        first = served(load_target(repo / "shop.target.yaml", allow_remote=False, workdir=repo))
        second = served(load_target(repo / "shop.target.yaml", allow_remote=False, workdir=repo))
        try:
            assert "kept as a template" in note(first), note(first)
            assert note(second).startswith(FROM_TEMPLATE), note(second)
            with as_role(first) as a, as_role(second) as b:
                for conn in (a, b):
                    owners = {
                        r[0]
                        for r in conn.execute("SELECT tableowner FROM pg_tables WHERE schemaname = 'public'")
                    }
                    assert owners == {conn.info.user}  # its own role owns the tables, as if it had migrated
                a.execute("INSERT INTO orders VALUES ('ord_1', 'paid')")
                a.execute(
                    "INSERT INTO fulfillments (event_id, order_id, amount_cents) VALUES ('evt_1', 'ord_1', 900)"
                )
                b.execute("CREATE TABLE scratch_of_b (id int)")  # its role may still migrate further
                assert a.execute("SELECT count(*) FROM fulfillments").fetchone() == (1,)
                assert b.execute("SELECT count(*) FROM fulfillments").fetchone() == (0,)
                assert a.execute("SELECT to_regclass('scratch_of_b')").fetchone() == (None,)

            made = acklab_objects(postgres_server) - before
            serves = {
                first.isolation.values["database_url"].rsplit("/", 1)[1]
                for first in (first, second)
                if first.isolation
            }
            [template] = {n for n in made if n not in serves}
            with postgres_server.connect() as conn:
                assert conn.execute(
                    "SELECT datallowconn FROM pg_database WHERE datname = %s", (template,)
                ).fetchone() == (False,)  # no served role can hold it open, or write to it
                assert conn.execute(
                    "SELECT rolcanlogin FROM pg_roles WHERE rolname = %s", (template,)
                ).fetchone() == (False,)

            change_migration(repo)  # a patched checkout: its migration differs
            patched = served(load_target(repo / "shop.target.yaml", allow_remote=False, workdir=repo))
            try:
                assert "kept as a template" in note(patched), note(patched)
                with as_role(patched) as c:
                    columns = {
                        r[0]
                        for r in c.execute(
                            "SELECT column_name FROM information_schema.columns WHERE table_name = 'fulfillments'"
                        )
                    }
                assert "refunded_cents" in columns
            finally:
                close(patched)
        finally:
            close(first, second)
    assert acklab_objects(postgres_server) == before  # every copy, template and role dropped


def template_leases(out: Path) -> list[dict[str, Any]]:
    with Journal(journal_path(out)) as journal:
        return [e.payload for e in open_leases(journal) if "acklab-template-" in e.name]


def test_a_confined_checkout_copies_its_scratch_pins_the_same_schema_and_a_patched_one_runs_its_own(
    tmp_path: Path, shop_env: None
) -> None:
    repo = make_flask_shop(tmp_path / "shop")
    patched_repo = make_flask_shop(tmp_path / "patched")
    change_migration(patched_repo)
    confinement = choose()
    targets: list[ServedSpecTarget] = []
    out = tmp_path / "out"
    with leasing(out, "run-templates"), keeping():
        try:
            serve_three(targets, (repo, repo, patched_repo), confinement)
            leases = template_leases(out)
            assert len(leases) == 2  # the head's and the patched checkout's, open while the scope lasts
            for lease in leases:  # each provably the lab's: the janitor removes it after a crash
                assert WITNESSES["directory"].check(lease["token"], lease["detail"]) is None
                assert Path(lease["detail"]["path"]).is_dir()
        finally:
            close(*targets)
    assert template_leases(out) == []
    assert not any(Path(lease["detail"]["path"]).exists() for lease in leases)


def serve_three(targets: list[ServedSpecTarget], checkouts: tuple[Path, ...], confinement: Any) -> None:
    """The head served twice and a patched checkout once, as a flow serves them (into `targets`)."""
    for checkout in checkouts:
        target = served_spec_target("shop.target.yaml", checkout, confinement=confinement)
        targets.append(target)
        served(target)
    head, again, patched = targets
    assert "kept as a template" in note(head)
    assert note(again).startswith(FROM_TEMPLATE)
    assert "kept as a template" in note(patched)  # its migration differs: a template of its own
    assert head._pin is not None
    assert again._pin is not None
    assert patched._pin is not None
    assert again._pin.expected == head._pin.expected  # pinned from its own copy, to the same schema
    assert patched._pin.expected != head._pin.expected
    copy = again.place.scratch / "data" / "shop.db"
    assert copy.stat().st_uid == again.place.scratch.stat().st_uid  # the sandbox user's, as if it made it


@pytest.mark.parametrize(
    ("setup", "why"),
    [
        (
            # A setup that writes where its scratch is: a copy would point at the first serve's.
            {
                "argv": ["sh", "-c", 'python -m shop.migrate && echo "$SHOP_DATABASE_URL" > "$SHOP_STATE"'],
                "env": {"SHOP_STATE": "{{scratch}}/where"},
            },
            "{{scratch}}/where holds the scratch directory's absolute path",
        ),
        (
            # A setup that generates files into its own tree: a copy of scratch would miss them.
            {"argv": ["sh", "-c", "python -m shop.migrate && date +%s%N > shop/generated.txt"]},
            "it changed files of",
        ),
        ({"argv": ["python", "-m", "shop.migrate"], "template": False}, None),
    ],
    ids=["writes-its-scratch-path", "writes-its-tree", "template-false"],
)
def test_a_setup_a_template_cannot_stand_in_for_runs_on_every_serve(
    tmp_path: Path, shop_env: None, scope: None, setup: dict[str, object], why: str | None
) -> None:
    import yaml

    repo = make_flask_shop(tmp_path / "shop")
    spec = repo / "shop.target.yaml"
    doc = yaml.safe_load(spec.read_text())
    doc["setup"] = setup
    spec.write_text(yaml.safe_dump(doc, sort_keys=False))
    targets = []
    try:
        for _ in range(2):
            targets.append(served(load_target(spec, allow_remote=False, workdir=repo)))
        notes = [t.service.setup_note if isinstance(t.service, ServiceProcess) else None for t in targets]
        assert not any(n and n.startswith(FROM_TEMPLATE) for n in notes), notes
        if why is not None:
            assert all(n is not None and why in n and "every serve runs it" in n for n in notes), notes
        else:
            assert notes == [None, None]  # as it always ran: once per serve, nothing to say
        assert all(
            t.isolation and (Path(t.isolation.values["scratch"]) / "shop.db").is_file() for t in targets
        )
    finally:
        close(*targets)
