"""The one way the lab picks a port: ask the kernel for a free one on a loopback address.

Every service the lab starts (the fixture, a spec's `command:`, a private PostgreSQL, the
sinks) listens on a port picked here. The socket is closed before the port is handed out,
so a caller that must not lose it to another process binds it at once (or retries).
"""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on `host` that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
