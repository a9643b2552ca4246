"""Proof that a leased resource is the lab's own: a random token, in the journal and beside the resource.

The journal is a file anyone with write access can forge. A lease row alone would let a
forger point `acklab janitor` at an unrelated process, a directory outside the lab or a
database on another host. So every lease carries a random token, and the lab writes the
same token *beside the resource* when it acquires it; the janitor acts only when both agree:

* ``process``: a pid-file ``<runtime dir>/<token>.pid`` holding the pid and its start time
  (the runtime dir is the lab's own, 0700, under the system temp directory);
* ``directory``: a marker file ``.acklab-lease`` holding the token, inside a directory that
  must itself be a direct ``acklab-*`` child of the system temp directory (the lab's temp root);
* ``database``: ``COMMENT ON DATABASE`` holding the token, on a server on the loopback only;
* ``worktree``: a marker file ``.acklab-lease`` in the worktree's temporary directory (an
  ``acklab-*`` child of the lab's temp root, the checkout in its ``checkout/``).

A new kind of lease adopts the mechanism by registering a `Witness` (`register`): how to
mark the resource when the lease is acquired, how to check it, how to unmark it.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import secrets
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

from acklab.harness.runtime import TEMP_PREFIX, runtime_dir, temp_root

MARKER = ".acklab-lease"
COMMENT_PREFIX = "acklab-lease:"
# libpq reads these from the environment: the janitor never lets a lease make it send them.
PG_CREDENTIAL_VARIABLES = ("PGPASSWORD", "PGPASSFILE", "PGSERVICE", "PGSERVICEFILE", "PGSSLKEY", "PGSSLCERT")


def new_token() -> str:
    return secrets.token_hex(16)


class Witness(Protocol):
    """How one kind of resource carries its lease's token."""

    def mark(self, token: str, detail: Mapping[str, Any]) -> None:
        """Write the token beside the resource (when the lease is acquired)."""

    def check(self, token: str, detail: Mapping[str, Any]) -> str | None:
        """None when the resource provably carries `token`; else why it is not the lab's to touch."""

    def unmark(self, token: str, detail: Mapping[str, Any]) -> None:
        """Remove the token (when the lease is released)."""


def _read_small(path: Path) -> str | None:
    """A small regular file's text, never through a link; None when absent or odd."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fh.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or info.st_size > 4096:
            return None
        return fh.read(4096).decode("utf-8", errors="replace")


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)


class PidFile:
    """``process``: ``<runtime dir>/<token>.pid`` with pid and start ticks."""

    def _path(self, token: str) -> Path:
        if not token.isalnum():
            raise ValueError("a lease token is hexadecimal")
        return runtime_dir() / f"{token}.pid"

    def mark(self, token: str, detail: Mapping[str, Any]) -> None:
        record = {"token": token, "pid": detail.get("pid"), "start_ticks": detail.get("start_ticks")}
        _write_private(self._path(token), json.dumps(record))

    def check(self, token: str, detail: Mapping[str, Any]) -> str | None:
        try:
            path = self._path(token)
        except (ValueError, OSError) as exc:
            return f"no pid-file can prove it ({exc})"
        text = _read_small(path)
        if text is None:
            return f"no pid-file {path.name} in {path.parent}: the lab never started this process"
        try:
            record = json.loads(text)
        except ValueError:
            return f"the pid-file {path} is not the lab's"
        wanted = (token, detail.get("pid"), detail.get("start_ticks"))
        if (
            not isinstance(record, dict)
            or (record.get("token"), record.get("pid"), record.get("start_ticks")) != wanted
        ):
            return f"the pid-file {path} names another process than the lease"
        return None

    def unmark(self, token: str, detail: Mapping[str, Any]) -> None:
        with contextlib.suppress(OSError, ValueError):
            self._path(token).unlink()


def inside_temp_root(path: Path) -> str | None:
    """None when `path` is a real ``acklab-*`` directory directly in the lab's temp root; else why not."""
    root = temp_root()
    try:
        info = path.lstat()
    except OSError as exc:
        return f"{path}: {exc.strerror}"
    if stat.S_ISLNK(info.st_mode):
        return f"{path} is a symbolic link"
    if path.parent.resolve() != root or not path.name.startswith(TEMP_PREFIX):
        return f"{path} is not an acklab-* directory in the lab's temp root {root}"
    if not stat.S_ISDIR(info.st_mode):
        return f"{path} is not a directory"
    return None


class MarkerFile:
    """``directory``: ``<dir>/.acklab-lease`` holding the token."""

    def mark(self, token: str, detail: Mapping[str, Any]) -> None:
        _write_private(Path(str(detail["path"])) / MARKER, token)

    def check(self, token: str, detail: Mapping[str, Any]) -> str | None:
        path = Path(str(detail.get("path", "")))
        if not path.is_absolute():
            return f"{str(path)!r} is not an absolute path"
        outside = inside_temp_root(path)
        if outside is not None:
            return outside
        if _read_small(path / MARKER) != token:
            return f"{path} holds no {MARKER} with the lease's token: the lab did not make it"
        return None

    def unmark(self, token: str, detail: Mapping[str, Any]) -> None:
        with contextlib.suppress(OSError, KeyError):
            (Path(str(detail["path"])) / MARKER).unlink()


def is_loopback_host(host: str | None) -> bool:
    """Whether `host` is on the loopback (a name other than localhost is not trusted)."""
    if not host or host == "localhost":
        return host == "localhost"
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@contextlib.contextmanager
def no_pg_credentials() -> Iterator[None]:
    """libpq picks up PGPASSWORD and friends from the environment; keep them out of a connection."""
    saved = {name: os.environ.pop(name) for name in PG_CREDENTIAL_VARIABLES if name in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


def connect_postgres(detail: Mapping[str, Any]) -> Any:
    """An autocommit connection to the `postgres` database of the server a database lease names.

    Only a loopback server, as the user the lease names, with no password and none of the
    environment's libpq credentials: a forged lease can make the janitor knock on no other door.
    """
    import psycopg
    from sqlalchemy.engine import make_url

    url = make_url(str(detail.get("url", "")))
    if not is_loopback_host(url.host):
        raise PermissionError(
            f"the database lease names host {url.host!r}, not the loopback; refusing to connect"
        )
    with no_pg_credentials():
        return psycopg.connect(
            host=url.host,
            port=url.port or 5432,
            user=url.username or "postgres",
            dbname="postgres",
            autocommit=True,
            connect_timeout=5,
            passfile=os.devnull,
            sslmode="disable",
        )


class DatabaseComment:
    """``database``: ``COMMENT ON DATABASE`` holding ``acklab-lease:<token>``."""

    def mark(self, token: str, detail: Mapping[str, Any]) -> None:
        from psycopg import sql

        with connect_postgres(detail) as conn:
            conn.execute(
                sql.SQL("COMMENT ON DATABASE {} IS {}").format(
                    sql.Identifier(str(detail["name"])), sql.Literal(COMMENT_PREFIX + token)
                )
            )

    def check(self, token: str, detail: Mapping[str, Any]) -> str | None:
        import psycopg

        try:
            with connect_postgres(detail) as conn:
                row = conn.execute(
                    "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = %s",
                    (str(detail.get("name", "")),),
                ).fetchone()
        except (PermissionError, psycopg.Error) as exc:
            return str(exc).strip()
        if row is None:
            return None  # nothing left to prove (the janitor finds it already dropped)
        if row[0] != COMMENT_PREFIX + token:
            return (
                f"database {detail.get('name')!r} does not carry the lease's token: the lab did not make it"
            )
        return None

    def unmark(self, token: str, detail: Mapping[str, Any]) -> None:
        return None  # the comment goes with the database


class WorktreeMarker:
    """``worktree``: ``<tmp>/.acklab-lease`` holding the token; the worktree is ``<tmp>/checkout``."""

    def mark(self, token: str, detail: Mapping[str, Any]) -> None:
        _write_private(Path(str(detail["tmp"])) / MARKER, token)

    def check(self, token: str, detail: Mapping[str, Any]) -> str | None:
        tmp, path = Path(str(detail.get("tmp", ""))), Path(str(detail.get("path", "")))
        if path != tmp / "checkout":
            return f"{path} is not the checkout the lab makes in {tmp}"
        return MarkerFile().check(token, {"path": str(tmp)})

    def unmark(self, token: str, detail: Mapping[str, Any]) -> None:
        with contextlib.suppress(OSError, KeyError):
            (Path(str(detail["tmp"])) / MARKER).unlink()


WITNESSES: dict[str, Witness] = {
    "process": PidFile(),
    "directory": MarkerFile(),
    "database": DatabaseComment(),
    "worktree": WorktreeMarker(),
}


def register(resource: str, witness: Witness) -> None:
    """Make a new kind of lease provable (e.g. a git worktree: a marker file in it)."""
    WITNESSES[resource] = witness
