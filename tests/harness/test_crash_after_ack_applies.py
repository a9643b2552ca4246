"""crash-after-ack is judged only where it means something: skipped (with its reason) on a
consumer that commits before it answers — the fixture — and refused, naming what is missing,
on an answers-first spec the lab cannot kill and restart (no `command:`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SPEC = """\
apiVersion: acklab/v1
kind: target
name: shop
endpoint: http://127.0.0.1:9000/webhooks/orders
signing: {scheme: none}
event: {id: "{{event_id}}", type: order.paid, data: {order_id: "{{order_id}}", amount_cents: 1200}}
effects:
  sql: {url: "sqlite:///DB", count: "SELECT count(*) FROM fulfillments WHERE event_id = :event_id"}
expect: {max_effects: 1, effects_within_s: 0.5}
"""


def plan(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    argv = [str(Path(sys.executable).with_name("acklab")), "plan", "--experiment", "crash-after-ack", *args]
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def test_on_the_fixture_it_is_listed_skipped_pointing_at_crash_after_commit(tmp_path: Path) -> None:
    done = plan("--target", "fixture:unsafe", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    [skipped] = json.loads(done.stdout)["skipped"]
    assert skipped["name"] == "crash-after-ack"
    assert "crash-after-commit is its strike" in skipped["reason"]


def test_on_an_answers_first_spec_without_command_it_is_refused_naming_command(tmp_path: Path) -> None:
    spec = tmp_path / "shop.target.yaml"
    spec.write_text(SPEC.replace("DB", str(tmp_path / "shop.db")), encoding="utf-8")
    done = plan("--target", str(spec), cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    assert "needs a service the lab starts, kills and restarts" in done.stderr
    assert "command:" in done.stderr
