"""The SMTP sink: aiosmtpd on loopback, where the consumer's mail settings point (``effects.smtp``).

Every message is accepted (``250``) and recorded — but one for an event whose effects the
lab fails on purpose (`Ledger.fail`, effect-failure) is refused with ``554`` — or, stalled,
answered nothing until that event's first attempt is answered and then ``451`` — and counts as
no email; a message counts for every event whose
``match`` (filled for that event: ``{{order_id}}``, ``{{event_id}}``, ``{{object_id}}``)
its headers or text name as a whole identifier, read as its reader reads them (every
transfer encoding, charset and part decoded: `reading.email_text`). A consumer that logs in (``AUTH PLAIN``/``LOGIN``, as
Django's backend does with ``EMAIL_HOST_USER``) is let in; its login and password are
remembered as secrets and never recorded. A message past ``SinkLimits.max_bytes`` is
refused by aiosmtpd (``552``: at ``MAIL FROM ... SIZE=``, or after it read and discarded the
rest), and recorded as ``capped`` with no event: its text is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Any, AnyStr

from acklab.evidence.clock import utcnow
from acklab.evidence.extras import require
from acklab.evidence.redaction import remember
from acklab.harness.errors import HarnessError
from acklab.harness.sinks.base import SinkKind
from acklab.harness.sinks.matching import MailMatch
from acklab.harness.sinks.reading import header_pairs, parsed, read_mail
from acklab.harness.sinks.records import Ledger, SinkRecord, digest, excerpt_of, now_mono, redacted_headers
from acklab.harness.specs.target import SmtpEffects, SmtpMatch

NAME = "smtp"
DEFAULT_MATCH = "{{order_id}}"
# effect-failure: what the server answers a message for an event whose effects it refuses.
REFUSED, REFUSAL = "refused", "554 5.3.0 Transaction failed: the mail system is not accepting messages"
# ... and for one it stalls: nothing until the event's first attempt is answered (or the cap), then
# a temporary failure, as a mail server that hung and gave up answers; the client may have given up first.
STALLED, STALL_END = "stalled", "451 4.4.2 Timeout: the mail system did not complete the transaction"
STALL_CAP_S = 120.0
STALL_POLL_S = 0.05


@dataclass(frozen=True)
class SmtpConfig:
    """``effects.smtp``: where the sink listens, and what ties a message to an event (a string, or
    ``to``/``subject``/``body`` patterns: `matching.MailMatch`)."""

    host: str
    port: int
    match: str | SmtpMatch = DEFAULT_MATCH


class _Handler:
    def __init__(self, config: SmtpConfig, ledger: Ledger) -> None:
        self.config, self.ledger = config, ledger
        self.rule = MailMatch.of(config.match)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        body: bytes = envelope.original_content or b""
        message = parsed(body)
        mail = read_mail(body, tuple(str(r) for r in envelope.rcpt_tos))
        events = self.ledger.matching_where(lambda keys: self.rule.matches(keys, mail))
        refused = self.ledger.refuses(events)
        stalled = refused and self.ledger.stalls(events)
        self.ledger.keep(
            SinkRecord(
                kind="email",
                sink=NAME,
                seq=self.ledger.next_seq(NAME),
                at=utcnow(),
                at_mono=now_mono(),
                events=events,
                headers=redacted_headers(header_pairs(message) if message is not None else ()),
                excerpt=excerpt_of(body),
                sha256=digest(body),
                size=len(body),
                capped=False,
                rows_at_arrival=self.ledger.rows_at(events),
                sender=str(envelope.mail_from or ""),
                recipients=tuple(str(r) for r in envelope.rcpt_tos),
                served=STALLED if stalled else REFUSED if refused else None,
            )
        )
        if stalled:
            deadline = time.monotonic() + STALL_CAP_S
            while self.ledger.stalls(events) and time.monotonic() < deadline:
                await asyncio.sleep(STALL_POLL_S)
            return STALL_END
        return REFUSAL if refused else "250 OK"

    def capped(self, envelope: Any) -> None:
        self.ledger.keep(
            SinkRecord(
                kind="email",
                sink=NAME,
                seq=self.ledger.next_seq(NAME),
                at=utcnow(),
                at_mono=now_mono(),
                events=(),
                headers={},
                excerpt="",
                sha256=digest(b""),
                size=self.ledger.limits.max_bytes,
                capped=True,
                sender=str(envelope.mail_from or "") if envelope is not None else None,
                recipients=tuple(str(r) for r in (envelope.rcpt_tos if envelope is not None else ())),
            )
        )


def _authenticate(server: Any, session: Any, envelope: Any, mechanism: str, auth_data: Any) -> Any:
    from aiosmtpd.smtp import AuthResult, LoginPassword

    if isinstance(auth_data, LoginPassword):
        remember(auth_data.login.decode("utf-8", "replace"), auth_data.password.decode("utf-8", "replace"))
    return AuthResult(success=True)


class SmtpSink:
    """aiosmtpd's threaded controller on ``host:port``; `start` returns once it accepts mail."""

    def __init__(self, config: SmtpConfig, ledger: Ledger) -> None:
        self.config, self.ledger = config, ledger
        self._controller: Any = None

    def start(self) -> None:
        require("sinks", "aiosmtpd", "effects.smtp (the SMTP sink)")
        from aiosmtpd.controller import Controller
        from aiosmtpd.smtp import SMTP

        # aiosmtpd warns on every AUTH that it sets its own deprecated Session.login_data: noise
        # on the lab's stderr for each email a consumer sends, about no code of ours or theirs.
        logging.getLogger("mail.log").setLevel(logging.ERROR)
        handler = _Handler(self.config, self.ledger)
        limit = self.ledger.limits.max_bytes

        class _CappingSMTP(SMTP):
            async def push(self, status: AnyStr) -> None:
                text = status.decode("ascii", "replace") if isinstance(status, bytes) else str(status)
                if text.startswith("552"):  # too much mail data, or a SIZE= past the limit
                    handler.capped(self.envelope)
                await super().push(status)

        class _Controller(Controller):
            # aiosmtpd notes a failed bind in its thread and lets start() wait out the whole
            # ready_timeout (5 s) before raising it: say a taken port at once instead.
            def _run(self, ready_event: Any) -> None:
                super()._run(ready_event)
                if self._thread_exception is not None:
                    ready_event.set()

            def _trigger_server(self) -> None:
                if self._thread_exception is not None:
                    raise self._thread_exception
                trigger: Any = super()._trigger_server  # aiosmtpd leaves it untyped
                trigger()

            def factory(self) -> Any:
                return _CappingSMTP(
                    handler,
                    data_size_limit=limit,
                    authenticator=_authenticate,
                    auth_require_tls=False,
                    hostname="acklab-sink",
                )

        self._controller = _Controller(handler, hostname=self.config.host, port=self.config.port)
        try:
            self._controller.start()
        except (OSError, RuntimeError, TimeoutError) as exc:  # aiosmtpd: bind or readiness failed
            controller, self._controller = self._controller, None
            with contextlib.suppress(Exception):  # its thread is gone; the loop it made is not
                controller.stop(no_assert=True)
            controller.loop.close()
            raise HarnessError(
                f"effects.smtp: the SMTP sink could not listen on {self.config.host}:{self.config.port} "
                f"({type(exc).__name__}: {exc}); is the port taken? use {{{{smtp_port}}}}"
            ) from exc

    def stop(self) -> None:
        if self._controller is not None:
            self._controller.stop()
            self._controller = None


def _config(section: SmtpEffects, host: str, port: int) -> SmtpConfig:
    MailMatch.of(section.match)  # a pattern that is not one: SpecError before anything listens
    return SmtpConfig(host, port, section.match)


SINK = SinkKind(
    name=NAME,
    order=10,
    record="email",
    config=_config,
    server=SmtpSink,
    verb="sent",
    what="emails",
    cost="; the customer sees every one",
    refusal="refused the email (554)",
    stalls=True,
    silent=(
        "the SMTP sink saw no message while the database gained rows for {events} event(s); is the app's "
        "email backend pointed at it? (effects.smtp.listen's port in the service's EMAIL_PORT or SMTP_PORT, "
        "and an SMTP backend: pytest-django's test settings swap Django's for locmem) — no email was judged"
    ),
    unmatched=(
        "the SMTP sink received {heard} message(s), none naming an event of the run; effects.smtp.match "
        "({match!r}) is not what the app's emails say, so none was counted"
    ),
)
