"""`acklab console` (the live, read-only console) and `acklab pages` (the static snapshot)."""

from __future__ import annotations

import errno
import ipaddress
import socket
from pathlib import Path

import click

EVIDENCE_HELP = "evidence directory: every bundle found under it is shown"


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@click.command()
@click.option(
    "--evidence", type=click.Path(path_type=Path), default=Path("out"), show_default=True, help=EVIDENCE_HELP
)
@click.option("--host", default="127.0.0.1", show_default=True, help="interface to listen on")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True)
@click.option(
    "--allow-host",
    "allow_hosts",
    multiple=True,
    metavar="NAME",
    help="Also answer requests for this host name (repeatable; e.g. behind a reverse proxy). "
    "By default only the loopback and --host are answered: a page elsewhere cannot read the "
    "evidence through DNS rebinding.",
)
def console(evidence: Path, host: str, port: int, allow_hosts: tuple[str, ...]) -> int:
    """Serve the read-only evidence console (GET and HEAD only; nothing can be changed)."""
    import uvicorn

    from .app import create_app
    from .security import served_hosts

    hosts = served_hosts(host, allow_hosts)
    app = create_app(evidence, hosts=hosts)
    listener = _listen(host, port)
    port = listener.getsockname()[1]  # --port 0: the one the system picked
    if not _is_loopback(host):
        click.echo(
            f"acklab console: listening on {host}, which is not loopback: anyone who reaches it can read the evidence",
            err=True,
        )
    click.echo(
        f"acklab console: http://{host}:{port}/ over {evidence} (read-only; Ctrl-C stops it); "
        f"answers to {', '.join(sorted(hosts))} (--allow-host NAME for another name)",
        err=True,
    )
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    server.run(sockets=[listener])
    return 0


def _listen(host: str, port: int) -> socket.socket:
    """The console's listening socket, bound before anything is served, so a busy port is
    an error naming the fix (exit 5) instead of a server that logs and stops."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        from .errors import PortBusy

        if exc.errno == errno.EADDRINUSE:
            raise PortBusy(
                f"port {port} on {host} is already in use (another console or server is listening there); "
                f"pass --port with a free one, e.g. --port {port + 1 if port < 65535 else 8001}, "
                "or --port 0 to let the system pick"
            ) from exc
        raise PortBusy(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}; pass another --host or --port"
        ) from exc
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


@click.command()
@click.option(
    "--evidence", type=click.Path(path_type=Path), default=Path("out"), show_default=True, help=EVIDENCE_HELP
)
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=Path("public"),
    show_default=True,
    help="directory the static site is written to (GitLab Pages publishes public/)",
)
@click.option(
    "--docs",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="a built documentation site (e.g. `mkdocs build`'s site/) to publish beside the snapshot, under docs/",
)
def pages(evidence: Path, out: Path, docs: Path | None) -> int:
    """Build the static GitLab Pages snapshot of the console: relative links, dated banner, raw copies."""
    from .export import build_snapshot

    result = build_snapshot(evidence, out, docs=docs)
    click.echo(
        f"acklab pages: {result.pages} pages and {result.raw_files} raw files in {result.seconds:.1f} s; "
        f"open {out / 'index.html'}",
        err=True,
    )
    return 0
