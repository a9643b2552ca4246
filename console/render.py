"""The Jinja2 environment shared by the live console and the static snapshot.

Autoescaping is on for every template: incident content is data recorded from a handler
under attack, so nothing from a bundle ever reaches the page unescaped.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined

from acklab.evidence.documents.records import SINK_SOURCES

from .identity import short_revision
from .svg import ms

BOUNDARY = (
    "acklab proves at-most-once effects in the handler's own database, "
    "not exactly-once delivery across systems."
)


@dataclass(frozen=True)
class Site:
    """What every page's banner says: live console, or a dated historical snapshot."""

    static: bool
    evidence: str
    generated_at: str | None = None
    pipeline: str | None = None
    commit: str | None = None
    docs: bool = False  # a documentation site was published beside the snapshot (docs/)


def fmt_time(value: Any) -> str:
    """An ISO timestamp as `2026-01-05 09:03:01 UTC`; anything else as it is."""
    if not isinstance(value, str) or not value:
        return "—"
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return value
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def fmt_ms(value: Any) -> str:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return ms(float(value))
    return "—"


def fine_ms(value: Any) -> str:
    """A spread for people: sub-millisecond figures keep their microseconds (0.094 ms)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f"{value:.3f} ms" if value < 1 else ms(float(value))
    return "—"


def short(value: Any, n: int = 10) -> str:
    text = "" if value is None else str(value)
    return text[:n] if len(text) > n else text or "—"


def http_url(value: Any) -> str | None:
    """Only http(s) URLs become links (a `javascript:` URL from a bundle must stay text)."""
    if isinstance(value, str) and value.lower().startswith(("https://", "http://")):
        return value
    return None


def status_text(value: Any) -> str:
    return "no answer" if value is None else str(value)


GOOD = frozenset({"pass", "ok", "published", "applied", "approve", "verified", "held"})
BAD = frozenset({"fail", "failed", "refused", "rejected", "reject", "integrity warning", "regression", "gap"})
DOUBTFUL = frozenset({"error", "interrupted", "modify", "incomplete"})


def verdict_class(value: Any) -> str:
    """The badge colour class of a verdict, status or outcome (the badge also carries the word)."""
    text = str(value)
    if text in GOOD:
        return "pass"
    if text in BAD:
        return "fail"
    return "error" if text in DOUBTFUL else "neutral"


@cache
def environment() -> Environment:
    """The (cached) template environment, autoescaping everything."""
    env = Environment(
        loader=PackageLoader("acklab.console", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        {
            "when": fmt_time,
            "ms": fmt_ms,
            "fine_ms": fine_ms,
            "short": short,
            "http_url": http_url,
            "status": status_text,
            "vclass": verdict_class,
            "revision": short_revision,
        }
    )
    env.globals["BOUNDARY"] = BOUNDARY
    env.globals["SINK_SOURCES"] = SINK_SOURCES  # a column per sink source (harness.sinks.SINKS)
    return env


def render(template: str, **context: Any) -> str:
    """Render one template with its context (which must carry `links` and `site`)."""
    return environment().get_template(template).render(**context)
