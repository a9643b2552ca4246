"""The lab's bridge into a served sandbox's network namespace: how a launch is wrapped in it.

Served code runs with ``--unshare-net``: its loopback is its own, the host's is out of reach.
The lab still attacks it over a socket and it still needs the lab's database server and sinks,
so a launch is wrapped twice (`bridge_script` is the program, run from its source text):

    python -I -S -c BRIDGE outer CONFIG -- bwrap ... setpriv ... python -I -S -c BRIDGE inner CONFIG -- ARGV

The outer half, the lab's, listens on the host's loopback on each port the service serves once
it listens inside, and connects to the ports the launch may reach (`Bridged.reaches`) when the
inside asks; sockets cross the boundary only that way (passed over a socket pair). It is the
process group the lab kills and restarts, so a killed service's port is closed on the host too.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path

from acklab.harness.procs.confinement import Bridged

SCRIPT = Path(__file__).with_name("bridge_script.py")


@functools.cache
def source() -> str:
    """The bridge program's text (run with ``-c``: nothing is imported from a checkout or the lab)."""
    return SCRIPT.read_text(encoding="utf-8")


def _half(role: str, config: dict[str, object], argv: list[str]) -> list[str]:
    # -I: no environment, no working directory, no user site; -S: no site (nothing to import).
    return [sys.executable, "-I", "-S", "-c", source(), role, json.dumps(config), "--", *argv]


def _ports(network: Bridged) -> dict[str, object]:
    return {"serves": sorted(set(network.serves)), "reaches": sorted(set(network.reaches))}


def inside(network: Bridged, argv: list[str]) -> list[str]:
    """`argv` started by the inner half (run inside the namespace, as the sandbox's user)."""
    return _half("inner", _ports(network), argv)


def outside(network: Bridged, argv: list[str]) -> list[str]:
    """`argv` (bubblewrap and all it holds) started by the outer half (the lab's, on the host), which
    ends it when this process — the lab, which starts the launch — is gone."""
    return _half("outer", {**_ports(network), "parent": os.getpid()}, argv)
