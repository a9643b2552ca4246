"""What `acklab init` writes: the target spec, the pytest test, the CI snippet — all or nothing.

`Scaffold` holds the three files' contents; `Scaffold.write` checks the spec as ``acklab
validate`` does (from its final folder, so a relative ``command.cwd`` means what it will
mean), then puts every file in place by rename. Any failure before the last rename leaves
nothing behind: no half-written file, no folder it made.

The spec is YAML written by `yaml.safe_dump`; the names the database gave (tables, columns)
reach it only as values it quotes, or escaped in a comment line (`discover.shown`), and the
text is read back before it is written: what it says is exactly the document init built, or
nothing is written (`spec_text`).
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from acklab.harness.errors import HarnessError, SpecError
from acklab.harness.init.discover import Candidate, shown
from acklab.harness.init.examples import Example
from acklab.harness.specs.service import Command, Setup
from acklab.harness.specs.target import Delivery, Effects, Expect, Signing, TargetSpec

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,79}$")


def quote_identifier(name: str) -> str:
    """A SQL identifier as written in the count query: bare when it is a plain lower-case word."""
    return name if re.fullmatch(r"[a-z_][a-z0-9_]*", name) else '"' + name.replace('"', '""') + '"'


def count_query(candidate: Candidate, prefix: str = "") -> str:
    where = f"'{prefix}' || :event_id" if candidate.keyed_by == "object" and prefix else ":event_id"
    table, column = quote_identifier(candidate.table), quote_identifier(candidate.column)
    # Identifiers the database named, quoted; the prefix is a shipped example's (letters and _).
    return f"SELECT count(*) FROM {table} WHERE {column} = {where}"  # noqa: S608  # nosec B608


def state_query(candidate: Candidate, prefix: str = "") -> str | None:
    if not candidate.state_columns:
        return None
    columns = ", ".join(quote_identifier(c) for c in candidate.state_columns)
    where = count_query(candidate, prefix).split(" WHERE ", 1)[1]
    table = quote_identifier(candidate.table)
    return f"SELECT {columns} FROM {table} WHERE {where} ORDER BY {columns}"  # noqa: S608  # nosec B608


def target_doc(
    *,
    name: str,
    example: Example,
    endpoint: str,
    secret_env: str,
    effects: Effects,
    command: Command | None,
    expect: Expect,
    template: Mapping[str, Any],
    setup: Setup | None = None,
) -> TargetSpec:
    """The spec init writes (only the sections it sets: a spec read back is the one written): `effects`
    is ``effects.sql`` with ``effects.smtp`` / ``outbound`` as init found them."""
    sections: dict[str, Any] = {}
    if example.event_type:
        sections["delivery"] = Delivery(event_type=example.event_type)
    if command is not None:
        sections["command"] = command
    if setup is not None:
        sections["setup"] = setup
    return TargetSpec(
        apiVersion="acklab/v1",
        kind="target",
        name=name,
        endpoint=endpoint,
        signing=Signing(scheme=example.provider, secret=f"env:{secret_env}"),
        event=dict(template),
        effects=effects,
        expect=expect,
        **sections,
    )


def spec_text(spec: TargetSpec, *, example: Example, seen: list[str]) -> str:
    source = (
        f"# event: your own {example.event} from {shown(example.captured)} (--example),"
        if example.captured is not None
        else f"# event: {example.provider}'s published example of {example.published or example.event}, from "
        f"{example.source} ({example.licence})" + (f", as {example.event}," if example.published else ",")
    )
    header = [
        f"# acklab target spec for {spec.name}, written by `acklab init` (yours to edit).",
        source,
        "#   with {{event_id}} and {{order_id}} fresh for every event the lab sends.",
        "# conflict: not set, so a conflicting body changes what docs/conflicts.md says (the amount, if any).",
        "# What init saw (the database, and the lab's SMTP and API sinks):",
        # Each line holds names the database gave: escaped, it cannot end the comment.
        *(f"#   {shown(line)}" for line in seen),
        "# Check it: acklab validate THIS_FILE; attack it: acklab run --target THIS_FILE",
    ]
    doc = spec.dump()
    text = "\n".join(header) + "\n" + yaml.safe_dump(doc, sort_keys=False, width=100, allow_unicode=True)
    if yaml.safe_load(text) != doc:
        raise HarnessError(
            "init built a spec whose YAML does not read back as what it built (a bug of init, or a name "
            "in the database it failed to escape); nothing was written"
        )
    return text


def test_text(*, name: str, spec_rel: str, app_ref: str | None, served: bool) -> str:
    """The pytest test. `served`: the spec serves the app itself (``command:``), so the test runs the
    spec's service — its own port, database and sinks — and imports nothing of the app: it runs the
    same under plain pytest and pytest-django (whose test settings never reach that process)."""
    function = "test_" + re.sub(r"[^0-9a-zA-Z_]", "_", name).lower() + "_webhook"
    lines = [
        f'"""acklab\'s attack on the {name} webhook, one test per experiment (written by `acklab init`).',
        "",
        "A failure names the seed that reproduces it; the evidence is in .acklab/ at the rootdir",
        '(acklab console --evidence .acklab)."""',
        "",
        "import pytest",
        "",
    ]
    if served:
        app_ref = None
    if app_ref is not None:
        module, _, attribute = app_ref.partition(":")
        imported = "app" if attribute == "app" else f"{attribute} as app"
        lines += [f"from {module} import {imported}", ""]
    lines += [
        f'SPEC = "{spec_rel}"  # relative to this file',
        "",
        "",
        "@pytest.mark.webhook_spec(SPEC)",
        f"def {function}(webhook_lab, webhook_experiment):",
    ]
    if app_ref is not None:
        lines.append(
            "    result = webhook_lab.attack(app)  # the app in this process, as the spec describes it"
        )
    elif served:
        lines.append(
            "    result = webhook_lab.run()  # the spec's command: serves the app: its own port, database and sinks"
        )
    else:
        lines.append("    result = webhook_lab.run()  # the service the spec names, over its socket")
    lines += ["    assert result.passed, result.explain()", ""]
    return "\n".join(lines)


def ci_text(*, name: str, spec_rel_root: str, secret_env: str, project: str, version: str) -> str:
    job = re.sub(r"[^a-z0-9-]", "-", name.lower()).strip("-") or "webhooks"
    return f"""# acklab in {name}'s pipeline (written by `acklab init`): add these lines to your .gitlab-ci.yml.
# {project} is wherever acklab's project lives on your GitLab (docs/ci.md); {version} a release tag of it.
# acklab installs into a virtualenv of its own and is called by path: the spec's command: runs
# your service with the job's own python and PATH.
include:
  - component: $CI_SERVER_FQDN/{project}/run@{version}
    inputs:
      job_name: {job}-webhooks
      target: {spec_rel_root}
      shards: 2                        # two jobs; each serves its own copy of the service on its own {{{{port}}}}
      acklab_project: {project}
  - component: $CI_SERVER_FQDN/{project}/evidence@{version}
    inputs:
      needs: [{job}-webhooks]
      shards: out/{job}-webhooks-*/
      acklab_project: {project}

{job}-webhooks:
  variables:
    {secret_env}: ${secret_env}_CI     # a masked CI/CD variable: the secret your service verifies with
"""


@dataclass(frozen=True)
class Scaffold:
    """The files `acklab init` writes: path -> text; `spec` is the target spec among them."""

    spec: Path
    files: Mapping[Path, str]

    def refuse_existing(self, *, force: bool) -> None:
        existing = [p for p in self.files if p.exists()]
        if existing and not force:
            raise SpecError(
                f"{', '.join(map(str, existing))} already exist{'s' if len(existing) == 1 else ''}; "
                "nothing was written. Pass --force to replace them, or --name another name"
            )
        for path in existing:
            if not path.is_file():
                raise SpecError(f"{path} exists and is not a file; nothing was written")

    def write(self, check: Any) -> list[Path]:
        """Check the spec with `check(path)` in its final folder, then write every file (all or nothing)."""
        made: list[Path] = []
        staged: dict[Path, Path] = {}
        try:
            for path in self.files:
                missing = [d for d in [path.parent, *path.parent.parents] if not d.exists()]
                for folder in reversed(missing):
                    if not folder.exists():
                        folder.mkdir()
                        made.append(folder)
            for path, text in self.files.items():
                fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".acklab-init", dir=path.parent)
                with os.fdopen(fd, "w", encoding="utf-8") as handle:
                    handle.write(text)
                staged[path] = Path(name)
            check(staged[self.spec])
            for path, temp in staged.items():
                os.replace(temp, path)
        except BaseException:
            for temp in staged.values():
                with contextlib.suppress(OSError):
                    temp.unlink()
            for folder in reversed(made):
                with contextlib.suppress(OSError):
                    folder.rmdir()
            raise
        return list(self.files)
