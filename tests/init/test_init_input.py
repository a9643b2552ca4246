"""Bad input to `acklab init` is a clear error naming the value and the fix, and changes nothing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from acklab.cli import main
from acklab.harness.init.examples import EXAMPLES, PROVIDERS, example, payload
from acklab.harness.init.examples import template as template_of
from acklab.harness.specs.target import read_target
from acklab.harness.targets.spec_checks import check_target_doc, conflict_set
from acklab.harness.wire.templates import conflicting

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


def acklab(*argv: str) -> int:
    with pytest.raises(SystemExit) as exited:
        main(list(argv))
    return int(exited.value.code or 0)


def tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SHOP_WEBHOOK_SECRET", SECRET)
    return tmp_path


URL = ["--url", "http://127.0.0.1:9/hooks", "--provider", "standard", "--db", "sqlite:////tmp/x.db"]


@pytest.mark.parametrize(
    ("argv", "code", "says"),
    [
        (["--provider", "stripe", "--db", "sqlite:////tmp/x.db"], 2, "give either --url"),
        (["--url", "http://127.0.0.1:9/h", "--provider", "stripe"], 2, "give --db URL"),
        ([*URL[:3], "stripe", "--event", "invoice paid!", *URL[4:]], 3, "expected an event type"),
        (URL, 2, "init asks before it delivers to a running service"),
        (["--app", "shop.main:app", "--path", "/h", *URL[2:4], "--db-env", "shop-db"], 3, "--db-env: got"),
        ([*URL, "--secret-env", "NOT_SET_ANYWHERE"], 3, "NOT_SET_ANYWHERE is not set"),
        ([*URL[:-1], "postgresql://u:hunter2@127.0.0.1/shop"], 3, "pass --db env:NAME"),
        (["--url", "http://example.com/hooks", *URL[2:]], 5, "off the loopback"),
        (["--app", "shop.main", "--path", "/h", *URL[2:]], 3, "expected MODULE:ATTRIBUTE"),
        (["--app", "shop.main:app", *URL[2:]], 3, "--path"),
        ([*URL, "--name", "bad name!"], 3, "--name: got 'bad name!'"),
    ],
    ids=[
        "no-service",
        "no-db",
        "bad-event-type",
        "url-without-yes",
        "bad-db-env",
        "unset-secret",
        "db-password",
        "remote",
        "bad-app",
        "no-path",
        "bad-name",
    ],
)
def test_bad_input_names_the_fix_and_writes_nothing(project, capsys, argv, code, says):
    before = tree(project)
    extra = [] if "--secret-env" in argv else ["--secret-env", "SHOP_WEBHOOK_SECRET"]
    assert acklab("init", *argv, *extra) == code
    err = capsys.readouterr().err
    assert says in err, err
    assert "hunter2" not in err
    assert tree(project) == before


def test_files_from_an_earlier_init_are_not_replaced_without_force(project, capsys):
    (project / "acklab").mkdir()
    spec = project / "acklab" / "shop.target.yaml"
    spec.write_text("mine\n")
    assert acklab("init", *URL, "--name", "shop", "--secret-env", "SHOP_WEBHOOK_SECRET") == 3
    assert "already exists; nothing was written. Pass --force" in capsys.readouterr().err
    assert spec.read_text() == "mine\n"
    assert tree(project) == {"acklab", "acklab/shop.target.yaml"}


@pytest.mark.parametrize("provider", PROVIDERS)
def test_every_shipped_example_makes_a_valid_template_with_a_conflict(provider):
    for ex in [e for e in EXAMPLES if e.provider == provider]:
        template = template_of(ex)
        doc = read_target(
            {
                "apiVersion": "acklab/v1",
                "kind": "target",
                "name": "shop",
                "endpoint": "http://127.0.0.1:9000/hooks",
                "signing": {"scheme": provider, "secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"},
                "event": template,
                "effects": {"sql": {"url": "sqlite:////tmp/x.db", "count": "SELECT 1 WHERE 1 = :event_id"}},
            },
            source=ex.file,
        )
        check_target_doc(doc, source=ex.file)  # {{event_id}} present, Stripe's id where Stripe wants it
        assert payload(ex) != template
        assert example(provider, ex.event) is ex
        from datetime import UTC, datetime

        from acklab.harness.wire.templates import render

        event = render(template, event_id="evt_1", order_id="ord_1", seq=1, created=datetime.now(UTC))
        assert conflicting(event, conflict_set(doc)).body != event.body


def test_every_shipped_payload_is_a_providers_example_with_its_source_and_licence():
    from importlib import resources

    shipped = {p.name for p in resources.files("acklab.harness.init").joinpath("payloads").iterdir()}
    assert shipped == {ex.file for ex in EXAMPLES}  # no payload without a record, no record without its file
    for ex in EXAMPLES:
        assert ex.source, ex.file
        assert ex.licence.startswith(("MIT, Copyright", "Apache-2.0", "CC BY-SA 4.0")), ex.licence


SHOP_APP = """\
import os
from starlette.applications import Starlette

DATABASE = os.environ.get("SHOP_DB", "shop.db")
app = Starlette()
"""


def test_with_count_given_init_writes_a_spec_validate_accepts_a_test_and_a_valid_ci_snippet(
    project, capsys, monkeypatch
):
    import sys

    import yaml

    from tests.pipeline.gitlab import schema_errors

    (project / "shop").mkdir()
    (project / "shop" / "__init__.py").write_text("")
    (project / "shop" / "main.py").write_text(SHOP_APP)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:{os.environ['PATH']}")  # the project's python

    argv = ["--app", "shop.main:app", "--path", "/webhooks/stripe", "--provider", "stripe", "--db"]
    argv += ["sqlite:////tmp/shop.db", "--count", "SELECT count(*) FROM payments WHERE event_id = :event_id"]
    assert acklab("init", *argv, "--name", "shop", "--secret-env", "SHOP_WEBHOOK_SECRET") == 0
    spec = project / "acklab" / "shop.target.yaml"
    assert acklab("validate", str(spec)) == 0
    assert "a valid target spec (shop)" in capsys.readouterr().out
    doc = yaml.safe_load(spec.read_text())
    assert doc["command"]["cwd"] == ".."  # the project root, from the spec's folder
    assert doc["command"]["env"]["SHOP_DB"] == "{{scratch}}/shop.db"  # the variable its code reads
    assert doc["effects"]["sql"]["url"] == "sqlite:///{{scratch}}/shop.db"
    assert doc["event"]["data"]["object"]["object"] == "payment_intent"
    test = (project / "tests" / "test_shop_webhooks.py").read_text()
    compile(test, "test_shop_webhooks.py", "exec")
    assert "webhook_lab.run()" in test  # the spec serves the app: the test imports nothing of it
    assert 'SPEC = "../acklab/shop.target.yaml"' in test
    snippet = yaml.safe_load((project / "acklab" / "shop.gitlab-ci.yml").read_text())
    assert schema_errors(snippet) == []
    assert snippet["include"][0]["inputs"]["target"] == "acklab/shop.target.yaml"
    assert snippet["shop-webhooks"]["variables"] == {"SHOP_WEBHOOK_SECRET": "$SHOP_WEBHOOK_SECRET_CI"}
    assert SECRET not in "".join(p.read_text() for p in project.rglob("*") if p.is_file())
