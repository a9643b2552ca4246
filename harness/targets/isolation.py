"""What one served service gets of its own: a port, a scratch directory, a database.

A target spec's run placeholders (`harness.specs.placeholders`) are filled from an
`Isolation`, allocated when the service is about to be served and released when the run
ends. Every resource is leased in the run's journal, so a lab killed mid-run leaves nothing
that `acklab janitor` cannot remove:

* ``{{port}}``: a free loopback port (bound and released: the service binds it next);
* ``{{scratch}}``: a fresh directory (mode 0700), removed with everything in it;
* ``{{database_url}}``: a fresh database ``acklab_<hex>`` on the PostgreSQL server that
  ``database.url`` names, owned by a fresh role of the same name (a password of its own, no
  superuser, no CREATEDB or CREATEROLE) that the URL logs in as; no other role may connect to
  it. Both are dropped afterwards (connections ended first). The janitor drops the database
  after a crash when the server trusts loopback connections without a password; else it names
  it, for you to drop (with its role).

Two isolations never share a value, so the repair flow's head and patched checkouts, or two
CI shards on one machine, never meet in a port, a directory or a database.
"""

from __future__ import annotations

import contextlib
import secrets
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acklab.evidence.redaction import redact, remember
from acklab.harness.errors import TargetUnreachable
from acklab.harness.ports import free_port
from acklab.harness.procs.leases import Lease, LeaseBook, current_book
from acklab.harness.specs.credentials import url_credentials_of
from acklab.harness.specs.target import SINK_SECTIONS


@dataclass
class Isolation:
    """The values of one served service's run placeholders, and the leases behind them."""

    values: dict[str, str] = field(default_factory=dict)
    _leases: list[Lease] = field(default_factory=list, repr=False)
    _scratch: Path | None = field(default=None, repr=False)
    _database: tuple[str, str] | None = field(default=None, repr=False)  # (server URL, name)
    _book: LeaseBook | None = field(default=None, repr=False)

    @classmethod
    def allocate(
        cls, names: frozenset[str], *, database_server: str | None = None, label: str = "service"
    ) -> Isolation:
        """Pick every value `names` needs (others are not allocated); release() undoes it all."""
        iso = cls(_book=current_book())
        try:
            if "port" in names:
                iso.values["port"] = str(iso._fresh_port())
            for model in SINK_SECTIONS.values():  # where each sink listens: a port, written its way
                if model.PLACEHOLDER in names:
                    iso.values[model.PLACEHOLDER] = model.ADDRESS.format(port=iso._fresh_port())
            if "scratch" in names:
                iso.values["scratch"] = str(iso._make_scratch(label))
            if "database_url" in names:
                if database_server is None:  # placeholders.check refuses such a spec first
                    raise TargetUnreachable("{{database_url}} needs database.url, the server to create it on")
                iso.values["database_url"] = iso._make_database(database_server)
        except BaseException:
            iso.release()
            raise
        return iso

    def _fresh_port(self) -> int:
        ports = ("port", *(model.PLACEHOLDER for model in SINK_SECTIONS.values()))
        taken = {int(v.rpartition(":")[2]) for k, v in self.values.items() if k in ports}
        while (port := free_port()) in taken:
            continue
        return port

    def _make_scratch(self, label: str) -> Path:
        path = Path(tempfile.mkdtemp(prefix=f"acklab-scratch-{label}-"))
        self._scratch = path
        self._leases.append(self._leased().acquire("directory", str(path), path=str(path)))
        return path

    def _make_database(self, server: str) -> str:
        """A fresh database, owned by a fresh role of its own (a password drawn here, no superuser,
        no CREATEDB or CREATEROLE, so no ``COPY ... PROGRAM`` nor untrusted language), that no
        other role may connect to: the service gets that role's URL, never the server's."""
        import psycopg
        from psycopg import sql
        from sqlalchemy.engine import make_url

        remember(*url_credentials_of(server))
        url = make_url(server)
        name = f"acklab_{secrets.token_hex(6)}"
        password = secrets.token_urlsafe(24)
        remember(password)
        role, database = sql.Identifier(name), sql.Identifier(name)
        statements = [
            sql.SQL(
                "CREATE ROLE {} LOGIN PASSWORD {} NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION "
                "NOBYPASSRLS"
            ).format(role, sql.Literal(password)),
            sql.SQL("GRANT {} TO CURRENT_USER").format(role),  # to make it the database's owner
            sql.SQL("CREATE DATABASE {} OWNER {}").format(database, role),
            sql.SQL("REVOKE CONNECT, TEMPORARY ON DATABASE {} FROM PUBLIC").format(database),
        ]
        self._database = (server, name)  # whatever was made of it, release() drops it
        try:
            with admin_connection(server) as conn:
                for statement in statements:
                    conn.execute(statement)
        except psycopg.Error as exc:
            raise TargetUnreachable(
                f"database.url: could not create a database and its role for the service on {redact(server)!r}: "
                f"{redact(str(exc).strip())}; the role needs CREATEDB and CREATEROLE on that server"
            ) from exc
        database_url = url.set(database=name, username=name, password=password).render_as_string(
            hide_password=False
        )
        remember(*url_credentials_of(database_url))
        # The lease names the server without its password: the journal is never a credential store.
        shown = url.set(database=name, password=None).render_as_string(hide_password=False)
        with contextlib.suppress(psycopg.Error, PermissionError, OSError):
            # Marked with the token in its comment: without trust authentication the janitor
            # could not prove it (and cannot drop it); the run drops it itself in release().
            self._leases.append(self._leased().acquire("database", name, name=name, url=shown))
        return database_url

    @property
    def database(self) -> tuple[str, str] | None:
        """(server URL, name) of ``{{database_url}}``'s database, whose role has the same name; None: none."""
        return self._database

    def _leased(self) -> LeaseBook:
        if self._book is None:
            self._book = current_book()
        return self._book

    def fill(self, text: str) -> str:
        from acklab.harness.specs.placeholders import fill

        filled: str = fill(text, self.values, top=False)
        return filled

    def release(self) -> None:
        """Drop the database, remove the scratch directory, release every lease (idempotent)."""
        if self._database is not None:
            server, name = self._database
            self._database = None
            drop_database(server, name)
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None
        book = self._book or current_book()
        for lease in self._leases:
            book.release(lease)
        self._leases.clear()


def admin_connection(server: str, *, dbname: str | None = None) -> Any:
    """An autocommit connection to the server `server` names, as its role (to `dbname`, or the
    database the URL names, or ``postgres``)."""
    import psycopg
    from sqlalchemy.engine import make_url

    url = make_url(server)
    return psycopg.connect(
        host=url.host or None,
        port=url.port or 5432,
        user=url.username or None,
        password=url.password or None,
        dbname=dbname or url.database or "postgres",
        autocommit=True,
        connect_timeout=10,
    )


def drop_database(server: str, name: str) -> None:
    """Drop the database `name` (its connections ended first) and its role of the same name."""
    import psycopg
    from psycopg import sql

    with contextlib.suppress(psycopg.Error), admin_connection(server) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


def placeholder_values(isolation: Isolation | None) -> Mapping[str, str]:
    return {} if isolation is None else dict(isolation.values)
