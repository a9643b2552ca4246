"""Setup templates: a spec's ``setup:`` runs once per process, and every later serve starts from a copy.

A real shop's migrations take minutes per fresh database (pretix: 2 to 4), and a spec is served
more than once in one process: once per experiment under pytest, the head and each patched copy
in a repair flow, both sides of ``--baseline``. The first serve of a setup runs it and, before its
service starts, keeps what it made as a template; each later serve of an identical setup copies it
into its own fresh places instead of running the setup:

* ``{{scratch}}``: the directory as the setup left it, copied (``acklab-template-*``, leased) and
  copied again into each later serve's fresh scratch — unless a file in it holds the scratch's
  absolute path (a copy would point at the first serve's directory): then every serve runs the
  setup, and the run says why;
* ``{{database_url}}``: ``CREATE DATABASE <template> TEMPLATE <the first serve's>``, its objects
  handed to a role of the template's own that cannot log in (``REASSIGN OWNED``), connections to it
  refused; each later serve's database is ``CREATE DATABASE ... TEMPLATE <template>``, its objects
  handed to the serve's own role, which owns its tables as if it had migrated them.

Only an identical setup reuses a template (`setup_key`): the spec as written, the setup's and the
command's argv and environment (``env:`` read; run placeholders unfilled), the database server,
whether it runs confined, and the content of the tree it runs from (`harness.targets.trees`): a
patched checkout whose migrations differ by a byte makes a template of its own. A setup that
changed files of that tree, one whose environment names a store the lab cannot copy
(``{{redis_url}}``), or one that says ``template: false`` runs on every serve.

Templates live as long as their scope (`keeping`): a run, or the pytest session or repair flow a
run belongs to (the run uses the outer scope). Each is leased in the journal of the run that made
it (`acklab janitor` removes it after a crash) and dropped when its scope ends. The schema pin is
still taken on every serve, from its own copy.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import tempfile
import threading
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from acklab.evidence.redaction import redact
from acklab.harness.procs.lease_witness import MARKER
from acklab.harness.procs.leases import Lease, LeaseBook, current_book
from acklab.harness.procs.service_process import Command
from acklab.harness.specs import placeholders
from acklab.harness.targets import pg_templates
from acklab.harness.targets.trees import digest_of, holds_path

# Where a setup's results live that a template can hold.
KEPT = frozenset({"scratch", "database_url"})
# A store the setup may reach whose data the lab does not copy: a template would miss what it wrote.
NOT_COPIED = frozenset({"redis_url"})


@dataclass
class Template:
    """What one setup made, kept: a copy of its scratch and/or a template database."""

    made_at: datetime
    took_s: float
    scratch: Path | None = None  # the copy of the scratch (inside the leased directory `_dir`)
    database: tuple[str, str] | None = None  # (server URL, template database name = its role's name)
    _dir: Path | None = field(default=None, repr=False)
    _book: LeaseBook | None = field(default=None, repr=False)
    _leases: list[Lease] = field(default_factory=list, repr=False)

    def note(self) -> str:
        return (
            f"setup: from the template made at {self.made_at:%H:%M:%S} by an identical setup "
            f"(it took {self.took_s:.1f} s); not run again"
        )

    def drop(self) -> None:
        """Drop the template database and its role, remove the copy, release the leases (idempotent)."""
        if self.database is not None:
            server, name = self.database
            self.database = None
            pg_templates.drop(server, name)
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
        if self._book is not None:
            for lease in self._leases:
                self._book.release(lease)
            self._leases.clear()
            self._book.close()
            self._book = None


class Templates:
    """The templates of one scope, by setup key; a key refused once (with why) stays refused."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: dict[str, Template] = {}
        self._refused: dict[str, str] = {}

    def get(self, key: str) -> Template | None:
        with self._lock:
            return self._kept.get(key)

    def refused(self, key: str) -> str | None:
        with self._lock:
            return self._refused.get(key)

    def refuse(self, key: str, why: str) -> None:
        with self._lock:
            self._refused.setdefault(key, why)

    def put(self, key: str, template: Template) -> bool:
        """Keep `template` under `key`; False (and nothing kept) when one is kept already."""
        with self._lock:
            if key in self._kept:
                return False
            self._kept[key] = template
            return True

    def drop(self) -> None:
        with self._lock:
            kept, self._kept = list(self._kept.values()), {}
        for template in kept:
            template.drop()


_SCOPE: ContextVar[Templates | None] = ContextVar("acklab_templates", default=None)


def current() -> Templates | None:
    """The templates of the scope in progress; None outside any (each serve runs its setup)."""
    return _SCOPE.get()


@contextlib.contextmanager
def keeping() -> Iterator[Templates]:
    """A scope for templates: the one in progress (a run inside a pytest session or a flow), else a
    new one whose templates are dropped when it ends."""
    outer = _SCOPE.get()
    if outer is not None:
        yield outer
        return
    scope = Templates()
    _SCOPE.set(scope)
    try:
        yield scope
    finally:
        # set, not reset: a pytest session opens its scope in one hook and closes it in another.
        _SCOPE.set(None)
        scope.drop()


@dataclass
class TemplatedSetup:
    """One serve's setup as templates see it (`harness.procs.service_process.SetupReuse`).

    `key` is None when no template may stand in for it (`why` says so); `scratch` and `database`
    are this serve's own places (the database's role has its name)."""

    templates: Templates
    key: str | None
    why: str | None = None
    scratch: Path | None = None
    database: tuple[str, str] | None = None  # (server URL, name)
    tree: Path | None = None
    tree_digest: str | None = None

    def reuse(self) -> str | None:
        if self.key is None:
            return None
        template = self.templates.get(self.key)
        if template is None:
            return None
        try:
            if template.scratch is not None and self.scratch is not None:
                copy_into(template.scratch, self.scratch)
            if template.database is not None and self.database is not None:
                pg_templates.copy(self.database[0], template.database[1], self.database[1])
        except (OSError, pg_templates.TemplateFailed) as exc:
            if template.scratch is not None and self.scratch is not None:
                _empty(self.scratch, like=template.scratch)  # the setup runs on what it would have had
            self.why = f"the template could not be copied ({redact(str(exc))}); setup runs"
            self.key = None  # and keep() keeps nothing of this serve
            return None
        return template.note()

    def keep(self, took_s: float) -> str | None:
        """Keep what the setup made (before the service starts and writes); what to say, or None."""
        if self.key is None:
            return f"setup: took {took_s:.1f} s; {self.why}" if self.why else None
        refused = self.templates.refused(self.key)
        if refused is not None:
            return f"setup: took {took_s:.1f} s; not kept as a template: {refused}; every serve runs it"
        if self.templates.get(self.key) is not None:
            return f"setup: took {took_s:.1f} s"  # an identical serve at the same time kept its own first
        try:
            why = self._unkeepable()
        except OSError as exc:
            why = f"what it made could not be read ({redact(str(exc))})"
        if why is not None:
            self.templates.refuse(self.key, why)
            return f"setup: took {took_s:.1f} s; not kept as a template: {why}; every serve runs it"
        try:
            template = self._make(took_s)
        except (OSError, pg_templates.TemplateFailed) as exc:
            why = f"it could not be copied ({redact(str(exc))})"
            self.templates.refuse(self.key, why)
            return f"setup: took {took_s:.1f} s; not kept as a template: {why}; every serve runs it"
        if not self.templates.put(self.key, template):
            template.drop()
            return f"setup: took {took_s:.1f} s"
        return f"setup: took {took_s:.1f} s; kept as a template for later serves of this spec"

    def _unkeepable(self) -> str | None:
        if self.tree is not None and self.tree_digest is not None:
            after, why = digest_of(self.tree)
            if after != self.tree_digest:
                return why or f"it changed files of {self.tree}, which a template cannot hold"
        if self.scratch is not None:
            found = holds_path(self.scratch, self.scratch, skip=frozenset({MARKER}))
            if found is not None:
                return (
                    f"{{{{scratch}}}}/{found} holds the scratch directory's absolute path, which a copy "
                    "would still point at"
                )
        return None

    def _make(self, took_s: float) -> Template:
        book = current_book().detached()
        template = Template(made_at=datetime.now().astimezone(), took_s=took_s, _book=book)
        try:
            if self.scratch is not None:
                template._dir = Path(tempfile.mkdtemp(prefix="acklab-template-"))
                template._leases.append(
                    book.acquire("directory", str(template._dir), path=str(template._dir))
                )
                template.scratch = template._dir / "scratch"
                shutil.copytree(
                    self.scratch, template.scratch, symlinks=True, ignore=_top_marker(self.scratch)
                )
            if self.database is not None:
                server, source = self.database
                name = f"acklab_{secrets.token_hex(6)}"
                template.database = (server, name)
                pg_templates.make(server, source, name)
                if (lease := pg_templates.lease(book, server, name)) is not None:
                    template._leases.append(lease)
        except BaseException:
            template.drop()
            raise
        return template


def _top_marker(top: Path) -> Any:
    """copytree's ignore: the lease marker of the scratch directory itself (the copy has its own)."""

    def ignore(directory: str, names: list[str]) -> set[str]:
        return {MARKER} & set(names) if Path(directory) == top else set()

    return ignore


def _empty(scratch: Path, *, like: Path) -> None:
    """Remove from `scratch` what a copy of `like` put there (its lease marker stays)."""
    for entry in like.iterdir():
        target = scratch / entry.name
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target, ignore_errors=True)
        else:
            target.unlink(missing_ok=True)


def copy_into(source: Path, scratch: Path) -> None:
    """Copy the template's scratch into this serve's fresh `scratch`, owned as `scratch` is."""
    shutil.copytree(source, scratch, symlinks=True, dirs_exist_ok=True)
    owner = scratch.stat()
    if os.geteuid() == 0 and owner.st_uid != 0:
        # A confined place's scratch belongs to the sandbox's user: the copy must be its too.
        for directory, dirs, files in os.walk(scratch):
            for name in [*dirs, *files]:
                os.chown(Path(directory) / name, owner.st_uid, owner.st_gid, follow_symlinks=False)


def plan(
    *,
    doc: Mapping[str, Any],
    written: Command | None,
    tree: Path | None,
    root: Path | None,
    scratch: Path | None,
    database: tuple[str, str] | None,
    confined: bool,
) -> TemplatedSetup | None:
    """How this serve's setup meets templates; None: it does not (no scope, no setup, ``template:
    false``, or nothing of the setup's that a template could hold: each serve runs it, as ever).

    `doc`: the spec as written; `written`: its command as loaded (``env:`` read, run placeholders
    unfilled) and `root` the directory its ``cwd`` is relative to; `tree`: the tree the setup runs
    from, whose content is part of the key; `scratch`/`database`: this serve's own places."""
    templates = current()
    if templates is None or written is None or written.setup is None or not written.setup.template:
        return None
    reached = placeholders.used(
        {k: doc[k] for k in ("setup", "command") if k in doc}, tuple(KEPT | NOT_COPIED)
    )
    if not reached & KEPT:
        return None
    scratch = scratch if "scratch" in reached else None
    database = database if "database_url" in reached else None
    if reached & NOT_COPIED:
        names = ", ".join("{{" + n + "}}" for n in sorted(reached & NOT_COPIED))
        why = f"not kept as a template: its environment names {names}, whose data a template does not copy"
        return TemplatedSetup(templates, None, why=f"{why}; every serve runs it")
    digest, unread = digest_of(tree) if tree is not None else (None, "it has no directory to run from")
    if digest is None:
        return TemplatedSetup(templates, None, why=f"not kept as a template: {unread}; every serve runs it")
    setup = written.setup
    cwd = setup.cwd or written.cwd
    parts = {
        "spec": doc,
        "setup": [setup.argv, dict(setup.env), setup.timeout_s],
        "command": [written.argv, dict(written.env)],
        "cwd": _relative(cwd or tree, root) if root is not None else None,
        "server": database[0] if database is not None else None,
        "places": [scratch is not None, database is not None, confined],
        "tree": digest,
    }
    return TemplatedSetup(
        templates, setup_key(parts), scratch=scratch, database=database, tree=tree, tree_digest=digest
    )


def _relative(cwd: Path | None, tree: Path) -> str | None:
    if cwd is None:
        return None
    try:
        return cwd.resolve().relative_to(tree.resolve()).as_posix()
    except ValueError:
        return str(cwd)


def setup_key(parts: Mapping[str, Any]) -> str:
    """A digest of everything that decides what a setup makes (`parts`: JSON-able values)."""
    import hashlib
    import json

    text = json.dumps(parts, sort_keys=True, default=str, ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()
