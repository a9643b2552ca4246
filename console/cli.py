"""`acklab console` (the live, read-only console) and `acklab pages` (the static snapshot)."""

from __future__ import annotations

import ipaddress
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
    uvicorn.run(app, host=host, port=port, log_level="warning")
    return 0


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
def pages(evidence: Path, out: Path) -> int:
    """Build the static GitLab Pages snapshot of the console: relative links, dated banner, raw copies."""
    from .export import build_snapshot

    result = build_snapshot(evidence, out)
    click.echo(
        f"acklab pages: {result.pages} pages and {result.raw_files} raw files in {result.seconds:.1f} s; "
        f"open {out / 'index.html'}",
        err=True,
    )
    return 0
