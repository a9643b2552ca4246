"""Target spec files in a sweep: one run each whatever --db says (a spec names its own database)."""

from __future__ import annotations

import pytest

from acklab.evidence.bundle import verify
from acklab.harness.sweep.run import SweepOptions, run_sweep
from tests.harness.conftest import serve_handler  # noqa: F401 - the fixture, shared
from tests.harness.handlers import NoDedupe, Receipt
from tests.harness.sweep.conftest import cell


@pytest.mark.slow
def test_spec_targets_run_once_on_their_own_database_and_inapplicable_experiments_are_skipped(
    serve_handler,  # noqa: F811
    tmp_path,
):
    correct = serve_handler(Receipt(), name="receipt")
    broken = serve_handler(NoDedupe(), name="no-dedupe")
    options = SweepOptions(
        targets=(str(correct), str(broken)),
        databases=("sqlite", f"sqlite:///{tmp_path}/unused.db"),
        experiments=("lost-ack", "db-reset"),
        trials=1,
        seed=9,
        out=tmp_path / "out",
    )
    result = run_sweep(options)
    assert int(result.exit_code) == 1
    cells = result.doc.dump()["cells"]
    assert len(cells) == 4  # two targets x one database each x two experiments
    assert cell(cells, "receipt", "sqlite (target spec)", "lost-ack")["verdict"] == "pass"
    assert cell(cells, "no-dedupe", "sqlite (target spec)", "lost-ack")["verdict"] == "fail"
    skipped = cell(cells, "receipt", "sqlite (target spec)", "db-reset")
    assert skipped["verdict"] == "skipped"
    assert "fixture" in skipped["reason"]
    assert [r["target"] for r in result.doc.dump()["runs"]] == [str(correct), str(broken)]
    assert verify(result.root).ok
