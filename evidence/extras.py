"""acklab's optional parts (pyproject's extras) and the one message a missing one gets.

``pip install acklab`` is the core: ``run``, ``plan``, ``validate``, ``init``, the pytest
plugin, ``evidence verify``. Everything else is an extra, and the core never imports an
extra's package: what needs one imports it where it is used, through `require` (or meets
the `ModuleNotFoundError` that `missing_module` turns into the same message). A missing
extra is a lab error (exit 4) naming the command to run: ``pip install 'acklab[console]'``.

docs/install.md is the user's table of the same facts.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from acklab.evidence.exitcodes import AcklabError, ExitCode

# extra -> what it is for (docs/install.md has the same table)
EXTRAS: dict[str, str] = {
    "fixture": "the built-in webhook fixture (fixture:live, fixture:unsafe, acklab serve, acklab demo)",
    "console": "the evidence console and the Pages snapshot (acklab console, acklab pages)",
    "postgres": "PostgreSQL: effects read from a postgresql:// database, {{database_url}}, db faults",
    "gitlab": "GitLab's API: acklab evidence pull, the repair flow's publishing",
    "explore": "the schedule explorer (acklab explore, acklab replay, webhook_lab.explore)",
    "h2": "the single-packet burst over HTTP/2 (--burst-sync single-packet)",
    "sinks": "the SMTP and outbound API sinks (effects.smtp, effects.outbound)",
    "flow": "the scoped repair flow (acklab flow)",
}

# Import name -> (distribution, the extra that brings it; None: a core dependency).
PACKAGES: dict[str, tuple[str, str | None]] = {
    "httpx": ("httpx", None),
    "httpcore": ("httpx", None),
    "h11": ("h11", None),
    "sqlalchemy": ("SQLAlchemy", None),
    "pydantic": ("pydantic", None),
    "uvicorn": ("uvicorn", None),
    "jsonschema": ("jsonschema", None),
    "referencing": ("jsonschema", None),
    "yaml": ("PyYAML", None),
    "rich": ("rich", None),
    "click": ("click", None),
    "a2wsgi": ("a2wsgi", None),
    "fastapi": ("fastapi", "fixture"),
    "starlette": ("fastapi", "fixture"),
    "pydantic_settings": ("pydantic-settings", "fixture"),
    "aiosmtpd": ("aiosmtpd", "sinks"),
    "jinja2": ("Jinja2", "console"),
    "markupsafe": ("Jinja2", "console"),
    "psycopg": ("psycopg[binary]", "postgres"),
    "psycopg_binary": ("psycopg[binary]", "postgres"),
    "gitlab": ("python-gitlab", "gitlab"),
    "requests": ("python-gitlab", "gitlab"),
    "hypothesis": ("hypothesis", "explore"),
    "h2": ("h2", "h2"),
    "hpack": ("h2", "h2"),
    "hyperframe": ("h2", "h2"),
    "playwright": ("playwright", "dev"),
    "pytest": ("pytest", "dev"),
    "standardwebhooks": ("standardwebhooks", "dev"),
    "stripe": ("stripe", "dev"),
    "svix": ("svix", "dev"),
    "schemathesis": ("schemathesis", "dev"),
}


class MissingExtra(AcklabError):
    """A part of acklab that is not installed (exit 4): the message names the pip command."""

    exit_code = ExitCode.LAB_ERROR


def install_hint(module: str) -> str:
    """What to install for import name `module`: the extra when it is optional."""
    name = module.split(".", maxsplit=1)[0]
    if name == "acklab":
        return f"acklab's own module {module!r} is missing: the installation is incomplete; reinstall acklab"
    distribution, extra = PACKAGES.get(name, (name, None))
    if extra:
        return f"it needs the Python package {distribution!r}: pip install 'acklab[{extra}]'"
    return (
        f"it needs the Python package {distribution!r}, one of acklab's dependencies: "
        f"pip install {distribution!r} (or reinstall acklab)"
    )


def missing_module(exc: ModuleNotFoundError) -> str:
    """What to install for a missing import: the package and, when optional, acklab's extra."""
    return install_hint(exc.name or "")


def require(extra: str, module: str, what: str) -> ModuleType:
    """Import `module` (a package of `extra`) for `what`, or raise `MissingExtra` naming the fix."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        missing = (exc.name or module).split(".")[0]
        distribution, owner = PACKAGES.get(missing, (missing, extra))
        raise MissingExtra(
            f"{what} needs the Python package {distribution!r}, which is not installed: "
            f"pip install 'acklab[{owner or extra}]'"
        ) from exc
