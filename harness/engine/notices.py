"""What a run warns about: what it saw that may make a pass mean less than it says.

A warning never changes a verdict; it is written into ``run.json`` (``warnings``), printed by
``acklab run``, shown by `RunResult.explain` and raised as a pytest warning by the plugin.

* **A silent sink.** ``effects.smtp`` (or ``effects.outbound``) is configured, the database
  gained rows, and the sink heard nothing at all: the app's mail settings (or its API base
  URL) point elsewhere — Django's test settings swap the SMTP backend for locmem, a
  ``.env`` names another relay — so the emails verdicts judged nothing. A sink that heard
  messages naming no event of the run is told too: its ``match`` is not what the messages say.
* **What the target itself noticed** (`Target.notices`): a service outside the job the lab was
  allowed to attack on a developer's machine.
"""

from __future__ import annotations

from collections.abc import Sequence

from acklab.evidence.documents.trial import Trial
from acklab.harness.sinks import Sinks

SILENT = {
    "email": (
        "the SMTP sink saw no message while the database gained rows for {events} event(s); is the app's "
        "email backend pointed at it? (effects.smtp.listen's port in the service's EMAIL_PORT or SMTP_PORT, "
        "and an SMTP backend: pytest-django's test settings swap Django's for locmem) — no email was judged"
    ),
    "call": (
        "the outbound API sink saw no call while the database gained rows for {events} event(s); is the "
        "app's API base URL pointed at it (http://127.0.0.1:{{{{outbound_port}}}} in the variable it "
        "reads)? — no call was judged"
    ),
}
UNMATCHED = {
    "email": (
        "the SMTP sink received {heard} message(s), none naming an event of the run; effects.smtp.match "
        "({match!r}) is not what the app's emails say, so none was counted"
    ),
    "call": (
        "the outbound API sink received {heard} call(s), none naming an event of the run; check the "
        "routes' match, so calls are counted"
    ),
}


def sink_warnings(sinks: Sinks | None, trials: Sequence[Trial]) -> list[str]:
    """A sink that heard nothing while rows landed, or heard only what named no event."""
    if sinks is None:
        return []
    landed = {o.event_id for t in trials for o in t.observations if o.effects > 0}
    found = []
    for kind, sink in (("email", sinks.smtp), ("call", sinks.outbound)):
        if sink is None:
            continue
        records = sinks.ledger.records(kind)  # type: ignore[arg-type]
        heard = len(records) + sinks.ledger.dropped[kind]  # type: ignore[index]
        if heard == 0 and landed:
            found.append(SILENT[kind].format(events=len(landed)))
        elif heard and not any(r.events for r in records):
            match = str(sinks.smtp.config.match) if kind == "email" and sinks.smtp is not None else ""
            found.append(UNMATCHED[kind].format(heard=heard, match=match))
    return found


def run_warnings(notices: Sequence[str], sinks: Sinks | None, trials: Sequence[Trial]) -> list[str]:
    """Every warning of a run, each once, in the order they arose."""
    return list(dict.fromkeys([*notices, *sink_warnings(sinks, trials)]))
