"""Real-socket servers for the slow tests: uvicorn in a thread, or `python -m acklab.app.cli` in a subprocess."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import uvicorn
from fastapi import FastAPI

STOP_S = 60  # a handler still running its request on a loaded machine


@contextmanager
def serve_in_thread(app: FastAPI) -> Iterator[str]:
    """Serve ``app`` on a free 127.0.0.1 port for the duration of the block; yield its base URL."""
    # IPPROTO_TCP so asyncio turns Nagle off on accepted sockets (else ~40 ms per response).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start within 10 s")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        # uvicorn stops once every request it took has run to its end (one its client gave up on
        # too): a test may read what they committed after the block.
        server.should_exit = True
        thread.join(STOP_S)
        sock.close()
    if thread.is_alive():
        raise RuntimeError(f"uvicorn did not stop within {STOP_S} s: a request it took is still running")


@dataclass
class Served:
    """A fixture served by a child process: where it listens, the process, and its output so far."""

    url: str
    process: subprocess.Popen[str]
    log: list[str] = field(default_factory=list)


@contextmanager
def serve_in_subprocess(*args: str, env: dict[str, str] | None = None) -> Iterator[Served]:
    """Run ``python -m acklab.app.cli fixture --port 0 ARGS``; stop it (if still alive) when the block ends."""
    process = subprocess.Popen(
        [sys.executable, "-m", "acklab.app.cli", "fixture", "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # uvicorn's access log goes to stdout, our messages to stderr
        text=True,
        env={**os.environ, **(env or {})} if env is not None else None,
    )
    assert process.stdout is not None
    log: list[str] = []
    drain = threading.Thread(target=lambda: log.extend(process.stdout or ()), daemon=True)
    try:
        for line in process.stdout:  # the command says where it listens, once bound
            log.append(line)
            found = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
            if found:
                break
        else:
            raise RuntimeError(f"the fixture exited with {process.wait()} before listening: {''.join(log)}")
        drain.start()  # keep reading, so the child never blocks on a full pipe
        yield Served(found.group(1), process, log)
    finally:
        if process.poll() is None:
            process.terminate()
        process.wait(10)
        if drain.ident is not None:  # started
            drain.join(10)
        process.stdout.close()
