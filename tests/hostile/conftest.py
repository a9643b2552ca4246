"""Hostile inputs: generators of bad files, an in-process `acklab`, and small evidence to attack.

Every big input is generated lazily and written in pieces, so the suite never holds one in
memory; the ones measured for memory and time live in ``bench/hostile_inputs.py``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from acklab.cli import main
from tests.evidence.factories import write_run_bundle


class Acklab:
    """The real `acklab` entry point in-process: (exit code, stdout, stderr, seconds)."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self.capsys = capsys

    def __call__(self, *argv: object) -> tuple[int, str, str]:
        self.capsys.readouterr()
        started = time.monotonic()
        with pytest.raises(SystemExit) as info:
            main([str(a) for a in argv])
        self.seconds = time.monotonic() - started
        out, err = self.capsys.readouterr()
        return int(info.value.code or 0), out, err


@pytest.fixture
def acklab(capsys: pytest.CaptureFixture[str]) -> Acklab:
    return Acklab(capsys)


def nested_json(depth: int, *, key: str = "a") -> str:
    """An object nested `depth` levels deep (what turned into RecursionError before)."""
    return f'{{"{key}": ' * depth + "1" + "}" * depth


def nested_yaml(depth: int) -> str:
    """A flow sequence nested `depth` levels deep."""
    return "[" * depth + "1" + "]" * depth


def billion_laughs(levels: int = 9, width: int = 9) -> str:
    """Anchors nine deep, each nine aliases of the one before: 9^9 values once expanded."""
    lines = ['lol0: &lol0 ["lol"]']
    for n in range(1, levels + 1):
        lines.append(f"lol{n}: &lol{n} [{', '.join([f'*lol{n - 1}'] * width)}]")
    return "\n".join(lines) + "\n"


def target_spec(
    *, event: str = '{id: "{{event_id}}", type: order.paid}', extra: str = "", before: str = ""
) -> str:
    """A target spec whose `event:` (and any text before or after) the caller chooses."""
    return (
        before + "apiVersion: acklab/v1\nkind: target\nname: hostile\n"
        "endpoint: http://127.0.0.1:9/hooks\nsigning: {scheme: none}\n"
        f"event: {event}\n"
        'effects: {http: {url: "http://127.0.0.1:9/effects/{{event_id}}", json_path: count}}\n'
        "expect: {max_effects: 1}\n" + extra
    )


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def evidence(tmp_path: Path) -> Path:
    """An evidence directory with two small run bundles (r1 fails lost-ack, r2 passes)."""
    out = tmp_path / "out"
    write_run_bundle(out / "r1", "r1", {"lost-ack": [(0, "fail")]})
    write_run_bundle(out / "r2", "r2", {"lost-ack": [(0, "pass")]})
    return out


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


Writer = Callable[[Path, str | bytes], Path]
