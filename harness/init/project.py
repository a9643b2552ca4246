"""What `acklab init --app` learns of the project before it serves anything: how to serve the app on
a port of the lab's, with a database of its own and its mail and API calls pointed at the sinks.

init never writes into the developer's data, so it must know which environment variable moves
the app's database before it starts the app:

* **Django** (``manage.py`` beside the app, or ``DJANGO_SETTINGS_MODULE``): the settings module
  is imported in the project's interpreter with each variable its source names set to a
  sentinel (`probe`); the one that moves ``DATABASES['default']['NAME']`` is the database's
  (a path or a ``DATABASE_URL``), those that move ``EMAIL_HOST``/``EMAIL_PORT`` the mail's,
  and one that moves ``EMAIL_BACKEND`` is set to the SMTP backend. The setup is ``manage.py
  migrate``.
* **Any other app** (Flask, FastAPI, Starlette...): the variables its modules read
  (``os.environ[...]``, ``os.environ.get``, ``os.getenv``) are sorted by name: the database's
  (``*_DB``, ``DATABASE_URL``...), the mail's (``SMTP_HOST``/``SMTP_PORT``, ``MAIL_SERVER``...;
  ``SMTP_HOST``/``SMTP_PORT`` when it names none), an API's base URL (``*_API_URL``,
  ``*_BASE_URL``; or ``--outbound-env``). The setup is ``alembic upgrade head`` where an
  ``alembic.ini`` is, none where the app creates its tables itself (``create_all``).

When no variable moves the database, init refuses (exit 3) and says how to add one: it would
otherwise write into the developer's own database.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess  # nosec B404 - the project's own interpreter, argv lists only
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from acklab.evidence.redaction import redact
from acklab.harness.errors import HarnessError, SpecError

PROBE = Path(__file__).with_name("probe.py")
PROBE_TIMEOUT_S = 60.0
MAX_SOURCE_FILES = 200
MAX_SOURCE_BYTES = 1 << 20
SMTP_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
ENV_NAME = re.compile(r"^[A-Z][A-Z0-9_]{1,63}$")
DB_NAME = re.compile(r"(^|_)(DB|DATABASE|SQLITE|DSN)(_|$)|^DATABASE_URL$")
MAIL_HOSTS = ("EMAIL_HOST", "SMTP_HOST", "SMTP_SERVER", "MAIL_SERVER", "MAIL_HOST")
MAIL_PORTS = ("EMAIL_PORT", "SMTP_PORT", "MAIL_PORT")
API_URL = re.compile(r"(_API_URL|_BASE_URL|_API_BASE|_API_ENDPOINT)$|^API_URL$")
URL_SHAPED = re.compile(r"^[a-z][a-z0-9+.-]*://", re.IGNORECASE)


@dataclass(frozen=True)
class Database:
    """The variable that moves the app's database, and the shape of its value."""

    variable: str
    url: bool  # a database URL (sqlite:///..., postgresql://...); else a file path
    file: str = "app.sqlite3"  # the SQLite file's name, kept inside {{scratch}}


@dataclass(frozen=True)
class Project:
    """How init serves the app: its variables, its setup, its server."""

    root: Path
    app_ref: str
    framework: str  # "django", or the framework of the app's class ("flask", "fastapi"...)
    database: Database
    mail: tuple[str, str]  # the variables of the SMTP relay's host and port
    outbound: tuple[str, ...] = ()  # variables holding a downstream API's base URL
    settings_module: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)  # fixed values (the SMTP backend)
    passed: tuple[str, ...] = ()  # variables passed by name (the signing secret: the sandbox passes no other)
    setup: tuple[str, ...] | None = None
    notes: tuple[str, ...] = ()  # what the spec's header says of what init decided

    def service_env(self, values: Mapping[str, str]) -> dict[str, str]:
        """``command.env`` with `values` (``scratch``, ``smtp_port``, ``outbound_port``,
        ``database_url``) as placeholders or as values."""
        env = dict(self.env)
        if self.settings_module:
            # pytest-django, or a shell, may name test settings; the service runs the project's.
            env["DJANGO_SETTINGS_MODULE"] = self.settings_module
        db = self.database
        if "database_url" in values:
            env[db.variable] = values["database_url"]
        else:
            path = f"{values['scratch']}/{db.file}"
            env[db.variable] = f"sqlite:///{path}" if db.url else path
        env[self.mail[0]] = "127.0.0.1"
        env[self.mail[1]] = values["smtp_port"]
        for name in self.outbound:
            env[name] = f"http://127.0.0.1:{values['outbound_port']}"
        for name in self.passed:
            env.setdefault(name, f"env:{name}")
        return env

    def database_url(self, values: Mapping[str, str]) -> str:
        """The database the lab counts in (``effects.sql.url``)."""
        if "database_url" in values:
            return values["database_url"]
        return f"sqlite:///{values['scratch']}/{self.database.file}"


def run_probe(python: str, cwd: Path, args: list[str], env: Mapping[str, str]) -> dict[str, object]:
    """`probe` run by the project's interpreter from `cwd`; its JSON, or SpecError naming what failed."""
    try:
        done = subprocess.run(  # nosec B603 - argv list, the project's interpreter
            [python, str(PROBE), *args],
            cwd=cwd,
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise HarnessError(f"init could not ask {python} about the project: {exc}") from exc
    lines = done.stdout.strip().splitlines()
    try:
        doc = json.loads(lines[-1]) if lines else {}
    except ValueError:
        doc = {}
    if not isinstance(doc, dict) or "error" in doc or not doc:
        why = doc.get("error") if isinstance(doc, dict) and doc.get("error") else done.stderr.strip()[-1500:]
        raise SpecError(
            f"init could not import the project with {python} from {cwd} ({' '.join(args[:2])}): "
            f"{redact(str(why))}; run acklab init from the project's root, in its virtualenv"
        )
    return doc


def _source_files(root: Path, module: str) -> list[Path]:
    """The app's module and the files of its package (bounded), where the project's interpreter
    finds them: the project's root, its ``src/``, ``PYTHONPATH``."""
    parts = module.split(".")
    found: list[Path] = []
    places = [root, root / "src", *(Path(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)]
    for place in places:
        # The app's own module first: what it reads names the app's variables before its package's.
        single = place.joinpath(*parts).with_suffix(".py")
        if single.is_file():
            found.append(single)
        package = place.joinpath(*parts[:-1]) if len(parts) > 1 else place / parts[0]
        if package.is_dir():
            found += sorted(p for p in package.rglob("*.py") if "migrations" not in p.parts and p != single)
        if found:
            break
    return found[:MAX_SOURCE_FILES]


def env_reads(files: Iterable[Path]) -> dict[str, str | None]:
    """Every variable the files read from the environment, with its literal default (None: none)."""
    found: dict[str, str | None] = {}
    for path in files:
        try:
            text = path.read_bytes()[:MAX_SOURCE_BYTES].decode("utf-8", "replace")
            tree = ast.parse(text)
        except (OSError, SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            name, default = _env_read(node)
            if name is not None and ENV_NAME.match(name):
                found.setdefault(name, default)
    return found


def _env_read(node: ast.AST) -> tuple[str | None, str | None]:
    """``os.environ["X"]``, ``os.environ.get("X", d)``, ``os.getenv("X", d)``, ``env("X")``..."""

    def text(value: ast.AST | None) -> str | None:
        return value.value if isinstance(value, ast.Constant) and isinstance(value.value, str) else None

    if isinstance(node, ast.Subscript) and "environ" in ast.unparse(node.value):
        return text(node.slice), None
    if isinstance(node, ast.Call) and node.args:
        called = ast.unparse(node.func)
        if "environ" in called or "getenv" in called or called.split(".")[-1] in ("env", "config"):
            return text(node.args[0]), text(node.args[1]) if len(node.args) > 1 else None
    return None, None


def string_names(path: Path) -> list[str]:
    """Every string in `path` shaped like a variable's name (a settings file's candidates)."""
    try:
        tree = ast.parse(path.read_bytes()[:MAX_SOURCE_BYTES].decode("utf-8", "replace"))
    except (OSError, SyntaxError, ValueError):
        return []
    names = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    return list(dict.fromkeys(n for n in names if ENV_NAME.match(n)))[:100]


def settings_module_of(root: Path, module: str) -> str | None:
    """The Django settings module: ``DJANGO_SETTINGS_MODULE``, else what manage.py or the app's
    module sets by default."""
    if os.environ.get("DJANGO_SETTINGS_MODULE"):
        return os.environ["DJANGO_SETTINGS_MODULE"]
    for path in (root / "manage.py", root / (module.replace(".", "/") + ".py")):
        try:
            tree = ast.parse(path.read_text("utf-8", "replace"))
        except (OSError, SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and len(node.args) == 2
                and isinstance(node.args[0], ast.Constant)
                and node.args[0].value == "DJANGO_SETTINGS_MODULE"
                and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)
            ):
                return node.args[1].value
    return None


def _file_name(default: str | None, given: str | None, fallback: str) -> str:
    for value in (given, default):
        if value:
            name = PurePosixPath(value.split("///")[-1] if "///" in value else value).name
            if name and re.fullmatch(r"[\w.-]{1,100}", name):
                return name
    return fallback


def django_project(
    python: str, root: Path, app_ref: str, settings_module: str, *, db_file: str | None
) -> tuple[Database, tuple[str, str], dict[str, str], list[str]]:
    """The database's variable, the mail's, fixed values and notes, from the settings' behaviour."""
    path = root / (settings_module.replace(".", "/") + ".py")
    candidates = string_names(path) if path.is_file() else []
    probed = run_probe(python, root, ["settings", settings_module, json.dumps(candidates)], {})
    settings = probed["settings"]
    moves = probed["moves"]
    if not isinstance(settings, dict) or not isinstance(moves, dict):
        raise HarnessError(f"init's settings probe answered {probed!r}: a bug of init")
    database = _django_database(settings_module, settings, moves, db_file=db_file)
    mail, env, notes = _django_mail(settings_module, settings, moves)
    return database, mail, env, notes


def _moves(moves: Mapping[str, Any], setting: str) -> list[dict[str, Any]]:
    """The variables the probe saw move `setting`, each with the value it set."""
    return [m for m in moves.get(setting, []) if isinstance(m, dict)]


def _django_database(
    settings_module: str, settings: Mapping[str, Any], moves: Mapping[str, Any], *, db_file: str | None
) -> Database:
    """The variable that moves the default database's NAME (or its URL); SpecError when none does
    or the database is not SQLite."""
    engine = str(settings.get("DATABASE_ENGINE") or "")
    name_moves = _moves(moves, "DATABASE_NAME")
    if "sqlite" not in engine and not any(m["value"].startswith("sqlite:") for m in name_moves):
        raise SpecError(
            f"{settings_module}: the database is {engine or 'not set'}; init serves a Django app on a "
            "SQLite file of its own (give it a DATABASE_URL read with dj-database-url to use one of "
            "PostgreSQL's, or write the spec's database: section by hand: docs/placeholders.md)"
        )
    if not name_moves:
        raise SpecError(
            f"{settings_module}: DATABASES['default']['NAME'] is {settings.get('DATABASE_NAME')!r} whatever "
            "the environment says, so the app would write into that database; read it from a variable "
            "(NAME: os.environ.get('SHOP_DB', BASE_DIR / 'db.sqlite3')) and run init again: it gives the "
            "service a database of its own in {{scratch}}"
        )
    move = name_moves[0]
    return Database(
        move["name"],
        url=move["value"].startswith("sqlite:"),
        file=_file_name(str(settings.get("DATABASE_NAME") or ""), db_file, "db.sqlite3"),
    )


def _django_mail(
    settings_module: str, settings: Mapping[str, Any], moves: Mapping[str, Any]
) -> tuple[tuple[str, str], dict[str, str], list[str]]:
    """The variables of the mail's host and port, the SMTP backend set where a variable can, and
    notes where the settings keep the mail from the SMTP sink."""
    notes: list[str] = []
    host = next((m["name"] for m in _moves(moves, "EMAIL_HOST")), None)
    port = next((m["name"] for m in _moves(moves, "EMAIL_PORT")), None)
    if host is None or port is None:
        notes.append(
            f"{settings_module} reads EMAIL_HOST/EMAIL_PORT from no variable: its mail cannot reach the "
            "SMTP sink, and no email is counted"
        )
    env: dict[str, str] = {}
    backend = str(settings.get("EMAIL_BACKEND") or SMTP_BACKEND)
    backend_var = next((m["name"] for m in _moves(moves, "EMAIL_BACKEND")), None)
    if backend != SMTP_BACKEND:
        if backend_var is not None:
            env[backend_var] = SMTP_BACKEND
        else:
            notes.append(
                f"{settings_module}'s EMAIL_BACKEND is {backend}, fixed: the SMTP sink hears nothing; read it "
                "from a variable so the spec can set Django's SMTP backend"
            )
    return (host or "EMAIL_HOST", port or "EMAIL_PORT"), env, notes


def generic_database(reads: Mapping[str, str | None], *, db_env: str | None, db_file: str | None) -> Database:
    if db_env is not None:
        default = reads.get(db_env)
    else:
        found = [n for n in reads if DB_NAME.search(n)]
        if not found:
            raise SpecError(
                "the app reads its database from no environment variable init can see (os.environ, "
                "os.getenv), so it would write into the one it names; read it from a variable, or name it "
                "with --db-env NAME"
            )
        db_env, default = found[0], reads[found[0]]
    url = bool(default and URL_SHAPED.match(default)) or db_env.endswith(("_URL", "_URI", "_DSN"))
    return Database(db_env, url=url, file=_file_name(default, db_file, f"{db_env.lower()}.sqlite3"))


def detect(
    python: str,
    root: Path,
    app_ref: str,
    *,
    db_env: str | None,
    db_file: str | None,
    outbound_env: tuple[str, ...],
    secret_env: str,
) -> Project:
    """How to serve `app_ref` from `root` (see the module docstring); SpecError (exit 3) when init
    cannot give it a database of its own."""
    module = app_ref.partition(":")[0]
    files = _source_files(root, module)
    reads = env_reads(files)
    notes: list[str] = []
    settings_module = None
    if (root / "manage.py").is_file() or os.environ.get("DJANGO_SETTINGS_MODULE"):
        settings_module = settings_module_of(root, module)
    env: dict[str, str] = {}
    if settings_module is not None and db_env is None:
        database, mail, env, found = django_project(python, root, app_ref, settings_module, db_file=db_file)
        notes += found
        setup: tuple[str, ...] | None = ("python", "manage.py", "migrate", "--noinput")
        framework = "django"
    else:
        database = generic_database(reads, db_env=db_env, db_file=db_file)
        host = next((n for n in MAIL_HOSTS if n in reads), "SMTP_HOST")
        port = next((n for n in MAIL_PORTS if n in reads), "SMTP_PORT")
        mail = (host, port)
        setup, note = _generic_setup(root, files)
        notes.append(note)
        framework = ""
    outbound = tuple(dict.fromkeys([*outbound_env, *(n for n in reads if API_URL.search(n))]))
    return Project(
        root=root,
        app_ref=app_ref,
        framework=framework,
        database=database,
        mail=mail,
        outbound=outbound,
        settings_module=settings_module,
        env=env,
        passed=(secret_env,),
        setup=setup,
        notes=tuple(notes),
    )


def _generic_setup(root: Path, files: Iterable[Path]) -> tuple[tuple[str, ...] | None, str]:
    if (root / "alembic.ini").is_file():
        return ("python", "-m", "alembic", "upgrade", "head"), "setup: alembic upgrade head (alembic.ini)"
    for path in files:
        try:
            if "create_all" in path.read_text("utf-8", "replace"):
                return None, f"setup: none: the app creates its tables itself (create_all in {path.name})"
        except OSError:
            continue
    return None, (
        "setup: none found (no manage.py, alembic.ini or create_all); if the app's tables come from a "
        "command, add it as setup: {argv: [...]}"
    )
