"""``effects.smtp.match``: what ties a message to an event.

A string (the default ``{{order_id}}``) is looked for anywhere the reader reads — headers and
every decoded part — as whole identifiers (`reading.Text`). An object narrows it to where the
event shows in a real message, every field given must hold:

* ``to``: a recipient (envelope or ``To``/``Cc``), the whole address, case-insensitive;
* ``subject``: searched in the decoded ``Subject``;
* ``body``: searched in the decoded text parts;
* ``text``: the string form's rule, anywhere.

``to``, ``subject`` and ``body`` are regular expressions whose placeholders (``{{order_id}}``,
``{{event_id}}``, ``{{object_id}}``) are filled with the event's values, escaped: ``"Receipt for
order {{order_id}}$"`` matches that subject and no other order's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from acklab.harness.errors import SpecError
from acklab.harness.sinks.reading import ReadMail
from acklab.harness.sinks.records import EventKeys
from acklab.harness.specs.target import SmtpMatch

_PLACEHOLDER = re.compile(r"\{\{\s*([a-z_]+)\s*\}\}")


def _pattern(template: str, keys: EventKeys) -> str:
    values = {"event_id": keys.event_id, "order_id": keys.order_id, "object_id": keys.object_id}
    parts = _PLACEHOLDER.split(template)
    # split() alternates the user's regex and placeholder names
    return "".join(
        p if i % 2 == 0 else re.escape(values.get(p, "{{" + p + "}}")) for i, p in enumerate(parts)
    )


@dataclass(frozen=True)
class MailMatch:
    """One ``effects.smtp.match`` (see the module)."""

    text: str | None = None
    to: str | None = None
    subject: str | None = None
    body: str | None = None

    @classmethod
    def of(cls, rule: str | SmtpMatch) -> MailMatch:
        """The match of a spec's ``effects.smtp.match``; SpecError naming a pattern that is not one."""
        if isinstance(rule, str):
            return cls(text=rule)
        match = cls(text=rule.text, to=rule.to, subject=rule.subject, body=rule.body)
        stand_in = EventKeys("evt_check", "ord_check", "obj_check")
        for name in ("to", "subject", "body"):
            value = getattr(match, name)
            if value is None:
                continue
            try:
                re.compile(_pattern(value, stand_in))
            except re.error as exc:
                raise SpecError(
                    f"effects.smtp.match.{name}: got {value!r}, which is not a regular expression ({exc}); "
                    r"escape what is literal (\. \( \+)"
                ) from exc
        return match

    def matches(self, keys: EventKeys, mail: ReadMail) -> bool:
        if self.text is not None and not mail.text.names(keys.fill(self.text)):
            return False
        if self.to is not None:
            wanted = re.compile(_pattern(self.to, keys), re.IGNORECASE)
            if not any(wanted.fullmatch(r) for r in mail.recipients):
                return False
        if self.subject is not None and re.search(_pattern(self.subject, keys), mail.subject) is None:
            return False
        return self.body is None or re.search(_pattern(self.body, keys), mail.body) is not None
