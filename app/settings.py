"""Settings of the webhook fixture, read from ``ACKLAB_*`` environment variables or given directly."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from acklab.app.schemes import SCHEMES
from acklab.app.signing import SigningError

HandlerName = Literal["live", "unsafe"]

DEFAULT_DATABASE_URL = "sqlite:///./acklab-fixture.db"


class Settings(BaseSettings):
    """How one fixture instance runs. Every field may come from ``ACKLAB_<FIELD>``.

    The secret is the one exception: it is read from ``ACKLAB_WEBHOOK_SECRET`` and kept in a
    ``SecretStr`` so that it never shows up in a repr, a log line or a traceback.
    """

    model_config = SettingsConfigDict(
        env_prefix="ACKLAB_", env_ignore_empty=True, extra="ignore", frozen=True, validate_by_name=True
    )

    database_url: str = Field(
        default=DEFAULT_DATABASE_URL,
        description="SQLAlchemy URL: sqlite:///path.db (default) or postgresql+psycopg://user@host/db.",
    )
    handler: HandlerName = Field(
        default="live", description="live -> app.webhooks (receipt-based); unsafe -> app.unsafe."
    )
    scheme: str = Field(
        default="standard", description="Which provider's signature scheme to verify (one of app.schemes)."
    )
    secret: SecretStr | None = Field(
        default=None,
        validation_alias="ACKLAB_WEBHOOK_SECRET",
        description="Signing secret; 'whsec_<base64>' for standard (and GitLab signing tokens).",
    )
    max_body_bytes: int = Field(default=262_144, ge=1, description="Larger bodies are answered 413.")
    tolerance_s: int = Field(
        default=300,
        ge=1,
        description="Signed timestamps further than this from now, either way, are answered 401.",
    )
    processing_delay_ms: int = Field(
        default=0,
        ge=0,
        le=600_000,
        description=(
            "Lab only: simulated work inside the handler's transaction, before commit, on every "
            "delivery that reaches the handler (replays too). The timeout-overlap experiment uses it "
            "to make a sender time out while the handler still works."
        ),
    )
    smtp_port: int | None = Field(
        default=None,
        ge=1,
        le=65535,
        description="Where fulfilments are emailed (SMTP on 127.0.0.1); unset: no email is sent.",
    )
    warehouse_url: str | None = Field(
        default=None,
        description="The warehouse API asked to ship each fulfilment (http://127.0.0.1:PORT); unset: no call.",
    )
    crash_after_commit: bool = Field(
        default=False,
        description=(
            "Lab only: after the handler's transaction commits and before the response is sent, "
            "the process SIGKILLs itself — the crash-between-commit-and-response experiment."
        ),
    )

    @field_validator("scheme")
    @classmethod
    def _known_scheme(cls, value: str) -> str:
        if value not in SCHEMES:
            raise ValueError(f"got {value!r}; the fixture verifies one of {', '.join(sorted(SCHEMES))}")
        return value

    @model_validator(mode="after")
    def _secret_fits_scheme(self) -> Settings:
        if self.secret is None:
            return self
        value = self.secret.get_secret_value()
        if not value or value != value.strip():
            raise ValueError(
                "the webhook secret is empty or has surrounding whitespace; set it without spaces"
            )
        check = SCHEMES[self.scheme].check_secret
        if check is not None:
            try:
                check(value)
            except SigningError as exc:
                raise ValueError(f"{exc}; generate one with `acklab serve fixture` (it prints one)") from None
        return self
