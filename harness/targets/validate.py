"""`acklab validate` of a target spec: every check `acklab run` makes before it sends anything.

Schema, template, conflict paths and headers (exit 3); the ``env:NAME`` variables it needs
(unset ones are listed, exit 3 unless ``--allow-unset``); the signing secret's format; and
the loopback rule for every URL the lab will contact (exit 5 unless ``--allow-remote``).
The one thing contacted is the effects database, when it can be reached: ``effects.sql.count``
(and ``state``) run once with a dummy id on the read-only connection the lab counts with, so a
query on a table that does not exist is refused here (exit 3), not in the middle of a run.
What is returned are notes: things that are valid but worth knowing.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from sqlalchemy.engine import make_url

from acklab.evidence.redaction import MIN_SECRET_CHARS
from acklab.harness.errors import ProbeError, SpecError
from acklab.harness.specs.credentials import resolve_env, unset_env_names
from acklab.harness.specs.target import RUN_PLACEHOLDERS, TargetSpec
from acklab.harness.targets.effects import SqlProbe, database_kind
from acklab.harness.targets.spec_checks import (
    check_reach,
    check_target_doc,
    check_wire_fields,
    is_unset,
    sample_event,
)
from acklab.harness.targets.state import SqlState, read_together
from acklab.harness.wire.providers import event_type_header, provider
from acklab.harness.wire.signing import SIGNERS


def _short_secrets(spec: TargetSpec) -> list[str]:
    found = []
    http = spec.effects.http
    for where, values in (("headers", spec.headers), ("effects.http.headers", http.headers if http else {})):
        for name, value in values.items():
            if (
                not is_unset(value)
                and len(resolve_env(value, field_name=f"{where}.{name}")) < MIN_SECRET_CHARS
            ):
                found.append(f"{where}.{name}")
    return found


def validate_target(spec: TargetSpec, *, source: str, allow_unset: bool, allow_remote: bool) -> list[str]:
    """Raise the error `acklab run` would raise (exit 3 or 5); return notes for a valid spec."""
    spec.check_placeholders(source=source)
    picked = spec.run_placeholders
    if picked:
        spec = spec.stand_in()  # what the lab picks per served service: checked with stand-ins
    check_target_doc(spec, source=source)
    notes: list[str] = []
    if picked:
        listed = ", ".join("{{" + n + "}}" for n in RUN_PLACEHOLDERS if n in picked)
        notes.append(f"{listed}: picked by the lab for each served service, fresh in every run")
    unset = unset_env_names(spec.dump())
    if unset:
        listed = ", ".join(f"{name} ({where})" for where, name in unset)
        if not allow_unset:
            names = " ".join(sorted({f"{name}=..." for _, name in unset}))
            raise SpecError(
                f"{source}: unset environment variables: {listed}; export {names} "
                "(or pass --allow-unset to check the rest)"
            )
        notes.append(f"unset environment variables (not checked): {listed}")
    scheme = spec.signing.scheme
    secret = spec.signing.secret
    if secret is not None and not is_unset(secret):
        SIGNERS[scheme].check_secret(resolve_env(secret, field_name="signing.secret"))
    check_wire_fields(spec, skip_unset=True)
    check_reach(spec, allow_remote=allow_remote, skip_unset=True)
    short = _short_secrets(spec)
    if short:
        notes.append(
            f"{', '.join(short)}: shorter than {MIN_SECRET_CHARS} characters; acklab redacts such a value in "
            "the headers it records but cannot find it in free text (an error message, a log)"
        )
    if not picked and not unset:
        notes.extend(_dry_read(spec))
    header = provider(scheme).event_type_header
    if header and not spec.delivery.event_type:
        value = event_type_header(scheme, None, sample_event(spec.event).document)
        notes.append(f"{header} will be {value!r} (from the body); set delivery.event_type to choose it")
    return notes


DUMMY_ID = "acklab-validate"
# How a reachable database says a query names what is not there, or is not SQL (exit 3); any
# other failure (a database that cannot be reached, say) only means the queries were not run.
_QUERY_WRONG = ("no such table", "no such column", "does not exist", "syntax error", "undefinedtable",
                "undefinedcolumn", "undefinedfunction", "no such function")  # fmt: skip


def _dry_read(spec: TargetSpec) -> list[str]:
    """Run ``effects.sql.count`` (and ``state``) once with a dummy id, read-only; SpecError when a
    query cannot run on a reachable database (a missing table, a typo); a note when unreachable."""
    sql = spec.effects.sql
    if sql is None:
        return []
    url = resolve_env(sql.url, field_name="effects.sql.url")
    if database_kind(url) == "sqlite":
        path = make_url(url).database or ""
        if not path or not Path(path).exists():
            return [f"effects.sql.url: the SQLite file {path!r} does not exist yet; the queries were not run"]
    probe = SqlProbe(url, sql.count)
    state = SqlState(url, sql.state) if sql.state is not None else None

    async def read() -> None:
        try:
            await read_together(probe, state, DUMMY_ID, DUMMY_ID)
        finally:
            await probe.aclose()
            if state is not None:
                await state.aclose()

    try:
        asyncio.run(read())
    except ProbeError as exc:
        reason = str(exc)
        if not any(marker in reason.lower() for marker in _QUERY_WRONG):
            return [f"effects.sql.url: the database could not be read ({reason}); the queries were not run"]
        queries = "effects.sql.count and effects.sql.state" if state is not None else "effects.sql.count"
        raise SpecError(
            f"{queries} could not run on the target's database (once, with the dummy id {DUMMY_ID!r}, on "
            f"the read-only connection the lab counts with): {reason}; fix the query or the table it names"
        ) from exc
    ran = "effects.sql.count and effects.sql.state ran" if state is not None else "effects.sql.count ran"
    return [f"{ran} once with a dummy id on the read-only connection"]
