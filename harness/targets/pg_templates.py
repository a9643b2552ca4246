"""A setup's PostgreSQL database kept as a template, and each later serve's database copied from it.

The serve that ran the setup owns its database and every object the setup made in it (its role,
`harness.targets.isolation`). The template is ``CREATE DATABASE <t> TEMPLATE <that database>``
(it must have no connection: the setup has exited and the service has not started), owned by the
lab's role; its objects are handed to a role named as the template that cannot log in, so no
served role — whose password its service knows — owns anything in it, and connections to it are
refused (``ALLOW_CONNECTIONS false``: a service cannot hold it open and block the next copy).
A later serve's fresh database is replaced by ``CREATE DATABASE <its name> TEMPLATE <t> OWNER
<its role>`` and, inside it, ``REASSIGN OWNED BY <t> TO <its role>``: its role owns its tables,
sequences and views as if it had migrated them, and nothing else.
"""

from __future__ import annotations

import contextlib
from typing import Any

from sqlalchemy.engine import make_url

from acklab.evidence.redaction import redact
from acklab.harness.errors import HarnessError
from acklab.harness.procs.leases import Lease, LeaseBook
from acklab.harness.targets.isolation import admin_connection, drop_database


class TemplateFailed(HarnessError):
    """A template database could not be made or copied (the serve runs its setup instead)."""


def lease(book: LeaseBook, server: str, name: str) -> Lease | None:
    """The template's lease, as a serve's own database has one; None when the server cannot be
    marked without a password (then the janitor could not prove it is the lab's, nor drop it)."""
    import psycopg

    with contextlib.suppress(psycopg.Error, PermissionError, OSError):
        return book.acquire("database", name, name=name, url=shown(server, name))
    return None


def shown(server: str, name: str) -> str:
    """The server's URL naming database `name`, without a password (what a lease may hold)."""
    return make_url(server).set(database=name, password=None).render_as_string(hide_password=False)


def _run(server: str, statements: list[Any], *, dbname: str | None = None) -> None:
    import psycopg

    try:
        with admin_connection(server, dbname=dbname) as conn:
            for statement in statements:
                conn.execute(statement)
    except psycopg.Error as exc:
        raise TemplateFailed(f"on {redact(server)!r}: {redact(str(exc).strip())}") from exc


def make(server: str, source: str, name: str) -> None:
    """The template `name` of the serve's database `source` (whose role is named `source`), its
    objects owned by a role `name` that cannot log in; dropped again when any step fails."""
    from psycopg import sql

    template, made_from = sql.Identifier(name), sql.Identifier(source)
    try:
        _run(
            server,
            [
                sql.SQL(
                    "CREATE ROLE {} NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS"
                ).format(template),
                sql.SQL("GRANT {} TO CURRENT_USER").format(template),  # to reassign to it
                sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(template, made_from),
            ],
        )
        _run(server, [sql.SQL("REASSIGN OWNED BY {} TO {}").format(made_from, template)], dbname=name)
    except TemplateFailed:
        drop(server, name)
        raise
    finally:
        # REASSIGN OWNED hands over shared objects too: the serve's own database went with them.
        with contextlib.suppress(TemplateFailed):
            _run(server, [sql.SQL("ALTER DATABASE {} OWNER TO {}").format(made_from, made_from)])
    try:
        _run(
            server,
            [
                sql.SQL("REVOKE CONNECT, TEMPORARY ON DATABASE {} FROM PUBLIC").format(template),
                sql.SQL("ALTER DATABASE {} WITH ALLOW_CONNECTIONS false").format(template),
            ],
        )
    except TemplateFailed:
        drop(server, name)
        raise


def copy(server: str, template: str, name: str) -> None:
    """Replace the serve's fresh, empty database `name` (owned by its role `name`) with a copy of
    `template`, its objects owned by that role; the database keeps its comment (the lease's token).
    When the copy fails, the empty database is made again (the serve's setup runs in it)."""
    import psycopg
    from psycopg import sql

    database = sql.Identifier(name)
    try:
        with admin_connection(server) as conn:
            row = conn.execute(
                "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = %s", (name,)
            ).fetchone()
    except psycopg.Error as exc:
        raise TemplateFailed(f"on {redact(server)!r}: {redact(str(exc).strip())}") from exc
    comment = (
        [sql.SQL("COMMENT ON DATABASE {} IS {}").format(database, sql.Literal(row[0]))]
        if row is not None and row[0]
        else []
    )
    revoke = sql.SQL("REVOKE CONNECT, TEMPORARY ON DATABASE {} FROM PUBLIC").format(database)
    _run(server, [sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(database)])
    try:
        _run(
            server,
            [
                sql.SQL("CREATE DATABASE {} TEMPLATE {} OWNER {}").format(
                    database, sql.Identifier(template), database
                ),
                revoke,
                *comment,
            ],
        )
        _run(
            server,
            [sql.SQL("REASSIGN OWNED BY {} TO {}").format(sql.Identifier(template), database)],
            dbname=name,
        )
    except TemplateFailed:
        with contextlib.suppress(TemplateFailed):
            _run(server, [sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(database)])
            _run(
                server, [sql.SQL("CREATE DATABASE {} OWNER {}").format(database, database), revoke, *comment]
            )
        raise


def drop(server: str, name: str) -> None:
    """Drop the template database `name` and its role."""
    drop_database(server, name)
