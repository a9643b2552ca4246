"""acklab's optional parts (pyproject's extras) and the one message a missing one gets.

``pip install acklab`` is the core: ``run``, ``plan``, ``validate``, ``init``, the pytest
plugin, ``evidence verify``. Everything else is an extra, and the core never imports an
extra's package: what needs one imports it where it is used, through `require` (or meets
the `ModuleNotFoundError` that `missing_module` turns into the same message). A missing
extra is a lab error (exit 4) naming the command to run, which is the route acklab itself was
installed by (`install_command`, read from its own ``direct_url.json``, PEP 610): from a
package index (``pip install 'acklab[console]'``: the project's GitLab package registry, as the
user's pip is configured), from a git URL (``pip install 'acklab[console] @
git+https://...@<commit>'``), a wheel or a folder (``pip install '/path/acklab-1.0-py3-none-any.whl[console]'``),
or an editable checkout (``pip install -e '/path/to/acklab[console]'``). No index publishes a
package called acklab for everyone: a bare ``pip install acklab`` is never the advice unless that
is how it came.

docs/install.md is the user's table of the same facts.
"""

from __future__ import annotations

import importlib
import json
from importlib import metadata
from types import ModuleType
from urllib.parse import unquote, urlsplit

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


def install_command(extra: str | None = None, distribution: metadata.Distribution | None = None) -> str:
    """The pip command that installs acklab (with `extra`) the way this one was installed."""
    name = f"acklab[{extra}]" if extra else "acklab"
    # A source checkout's own acklab.egg-info may be found first (its folder on sys.path): the
    # installed one says how it was installed.
    found = [distribution] if distribution is not None else list(metadata.distributions(name="acklab"))
    if not found:
        # Imported from a source checkout (PYTHONPATH), never installed: install that checkout.
        from pathlib import Path

        root = Path(__file__).resolve().parents[1]
        return f"pip install -e '{root}{name[6:]}'"
    texts = [d.read_text("direct_url.json") for d in found]
    text = next((t for t in texts if t), None)
    try:
        direct = json.loads(text) if text else None
    except ValueError:
        direct = None
    if not isinstance(direct, dict) or not isinstance(direct.get("url"), str):
        return f"pip install '{name}'"  # from an index: the one the user's pip is configured with
    url = direct["url"]
    extras = name[6:]
    vcs = direct.get("vcs_info")
    if isinstance(vcs, dict):
        commit = vcs.get("requested_revision") or vcs.get("commit_id")
        return f"pip install '{name} @ {vcs.get('vcs', 'git')}+{url}" + (f"@{commit}'" if commit else "'")
    path = unquote(urlsplit(url).path) if url.startswith("file:") else None
    if isinstance(direct.get("dir_info"), dict) and path is not None:
        editable = "-e " if direct["dir_info"].get("editable") else ""
        return f"pip install {editable}'{path}{extras}'"
    if path is not None:
        return f"pip install '{path}{extras}'"  # the wheel (or sdist) it came from
    return f"pip install '{name} @ {url}'"


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
        return f"it needs the Python package {distribution!r}: {install_command(extra)}"
    return (
        f"it needs the Python package {distribution!r}, one of acklab's dependencies: "
        f"pip install {distribution!r} (or reinstall acklab: {install_command()})"
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
            f"{install_command(owner or extra)}"
        ) from exc
