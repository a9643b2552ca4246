"""What the sinks heard while `acklab init` delivered its event, its duplicate and a conflicting body,
and the spec's ``effects.smtp`` / ``effects.outbound`` that count it.

The SMTP sink ties a message to an event by what the message names (`harness.sinks.reading`:
decoded as its reader decodes it, whole identifiers only). init registers its event twice in the
sink's ledger: as itself, found by its object's id (``{{order_id}}``: what a receipt names), and
under a marker id, found by the event's own id — so one message says which of the two it names,
and the spec's ``match`` is the one it does. A call is read the same way (its path and body as the
downstream API reads them), and its route is the path with those ids made placeholders.

What the sinks did not hear is said too: a message naming neither id cannot be tied to an event,
and a service init did not start (``--url``) was never pointed at the sinks at all.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from acklab.harness.sinks import Sinks
from acklab.harness.sinks import outbound as outbound_sink
from acklab.harness.sinks import smtp as smtp_sink
from acklab.harness.sinks.reading import call_text
from acklab.harness.sinks.records import EventKeys, SinkRecord
from acklab.harness.specs.target import OutboundAnswer, OutboundEffects, OutboundRoute, SmtpEffects

PHASES = ("event", "duplicate", "conflict")
EVENT_MARK = "#event"  # the marker id: a message matched under it names the event's own id
IDEMPOTENCY = re.compile(r"idempot", re.IGNORECASE)
# what init's sink and the spec's routes answer
ANSWER = OutboundAnswer(status=200, json={"id": "acklab_{{seq}}"})


def listen_for(sinks: Sinks, event_id: str, object_id: str) -> None:
    """Register the discovery event so a record says which of its ids it names (see the module)."""
    sinks.ledger.register(EventKeys(event_id, object_id, object_id))
    sinks.ledger.register(EventKeys(event_id + EVENT_MARK, event_id, event_id))


@dataclass
class Heard:
    """The sinks' records after each delivery of discovery."""

    event_id: str
    object_id: str
    emails: dict[str, list[SinkRecord]] = field(default_factory=dict)
    calls: dict[str, list[SinkRecord]] = field(default_factory=dict)
    _seen: tuple[int, int] = (0, 0)
    _phase: str | None = None

    def mark(self, sinks: Sinks, phase: str) -> None:
        """What arrived since the last mark belongs to the delivery before it."""
        emails, calls = sinks.ledger.records(smtp_sink.NAME), sinks.ledger.records(outbound_sink.NAME)
        if self._phase is not None:
            self.emails[self._phase] = emails[self._seen[0] :]
            self.calls[self._phase] = [c for c in calls[self._seen[1] :] if _effect(c)]
        self._seen, self._phase = (len(emails), len(calls)), (phase if phase in PHASES else None)

    def names(self, record: SinkRecord) -> tuple[bool, bool]:
        """(names the object's id, names the event's id)."""
        if record.kind == "email":
            return self.event_id in record.events, self.event_id + EVENT_MARK in record.events
        text = call_text(record.path or "", "", record.excerpt.encode())
        return text.names(self.object_id), text.names(self.event_id)

    def smtp(self, listen: str, *, object_match: str = "{{order_id}}") -> tuple[SmtpEffects | None, int]:
        """``effects.smtp`` and ``expect.max_emails`` (None, 0: no email named the event).
        `object_match`: how the spec names the event's object (``pi_{{event_id}}`` once init made
        the object the event's own)."""
        first = self.emails.get("event", [])
        named = [self.names(r) for r in first]
        if any(by_object for by_object, _ in named):
            match = object_match
        elif any(by_event for _, by_event in named):
            match = "{{event_id}}"
        else:
            return None, 0
        return SmtpEffects(listen=listen, match=match), sum(1 for o, e in named if o or e)

    def outbound(
        self, listen: str, *, object_match: str = "{{order_id}}"
    ) -> tuple[OutboundEffects | None, int]:
        """``effects.outbound`` and ``expect.max_calls`` (None, 0: no call named the event)."""
        routes: dict[tuple[str, str], OutboundRoute] = {}
        keys: set[str] = set()
        counted = 0
        for record in self.calls.get("event", []):
            by_object, by_event = self.names(record)
            if not (by_object or by_event):
                continue
            counted += 1
            path = (
                (record.path or "/")
                .replace(self.object_id, object_match)
                .replace(self.event_id, "{{event_id}}")
            )
            method = record.method or "POST"
            routes.setdefault(
                (method, path),
                OutboundRoute(
                    method=method,
                    path=path,
                    match=object_match if by_object else "{{event_id}}",
                    respond=ANSWER,
                ),
            )
            keys |= {name for name in record.headers if IDEMPOTENCY.search(name)}
        if not routes:
            return None, 0
        header = sorted(keys)[0] if keys else None  # None is left out of the spec written
        return OutboundEffects(
            listen=listen, idempotency_header=header, routes=tuple(routes.values())
        ), counted

    def lines(self) -> list[str]:
        """What the sinks heard, for the terminal and the spec's header."""
        lines = []
        for label, records in (("email", self.emails), ("call", self.calls)):
            for phase in PHASES:
                found = records.get(phase, [])
                if not found:
                    continue
                named = [self.names(r) for r in found]
                which = sorted({"its object's id" if o else "its id" for o, e in named if o or e})
                what = f"naming {' and '.join(which)}" if which else "naming neither the event nor its object"
                shown = ", ".join(_shown(r) for r in found[:3])
                lines.append(f"after the {phase}: {len(found)} {label}(s) {what}: {shown}")
        return lines

    def blind_spots(self) -> list[str]:
        """What the sinks heard but the spec cannot count: it names no id of the event."""
        found = []
        for label, records in (("email", self.emails), ("call", self.calls)):
            unnamed = [r for r in records.get("event", []) if not any(self.names(r))]
            if unnamed:
                found.append(
                    f"{len(unnamed)} {label}(s) after the event named neither its id nor its object's, so the "
                    f"spec cannot tie them to an event; add effects.{'smtp' if label == 'email' else 'outbound'} "
                    "with a match that your messages carry (docs/sinks.md)"
                )
        return found


def _effect(record: SinkRecord) -> bool:
    return (record.method or "").upper() not in ("GET", "HEAD", "OPTIONS")


def _shown(record: SinkRecord) -> str:
    if record.kind == "email":
        subject = next((v for k, v in record.headers.items() if k.lower() == "subject"), "")
        return f"to {', '.join(record.recipients) or '?'} {subject[:80]!r}"
    return f"{record.method} {record.path}"


def unseen(sources: Sequence[str]) -> list[str]:
    """What init could not see at all, and how to add it (a service it did not start)."""
    return [
        f"init did not start the service, so it could not point its {source} at the lab's sinks; if it "
        f"sends {source}, add effects.{'smtp' if source == 'emails' else 'outbound'} and point the service "
        "at it (docs/sinks.md)"
        for source in sources
    ]
