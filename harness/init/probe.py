"""What `acklab init` asks of a project in the project's own interpreter (run by path: stdlib only).

``python probe.py settings MODULE NAMES_JSON`` imports a Django settings module as its own file
(never ``django.setup()``, never a database), then again with each candidate variable set to a
sentinel, and prints which settings each variable moves: the database's ``NAME``, the mail
backend, host and port. A variable is found by what it does, not by what it is called.

``python probe.py app MODULE:ATTRIBUTE`` imports the app and prints whether it is ASGI or WSGI and
the framework its class comes from. init runs it with the database redirected into its scratch
directory: an app that creates its tables when imported creates them there.

Both print one JSON object on stdout; an exception is printed as ``{"error": ...}``.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import sys
from typing import Any

# A value per shape a variable may take: a path, a database URL, a port, a dotted class path.
SENTINELS = (
    "/acklab-sentinel/db.sqlite3",
    "sqlite:////acklab-sentinel/db.sqlite3",
    "25999",
    "acklab.sentinel.EmailBackend",
)
WATCHED = ("DATABASE_NAME", "DATABASE_ENGINE", "EMAIL_BACKEND", "EMAIL_HOST", "EMAIL_PORT")


def _settings(module: str) -> dict[str, Any]:
    sys.modules.pop(module, None)
    loaded = importlib.import_module(module)
    default = (getattr(loaded, "DATABASES", None) or {}).get("default") or {}
    values = {
        "DATABASE_NAME": default.get("NAME"),
        "DATABASE_ENGINE": default.get("ENGINE"),
        "EMAIL_BACKEND": getattr(loaded, "EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend"),
        "EMAIL_HOST": getattr(loaded, "EMAIL_HOST", "localhost"),
        "EMAIL_PORT": getattr(loaded, "EMAIL_PORT", 25),
    }
    return {k: (str(v) if v is not None else None) for k, v in values.items()}


def settings(module: str, names: list[str]) -> dict[str, Any]:
    sys.path.insert(0, os.getcwd())
    base = _settings(module)
    moves: dict[str, list[dict[str, str]]] = {}
    for name in names:
        before = os.environ.get(name)
        for sentinel in SENTINELS:
            os.environ[name] = sentinel
            try:
                now = _settings(module)
            except Exception:  # noqa: S112  # nosec B112 - this shape does not fit the variable (int("/x"))
                continue
            finally:
                if before is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = before
            for key in WATCHED:
                if now[key] != base[key] and ("acklab" in str(now[key]) or now[key] == sentinel):
                    moves.setdefault(key, []).append({"name": name, "value": sentinel, "setting": now[key]})
    _settings(module)
    return {"settings": base, "moves": moves}


def app(ref: str) -> dict[str, Any]:
    sys.path.insert(0, os.getcwd())
    module, _, attribute = ref.partition(":")
    found: Any = importlib.import_module(module)
    for part in attribute.split("."):
        found = getattr(found, part)
    call = found if inspect.isfunction(found) else getattr(found, "__call__", None)  # noqa: B004
    asgi = inspect.iscoroutinefunction(call) or inspect.iscoroutinefunction(found)
    kind = type(found) if not inspect.isfunction(found) else found
    return {
        "interface": "asgi" if asgi else "wsgi",
        "framework": (getattr(kind, "__module__", "") or "").split(".")[0],
    }


def main(argv: list[str]) -> int:
    try:
        if argv[:1] == ["settings"]:
            doc = settings(argv[1], json.loads(argv[2]))
        elif argv[:1] == ["app"]:
            doc = app(argv[1])
        else:
            doc = {"error": f"unknown probe {argv[:1]!r}"}
    except BaseException as exc:  # the project's own code failed: init shows why
        doc = {"error": f"{type(exc).__name__}: {exc}"}
    sys.stdout.write("\n" + json.dumps(doc) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
