"""Run placeholders of a target spec: what the lab picks for each served service, once per run.

``{{port}}`` (a free loopback port for the service), ``{{scratch}}`` (a fresh private
directory), ``{{database_url}}`` (a fresh PostgreSQL database on the server ``database.url``
names), ``{{redis_url}}`` (the Redis of ``services: [redis]``, `harness.services`), and where
each sink listens (``{{smtp_port}}``, ``{{outbound_port}}``, ``{{provider_api_url}}``: declared by
its section of the spec, `harness.specs.target.SinkSection`; the full list is
`harness.specs.target.RUN_PLACEHOLDERS`, which the functions here are given). They may appear in any
string of the spec but the event body (``event``, ``conflict``: those are filled per event,
`harness.wire.templates`); per-event placeholders elsewhere (``{{event_id}}`` in an effects
URL) are left for their own stage.

The lab fills them twice: with stand-ins when a spec is checked (`acklab validate`, loading
before the run: the URL rules see a real port), and with the real values when the service
is served (`harness.targets.isolation`). Two services never share a value: head and patched
checkouts of the repair flow, two CI shards on one machine, a leftover server of another job.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from acklab.harness.errors import SpecError

# The lab's own run placeholders; the sinks' ports come with their spec sections.
BASE_PLACEHOLDERS = ("port", "scratch", "database_url", "redis_url")
# Filled per event or per delivery by their own stages (templates, probes, sinks' routes).
LATER = frozenset(
    {"event_id", "order_id", "object_id", "seq", "timestamp", "unix_time", "unix_time_ms", "event_time"}
)
PLACEHOLDER = re.compile(r"\{\{\s*([a-z_]+)\s*\}\}")
# The event body and its variants are templates of their own (harness.wire.templates).
BODY_FIELDS = frozenset({"event", "conflict", "lifecycle", "siblings"})
BASE_STAND_INS: Mapping[str, str] = {
    "port": "65535",
    "scratch": "/nonexistent/acklab-scratch",
    "database_url": "postgresql://acklab@127.0.0.1:5432/acklab_standin",
    "redis_url": "redis://127.0.0.1:65532/0",
}


def _strings(doc: Any, where: str = "") -> Iterator[tuple[str, str]]:
    if isinstance(doc, Mapping):
        for key, value in doc.items():
            if not where and key in BODY_FIELDS:
                continue
            yield from _strings(value, f"{where}.{key}" if where else str(key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            yield from _strings(value, f"{where}.{i}")
    elif isinstance(doc, str):
        yield where, doc


def used(doc: Mapping[str, Any], run: Sequence[str]) -> frozenset[str]:
    """The run placeholders (of `run`) `doc` uses outside its event body."""
    return frozenset(name for _, text in _strings(doc) for name in PLACEHOLDER.findall(text) if name in run)


def check(doc: Mapping[str, Any], run: Sequence[str], *, source: str, in_process: bool = False) -> None:
    """Refuse (exit 3) an unknown placeholder outside the event body (`run`: the run placeholders),
    ``{{database_url}}`` without the ``database:`` server it is created on, and ``{{port}}`` with
    nothing the lab starts to listen there (`in_process`: an app object the lab serves itself)."""
    known = (*run, *sorted(LATER))
    for where, text in _strings(doc):
        for name in PLACEHOLDER.findall(text):
            if name not in known:
                listed = ", ".join("{{" + k + "}}" for k in run)
                raise SpecError(
                    f"{source}: {where}: {{{{{name}}}}} is not a placeholder acklab fills; the lab picks "
                    f"{listed} for each served service"
                )
    if "database_url" in used(doc, run) and "database" not in doc:
        raise SpecError(
            f"{source}: {{{{database_url}}}} is used, but there is no database: section naming the server "
            "to create it on; add database: {url: env:MY_TEST_DB_URL} (a PostgreSQL server the lab may "
            "create and drop databases on)"
        )
    if "database" in doc and "database_url" not in used(doc, run):
        raise SpecError(
            f"{source}: database: names a server, but no field uses {{{{database_url}}}}; use it where the "
            "service and the effects query find their database (command.env, effects.sql.url), or remove "
            "database:"
        )
    if "port" in used(doc, run) and "command" not in doc and not in_process:
        raise SpecError(
            f"{source}: {{{{port}}}} is a port the lab picks for the service it starts; without command: "
            "nothing would listen there. Add command: (argv that serves on {{port}}), or write the "
            "service's fixed port"
        )


def fill(doc: Any, values: Mapping[str, str], *, top: bool = True) -> Any:
    """`doc` with every run placeholder in `values` filled (the event body is left alone)."""
    if isinstance(doc, Mapping):
        return {
            key: value if top and key in BODY_FIELDS else fill(value, values, top=False)
            for key, value in doc.items()
        }
    if isinstance(doc, list):
        return [fill(value, values, top=False) for value in doc]
    if isinstance(doc, str):
        return PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), doc)
    return doc
