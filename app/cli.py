"""``acklab serve fixture``: serve the webhook fixture over HTTP with uvicorn.

Exit codes follow the acklab contract (literal ints: ``app`` imports nothing of the lab):
0 stopped normally, 2 usage error, 3 invalid input (e.g. a malformed secret), 4 the
database cannot be opened or the address cannot be bound.
"""

from __future__ import annotations

import base64
import secrets
import socket
import sys
from typing import Any

import click
import uvicorn
from pydantic import SecretStr, ValidationError
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from acklab.app.errors import INVALID_INPUT, LAB_ERROR, FixtureError
from acklab.app.main import create_app
from acklab.app.schemes import SCHEMES
from acklab.app.settings import Settings

OK = 0
USAGE = 2


def new_secret() -> str:
    """A fresh Standard Webhooks secret (32 random bytes); usable verbatim by every scheme."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode("ascii")


def _say(message: str) -> None:
    click.echo(f"acklab serve: {message}", err=True)


def _describe(error: Any) -> str:
    message = str(error["msg"]).removeprefix("Value error, ")
    field = ".".join(str(part) for part in error["loc"])
    # Model-level errors carry every setting as input, the secret included: never echo those.
    if not field or field in ("secret", "ACKLAB_WEBHOOK_SECRET"):
        return message
    return f"{field}: {message} (got {error.get('input')!r})"


def _safe_url(url: str) -> str:
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return repr(url)


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on accepted sockets whose proto
    # says TCP; with proto 0 each response waits out the client's delayed ACK (~40 ms).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        # Listening before "listening on" is said: a client that connects at once queues in
        # the backlog until uvicorn accepts, instead of being refused while it starts.
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    return sock


@click.command("serve", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("target", type=click.Choice(["fixture"]), metavar="fixture")
@click.option(
    "--handler", type=click.Choice(["live", "unsafe"]), help="live (default) or the unsafe reference."
)
@click.option(
    "--db", "database_url", metavar="URL", help="sqlite:///path.db (default) or postgresql+psycopg://..."
)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option(
    "--port", type=click.IntRange(0, 65535), default=8000, show_default=True, help="0 picks a free port."
)
@click.option(
    "--secret", metavar="SECRET", help="Default: $ACKLAB_WEBHOOK_SECRET, else a fresh one (printed once)."
)
@click.option("--scheme", type=click.Choice(sorted(SCHEMES)))
@click.option(
    "--processing-delay-ms", type=click.IntRange(0, 600_000), help="Lab only: work inside the transaction."
)
@click.option(
    "--crash-after-commit", is_flag=True, default=None, help="Lab only: SIGKILL itself after each commit."
)
@click.option("--log-level", type=click.Choice(["critical", "error", "warning", "info"]), default="info")
def serve(target: str, host: str, port: int, log_level: str, **options: Any) -> int:
    """Serve the webhook fixture (POST /webhooks/orders) until interrupted."""
    overrides = {name: value for name, value in options.items() if value is not None}
    try:
        settings = Settings(**overrides)
    except ValidationError as exc:
        for error in exc.errors(include_url=False):
            _say(f"invalid setting: {_describe(error)}")
        return INVALID_INPUT
    if settings.secret is None:
        secret = new_secret()
        settings = settings.model_copy(update={"secret": SecretStr(secret)})
        _say(
            f"no secret given: generated {secret} (shown once; pass it as ACKLAB_WEBHOOK_SECRET to reuse it)"
        )
    try:
        app = create_app(settings)
    except FixtureError as exc:
        _say(str(exc))
        return exc.exit_code
    try:
        sock = _bind(host, port)
    except OSError as exc:
        _say(f"cannot listen on {host}:{port}: {exc.strerror}; pick another address with --host/--port")
        return LAB_ERROR
    bound_port = sock.getsockname()[1]
    _say(
        f"{target} listening on http://{host}:{bound_port} (handler={settings.handler}, "
        f"scheme={settings.scheme}, database={_safe_url(settings.database_url)})"
    )
    # The access log shows request lines and status codes only; headers (and so signatures
    # and tokens) are never logged.
    config = uvicorn.Config(app, log_level=log_level, access_log=log_level == "info", server_header=False)
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
    return OK


def main(argv: list[str] | None = None) -> None:
    """``python -m acklab.app.cli fixture ...``: the same command without the acklab dispatcher."""
    try:
        rc = serve.main(args=argv, prog_name="acklab serve", standalone_mode=False)
    except click.UsageError as exc:
        exc.show()
        sys.exit(USAGE)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.Abort:
        sys.exit(OK)
    sys.exit(rc if isinstance(rc, int) else OK)


if __name__ == "__main__":
    main()
