"""Where GitLab is and how to authenticate, without python-gitlab: what `acklab evidence` and the
repair flow need before they talk to GitLab (`acklab.evidence.gitlab_source` talks to it; the
``gitlab`` extra)."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from acklab.evidence.redaction import remember

TOKEN_HEADERS = ("PRIVATE-TOKEN", "JOB-TOKEN", "Authorization")


def strip_credentials(url: str) -> tuple[str, list[str]]:
    """`url` without ``user:password@`` (and the values that were there, to be redacted)."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, []
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port else "")
    removed = [v for v in (parts.password, parts.username) if v]
    return urlunsplit(parts._replace(netloc=netloc)), removed


def origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    default = {"http": 80, "https": 443}.get(parts.scheme)
    return parts.scheme, (parts.hostname or "").lower(), parts.port or default


@dataclass(frozen=True)
class GitLabAccess:
    """Where GitLab is and how to authenticate: a private (personal, project) token or a CI job token."""

    url: str
    token: str
    from_variable: str  # the variable the token came from, for messages (never the value)
    is_job_token: bool = False

    def __post_init__(self) -> None:
        # A password in the URL is neither used nor recorded; the token is redacted everywhere.
        url, removed = strip_credentials(self.url)
        object.__setattr__(self, "url", url)
        remember(self.token, *removed)

    def __repr__(self) -> str:  # keep the token out of tracebacks and logs
        return f"GitLabAccess(url={self.url!r}, token=<from {self.from_variable}>, job_token={self.is_job_token})"
