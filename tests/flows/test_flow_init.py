"""`acklab flow init` and the checks on a flow spec for a user's target (fast: nothing is served)."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from acklab import DEFAULT_EXPERIMENTS
from acklab.flows.errors import FlowSpecInvalid
from acklab.flows.init import FlowUsageError, handler_imports, init_flow, last_run, pytest_testpaths
from acklab.flows.proposers import make_proposer
from acklab.flows.spec import load_spec
from acklab.harness.errors import SpecError
from acklab.harness.targets.served_spec import served_spec_target
from tests.consumers.user_repos import SECRET, TARGET_SQLITE, git, make_flask_shop


@pytest.fixture
def shop(tmp_path, monkeypatch):
    monkeypatch.setenv("SHOP_WEBHOOK_SECRET", SECRET)
    return make_flask_shop(tmp_path / "shop")


def write_run(repo, run_id, started, verdicts, target="shop"):
    folder = repo / "out" / run_id
    folder.mkdir(parents=True)
    experiments = [{"name": n, "verdict": v} for n, v in verdicts.items()]
    doc = {"run_id": run_id, "target": target, "started_at": started, "seed": 11, "trials_per_experiment": 3}
    (folder / "run.json").write_text(json.dumps({**doc, "experiments": experiments}))


def test_imports_are_listed_name_by_name_and_machinery_is_left_out(tmp_path):
    (tmp_path / "shop").mkdir()
    (tmp_path / "shop" / "__init__.py").write_text("")
    source = (
        "from __future__ import annotations\nimport os\nimport json\nimport hashlib as h\n"
        "from subprocess import run\nfrom .models import Order\nfrom . import db\n"
        "from sqlalchemy import select as pick, text\n"
    )
    lines, notes = handler_imports(source, path="shop/hooks.py", root=tmp_path)
    assert lines == [
        "from __future__ import annotations",
        "import json",
        "import hashlib",  # an alias is listed by the name it imports: the guard allows the alias
        "from shop.models import Order",  # a relative import, as what it names in the repository
        "from shop import db",
        "from sqlalchemy import select, text",
    ]
    assert any("'import os' left out" in n for n in notes)
    assert any("from subprocess import" in n for n in notes)
    # A relative import in a file outside any package names nothing: left out, with a note.
    lines, notes = handler_imports("from .models import Order\n", path="hooks.py", root=tmp_path)
    assert lines == []
    assert any("relative import outside any package" in n for n in notes)
    with pytest.raises(FlowSpecInvalid, match="does not parse"):
        handler_imports("def (:\n", path="shop/hooks.py")


def test_testpaths_come_from_the_projects_pytest_configuration(tmp_path):
    assert pytest_testpaths(tmp_path) is None
    (tmp_path / "setup.cfg").write_text("[tool:pytest]\ntestpaths = tests/unit tests/api\n")
    assert pytest_testpaths(tmp_path) == ["tests/unit", "tests/api"]
    (tmp_path / "pyproject.toml").write_text('[tool.pytest.ini_options]\ntestpaths = ["spec"]\n')
    assert pytest_testpaths(tmp_path) == ["spec"]


def test_init_reproduces_the_last_runs_failures_and_strikes_again_with_the_rest(shop):
    write_run(shop, "older", "2026-01-01T00:00:00Z", {"concurrent-duplicates": "fail"})
    write_run(
        shop,
        "newer",
        "2026-02-01T00:00:00Z",
        {"lost-ack": "fail", "timeout-overlap": "pass", "crash-after-commit": "pass"},
    )
    write_run(shop, "other", "2026-03-01T00:00:00Z", {"replay": "fail"}, target="billing")
    newest = last_run(shop / "out", "shop")
    assert newest is not None
    assert newest["run_id"] == "newer"
    output = shop / "repair.flow.yaml"
    init_flow(shop, target="shop.target.yaml", scope=("shop/hooks.py",), output=output, runs=shop / "out")
    doc = yaml.safe_load(output.read_text())
    assert doc["experiments"] == {
        "reproduce": ["lost-ack"],
        # every experiment a run runs by default, and what else the last run ran, but lost-ack
        "strike_again": [*(name for name in DEFAULT_EXPERIMENTS if name != "lost-ack"), "crash-after-commit"],
        "trials": 3,
        "seed": 11,
    }
    assert doc["verify"]["commands"][0]["argv"][-1] == "tests"
    assert load_spec(output).target == "shop.target.yaml"  # a valid flow spec
    # Without the list, strike-again runs every experiment a run runs by default but reproduce's.
    narrowed = yaml.safe_load(output.read_text())
    del narrowed["experiments"]["strike_again"]
    output.write_text(yaml.safe_dump(narrowed))
    assert load_spec(output).strike_again == tuple(doc["experiments"]["strike_again"][:-1])
    output.write_text(yaml.safe_dump(doc))
    with pytest.raises(FlowSpecInvalid, match="recipes repair acklab's own fixture"):
        make_proposer("recipe", load_spec(output))
    with pytest.raises(FlowUsageError, match="exists; pass --force") as info:
        init_flow(shop, target="shop.target.yaml", scope=("shop/hooks.py",), output=output, runs=shop / "out")
    assert info.value.exit_code == 2


def test_init_refuses_what_it_cannot_start_from(shop):
    output = shop / "repair.flow.yaml"
    with pytest.raises(FlowSpecInvalid, match=re.escape("run `acklab run --target shop.target.yaml` first")):
        init_flow(shop, target="shop.target.yaml", scope=("shop/hooks.py",), output=output, runs=shop / "out")
    write_run(shop, "passing", "2026-02-01T00:00:00Z", {"lost-ack": "pass"})
    with pytest.raises(FlowSpecInvalid, match="failed no experiment"):
        init_flow(shop, target="shop.target.yaml", scope=("shop/hooks.py",), output=output, runs=shop / "out")
    with pytest.raises(FlowSpecInvalid, match="no such Python file"):
        init_flow(shop, target="shop.target.yaml", scope=("shop/nope.py",), output=output, runs=shop / "out")
    fixed = TARGET_SQLITE.replace("{{port}}", "9000")
    (shop / "fixed.target.yaml").write_text(fixed)
    with pytest.raises(FlowSpecInvalid, match="each on a port of its own"):
        init_flow(
            shop, target="fixed.target.yaml", scope=("shop/hooks.py",), output=output, runs=shop / "out"
        )
    assert not output.exists()


def test_a_served_spec_needs_a_port_of_its_own_and_lives_in_the_checkout(shop, tmp_path):
    (shop / "fixed.target.yaml").write_text(TARGET_SQLITE.replace("{{port}}", "9000"))
    with pytest.raises(SpecError, match=r"needs command: .* and \{\{port\}\}"):
        served_spec_target("fixed.target.yaml", shop, confinement=None)
    with pytest.raises(SpecError, match=re.escape("without '..'")):
        served_spec_target("../shop/shop.target.yaml", shop, confinement=None)
    elsewhere = tmp_path / "elsewhere.target.yaml"
    elsewhere.write_text(TARGET_SQLITE)
    with pytest.raises(SpecError, match="must be a file of the checkout"):
        served_spec_target(str(elsewhere), shop, confinement=None)
    served = served_spec_target("shop.target.yaml", shop, confinement=None)
    assert served.source_dir() == shop.resolve()  # the commit recorded is the checkout's


def test_validate_checks_a_flow_specs_target_file(shop, acklab):
    write_run(shop, "r1", "2026-02-01T00:00:00Z", {"lost-ack": "fail"})
    code, _, err = acklab(shop, "flow", "init", "--target", "shop.target.yaml", "--scope", "shop/hooks.py")
    assert code == 0, err
    code, out, _ = acklab(shop, "validate", "repair.flow.yaml")
    assert code == 0
    assert "a valid flow spec" in out
    code, _, err = acklab(shop, "flow", "run", "repair.flow.yaml", "--db", "postgresql://lab@127.0.0.1/x")
    assert code == 2
    assert "names its own database" in err
    (shop / "shop.target.yaml").write_text(TARGET_SQLITE.replace("{{port}}", "9000"))
    git(shop, "add", "-A")
    code, _, err = acklab(shop, "validate", "repair.flow.yaml")
    assert code == 3
    assert "{{port}}" in err


def test_the_fixture_flow_reproduces_on_postgresql_with_db(sandbox, tmp_path, acklab, pg_url):
    from tests.flows.conftest import fast_spec, load_trail

    spec = fast_spec(tmp_path, strike_again=(), checks=("ruff",))
    out = tmp_path / "out"
    code, stdout, err = acklab(
        sandbox, "flow", "run", spec, "--db", pg_url, "--propose-only", "--out", out, "--json"
    )
    assert code == 0, err
    trail = load_trail(stdout)
    [reproduce] = [c for c in trail["checkpoints"] if c["name"] == "reproduce"]
    assert reproduce["outputs"]["failing"] == ["lost-ack"]
    run = json.loads((out / reproduce["outputs"]["lab_bundle"] / "run.json").read_text())
    incident = json.loads(
        (out / reproduce["outputs"]["lab_bundle"] / run["experiments"][0]["incident"]).read_text()
    )
    assert incident["target"]["database"].startswith("postgresql")
    code, _, err = acklab(sandbox, "flow", "run", spec, "--db", "sqlite:////tmp/x.db", "--propose-only")
    assert code == 2
    assert "expected a PostgreSQL URL" in err
