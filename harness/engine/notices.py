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
from acklab.harness.sinks import SINKS, Sinks


def sink_warnings(sinks: Sinks | None, trials: Sequence[Trial]) -> list[str]:
    """A sink that heard nothing while rows landed, or heard only what named no event (each sink's
    own words: `harness.sinks.SinkKind.silent`, ``unmatched``)."""
    if sinks is None:
        return []
    landed = {o.event_id for t in trials for o in t.observations if o.effects > 0}
    found = []
    for name, server in sinks.servers.items():
        kind = SINKS[name]
        records = sinks.ledger.records(name)
        heard = len(records) + sinks.ledger.dropped.get(name, 0)
        if heard == 0 and landed and kind.silent:
            found.append(kind.silent.format(events=len(landed)))
        elif heard and not any(r.events for r in records) and kind.unmatched:
            match = str(getattr(server.config, "match", ""))
            found.append(kind.unmatched.format(heard=heard, match=match))
    return found


def run_warnings(notices: Sequence[str], sinks: Sinks | None, trials: Sequence[Trial]) -> list[str]:
    """Every warning of a run, each once, in the order they arose."""
    return list(dict.fromkeys([*notices, *sink_warnings(sinks, trials)]))
