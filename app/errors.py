"""Errors of the webhook fixture: its one exception tree, every class in it.

Exception
├── FixtureError                 exit 4: root; ``exit_code`` follows the acklab exit-code contract
│   ├── ConfigError              exit 3: a setting has a bad value
│   └── DatabaseUnavailable      exit 4: the database cannot be opened or prepared
├── Rejection                    a delivery refused before the handler ran: an HTTP answer, not an error
└── VerificationFailed (signing) a signature did not verify (answered 401)

ValueError
└── SigningError (signing)       a secret the scheme cannot use (its shape is wrong)

The fixture must not import the lab, so exit codes are literal ints here.
"""

from __future__ import annotations

INVALID_INPUT = 3  # acklab exit code: invalid spec or input
LAB_ERROR = 4  # acklab exit code: the lab could not run (e.g. database missing)


class FixtureError(Exception):
    """Root of every error the fixture raises; carries the exit code a CLI should use."""

    exit_code: int = LAB_ERROR


class ConfigError(FixtureError):
    """A setting has a value the fixture cannot use."""

    exit_code = INVALID_INPUT


class DatabaseUnavailable(FixtureError):
    """The database URL is valid but the database cannot be opened or prepared."""

    exit_code = LAB_ERROR


class Rejection(Exception):
    """A delivery refused before the handler ran: answered with ``status_code`` and a JSON body.

    ``error`` is a stable machine-readable code; ``detail`` says what was wrong and how to
    fix it; ``fields`` lists ``{"field", "message"}`` pairs for schema violations.
    """

    def __init__(
        self,
        status_code: int,
        error: str,
        detail: str,
        *,
        event_id: str | None = None,
        fields: list[dict[str, str]] | None = None,
    ) -> None:
        super().__init__(f"{status_code} {error}: {detail}")
        self.status_code = status_code
        self.error = error
        self.detail = detail
        self.event_id = event_id
        self.fields = fields or []

    def body(self) -> dict[str, object]:
        """The JSON body of the answer (shape of ``app.schemas.ErrorBody``)."""
        return {"error": self.error, "detail": self.detail, "event_id": self.event_id, "fields": self.fields}
