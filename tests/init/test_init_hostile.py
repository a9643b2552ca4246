"""`acklab init` against a hostile service (`tests.init.ledger_shop`): the names its database
gives cannot write into the spec, and what it reads of the database and the answers is bounded."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from acklab.harness.errors import HarnessError
from acklab.harness.init.examples import example
from acklab.harness.init.scaffold import spec_text
from acklab.harness.specs.target import TargetSpec, read_target
from tests.init.ledger_shop import Shop, big_table
from tests.init.test_init_input import SECRET, acklab

ROOT = Path(__file__).resolve().parents[2]
# A tenant named its audit table; init once wrote it into the spec's comment header as it was.
HOSTILE = "audit\ncommand: {argv: [touch, PWNED]}\n#"
INIT = ["--provider", "standard", "--secret-env", "SHOP_WEBHOOK_SECRET", "--name", "shop", "--yes",
        "--wait", "3"]  # fmt: skip


@pytest.mark.slow
def test_a_table_name_cannot_write_into_the_spec_or_the_terminal(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SHOP_WEBHOOK_SECRET", SECRET)
    db = tmp_path / "shop.db"
    with Shop(db, SECRET, audit_table=HOSTILE).serving() as shop:
        assert acklab("init", "--url", shop.url, "--db", f"sqlite:///{db}", *INIT) == 0
    err = capsys.readouterr().err
    assert HOSTILE not in err
    assert "audit\\ncommand: {argv: [touch, PWNED]}\\n#" in err  # shown, escaped
    spec_path = tmp_path / "acklab" / "shop.target.yaml"
    text = spec_path.read_text()
    spec = yaml.safe_load(text)
    assert "command" not in spec
    assert all(line.startswith("#") for line in text.split("apiVersion:", 1)[0].splitlines())
    assert spec["effects"]["sql"]["count"] == "SELECT count(*) FROM orders WHERE event_id = :event_id"
    assert acklab("validate", str(spec_path)) == 0
    assert not (tmp_path / "PWNED").exists()


# Run in a process of its own, which reports the most memory it ever held.
MEASURED = """
import atexit, resource, sys
from acklab.cli import main
atexit.register(lambda: print("maxrss_kib", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr))
main(sys.argv[1:])
"""


@pytest.mark.slow
def test_init_holds_a_bounded_part_of_a_large_database_and_a_large_answer(tmp_path):
    db = tmp_path / "shop.db"
    big_table(db, rows=4000, row_bytes=50_000)  # 200 MB of attachments
    assert db.stat().st_size > 200_000_000
    env = {"PATH": str(Path(sys.executable).parent), "PYTHONPATH": str(ROOT), "SHOP_WEBHOOK_SECRET": SECRET}
    with Shop(db, SECRET, audit_table="audit", answer_bytes=300 << 20).serving() as shop:
        done = subprocess.run(
            [sys.executable, "-c", MEASURED, "init", "--url", shop.url, "--db", f"sqlite:///{db}", *INIT],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "after the event: orders: 0 -> 1 rows (+1)" in done.stderr
    assert "attachments" not in done.stderr  # unchanged: the large table's blobs compared by digest
    maxrss_mib = int(done.stderr.rsplit("maxrss_kib", 1)[1].split()[0]) / 1024
    # init's own interpreter and libraries take ~90 MiB alone; it held 1.0 GB (database) and 2.4 GB
    # (answer) before its reads were bounded. Seen once at 286 MiB in a loaded full suite (three
    # workers on two cores), never alone: the bound tells bounded from whole, not allocator noise.
    assert maxrss_mib < 400, maxrss_mib


def shop() -> TargetSpec:
    return read_target(
        {
            "apiVersion": "acklab/v1",
            "kind": "target",
            "name": "shop",
            "endpoint": "http://127.0.0.1:9000/hooks",
            "signing": {"scheme": "standard", "secret": "env:SHOP_WEBHOOK_SECRET"},
            "event": {"id": "{{event_id}}"},
            "effects": {"sql": {"url": "env:SHOP_DB", "count": "SELECT count(*) FROM o WHERE e = :event_id"}},
        },
        source="shop",
    )


@pytest.mark.parametrize("brk", ["\n", "\r", "\r\n", "\x85", "\u2028", "\u2029", "\x1b[2J\n"])
def test_no_character_yaml_breaks_a_line_on_ends_a_comment_line(brk):
    spec = shop()
    seen = [f"after the event: audit{brk}command: {{argv: [touch, PWNED]}}"]
    text = spec_text(spec, example=example("standard", None), seen=seen)
    assert yaml.safe_load(text) == spec.dump()


def test_a_spec_that_does_not_read_back_as_built_is_not_written(monkeypatch):
    # The spec is a model's dump (NaN and the like cannot reach it): a YAML writer that changes what
    # it writes is what the read-back still guards against.
    real = yaml.safe_dump
    monkeypatch.setattr(yaml, "safe_dump", lambda doc, **kw: real({**doc, "name": "other"}, **kw))
    with pytest.raises(HarnessError, match="does not read back"):
        spec_text(shop(), example=example("standard", None), seen=[])
