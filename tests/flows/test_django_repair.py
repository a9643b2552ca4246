"""A new user's path on an ordinary Django shop (`tests.consumers.django_shop`): `acklab init --app`
(a spec that counts the receipts it saw, the shop served on a database of its own), `acklab run`
and the test init wrote under pytest-django (both fail on the emails), then `acklab flow init`
and `acklab flow run --local` with the OpenAI-compatible double answering with the fix a
maintainer would write (the row first, the receipt in ``transaction.on_commit``); the published
branch passes every experiment, and the developer's own ``db.sqlite3`` never changed a byte.

Nothing of the shop is edited for acklab: its view imports as Django projects do (``from
.models import Fulfillment``, ``from django.db import transaction``), reads its settings from
the environment and mails through Django's SMTP backend; the allowlist is what `flow init`
wrote.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from acklab.evidence.documents.records import observed_text
from acklab.evidence.journal import Journal, journal_path
from acklab.harness.init.scaffold import test_text as generated_test
from tests.consumers.django_shop import (
    EXAMPLE,
    FIXED_VIEW,
    SECRET,
    TARGET,
    VIEW,
    fix_diff,
    git,
    make_django_shop,
)
from tests.doubles.openai_api import openai_double
from tests.flows.conftest import use_model, user_repo_env

pytestmark = pytest.mark.slow
KEY = "sk-double-django-0123456789abcdef"


@pytest.fixture
def shop_env(monkeypatch):
    """The shop's signing secret in the environment; `shop_env(llm)` points the proposer at the double."""
    monkeypatch.setenv("STRIPE_WEBHOOK_SECRET", SECRET)
    user_repo_env(monkeypatch)
    return lambda script: use_model(monkeypatch, script, KEY)


def reply(diff: str) -> str:
    return (
        "Every concurrent copy of the event passes the existence check and mails a receipt before one "
        "insert wins. Claim the event with its row first and send the receipt only once that row is "
        f"committed.\n\n```diff\n{diff}```\n"
    )


def developer_database(repo: Path) -> bytes:
    """The shop's own db.sqlite3 as its developer has it: migrated, one order shipped; its bytes."""
    env = {k: v for k, v in os.environ.items() if k != "SHOP_DB"}
    python = [sys.executable, "manage.py"]
    subprocess.run([*python, "migrate", "-v0"], cwd=repo, env=env, check=True, timeout=120)
    ship = "from orders.models import Fulfillment; Fulfillment.objects.create(event_id='evt_real', order_id='7', amount_cents=900)"
    subprocess.run([*python, "shell", "-c", ship], cwd=repo, env=env, check=True, timeout=120)
    return (repo / "db.sqlite3").read_bytes()


def pytest_django(repo: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """The shop's pytest, as its developer runs it: pytest-django on (its settings in pyproject.toml)."""
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "--acklab-trials", "1", *argv],
        cwd=repo, env=os.environ, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip


def test_init_then_the_flow_repair_the_django_shop_and_its_database_is_never_touched(
    shop_env, tmp_path, acklab, monkeypatch
):
    repo = make_django_shop(tmp_path / "shop")
    real = developer_database(repo)
    init = ["init", "--app", "shop.wsgi:application", "--path", "/webhooks/stripe", "--provider", "stripe",
            "--secret-env", "STRIPE_WEBHOOK_SECRET", "--name", "shop", "--yes"]  # fmt: skip

    monkeypatch.delenv("COLUMNS", raising=False)  # the verdict table read below as a transcript: unwrapped
    # Stripe's own example has no metadata.order_id: the view fails, and init shows why at once.
    monkeypatch.setenv("DJANGO_DEBUG", "1")  # as on a developer's machine: Django logs the traceback
    code, _, err = acklab(repo, *init, "--event", "checkout.session.completed")
    assert code == 4, err
    assert "answered 500 to the signed checkout.session.completed event" in err
    assert "KeyError: 'order_id'" in err  # the service's own log, not the start of its answer
    assert "--example FILE" in err
    assert not (repo / "acklab").exists()

    code, _, err = acklab(repo, *init, "--example", EXAMPLE)
    assert code == 0, err
    assert "1 email(s) naming its object's id" in err
    spec = yaml.safe_load((repo / "acklab" / "shop.target.yaml").read_text())
    assert spec["effects"]["smtp"] == {"listen": "127.0.0.1:{{smtp_port}}", "match": "{{order_id}}"}
    assert spec["expect"]["max_emails"] == 1
    assert spec["setup"] == {"argv": ["python", "manage.py", "migrate", "--noinput"]}
    env = spec["command"]["env"]
    assert env["SHOP_DB"] == "{{scratch}}/db.sqlite3"
    assert (env["EMAIL_HOST"], env["EMAIL_PORT"]) == ("127.0.0.1", "{{smtp_port}}")
    assert env["STRIPE_WEBHOOK_SECRET"] == "env:STRIPE_WEBHOOK_SECRET"
    assert spec["effects"]["sql"]["url"] == "sqlite:///{{scratch}}/db.sqlite3"

    code, out, err = acklab(
        repo, "run", "--target", "acklab/shop.target.yaml", "--experiment", "concurrent-duplicates",
        "--experiment", "lost-ack-reset", "--trials", "1", "--json",
    )  # fmt: skip
    assert code == 1, err
    ran = {e["name"]: e for e in json.loads(out)["experiments"]}
    # The burst fails the shop whatever the load. lost-ack-reset fails it only when the retry is
    # checked before the original commits (a race: on a loaded machine it is lost one time in a
    # few, and a pass is then the handler's true answer to that order): either verdict, its
    # fault landed, and a failure is on the emails.
    assert ran["concurrent-duplicates"]["verdict"] == "fail"
    assert ran["lost-ack-reset"]["verdict"] in ("pass", "fail")
    assert ran["lost-ack-reset"]["fault_landed"] == 1, ran["lost-ack-reset"]
    failed = {name: e for name, e in ran.items() if e["verdict"] == "fail"}
    for experiment in failed.values():
        assert "emails" in {v.get("source") for v in experiment["violations"]}
    # The table shows each experiment's first finding; an email counted is named as one.
    for experiment in failed.values():
        first = experiment["violations"][0]
        shown = observed_text(first["observed"], first.get("source"), first["expected"])
        assert f"{first['invariant']}: {first['event_id']} {shown}" in err
    emails = [v for e in failed.values() for v in e["violations"] if v.get("source") == "emails"]
    assert all(
        re.fullmatch(
            r"observed \d+ emails, expected <= 1", observed_text(v["observed"], "emails", v["expected"])
        )
        for v in emails
    ), emails

    tested = pytest_django(repo, "tests/test_shop_webhooks.py", "-k", "concurrent")
    assert tested.returncode == 1, tested.stdout[-3000:]
    assert re.search(r"observed \d+ emails, expected <= 1", tested.stdout)

    git(repo, "add", "acklab", "tests/test_shop_webhooks.py")
    git(repo, "commit", "-q", "-m", "acklab: the shop's webhook spec and test")
    code, _, err = acklab(repo, "flow", "init", "--target", "acklab/shop.target.yaml", "--scope", VIEW)
    assert code == 0, err
    flow = yaml.safe_load((repo / "repair.flow.yaml").read_text())
    imports = flow["capabilities"]["imports"]
    assert "from orders.models import Fulfillment" in imports  # the relative import, as what it names
    assert "from django.db import transaction" in imports
    assert "--ignore=tests/test_shop_webhooks.py" in flow["verify"]["commands"][0]["argv"]
    git(repo, "add", "repair.flow.yaml")
    git(repo, "commit", "-q", "-m", "acklab: repair flow")
    shop_before = {p: (repo / p).read_text() for p in (VIEW, "orders/models.py", "shop/settings.py")}

    with openai_double([reply(fix_diff(repo))], api_key=KEY) as llm:
        shop_env(llm)
        code, out, err = acklab(repo, "flow", "run", "repair.flow.yaml", "--local", "--auto-approve")
        calls = llm.calls
    assert code == 0, err + out
    assert calls == 1  # the guard let the first proposal through
    [path] = re.findall(r"trail: (\S+)", out)
    trail = json.loads(Path(path).read_text())
    assert trail["outcome"] == "published", trail["outcome_detail"]
    verify = next(c for c in trail["checkpoints"] if c["name"] == "verify")
    assert {c["name"]: c["status"] for c in verify["outputs"]["checks"]} == {"pytest": "ok", "ruff": "ok"}
    struck = next(c for c in trail["checkpoints"] if c["name"] == "strike-again")
    assert struck["outputs"]["gaps"] == []
    judged = {e["experiment"] for e in struck["outputs"]["experiments"]}
    skipped = {e["experiment"] for e in struck["outputs"]["skipped"]}
    assert judged | skipped == set(flow["experiments"]["strike_again"])
    assert {"lost-ack", "timeout-overlap", "conflicting-payload", "replay"} <= judged
    branch = f"acklab/repair-{trail['run_id']}"
    assert git(repo, "diff", "--name-only", "main", branch).split() == [VIEW]
    assert git(repo, "show", f"{branch}:{VIEW}") + "\n" == FIXED_VIEW
    assert {p: (repo / p).read_text() for p in shop_before} == shop_before  # the working tree as it was

    # The published branch passes the experiments of the test init wrote that failed on main (strike-again
    # judged every other one above), under pytest-django.
    git(repo, "checkout", "-q", branch)
    tested = pytest_django(repo, "tests/test_shop_webhooks.py", "-k", "concurrent or reset")
    assert tested.returncode == 0, tested.stdout[-3000:]
    assert "2 passed" in tested.stdout
    assert (repo / "db.sqlite3").read_bytes() == real  # init, the runs, the tests, the flow: not a byte


def test_the_test_init_writes_migrates_the_shop_once_for_all_its_experiments(shop_env, tmp_path):
    # One pytest session, one run per experiment: the first migrates, the others copy its database.
    repo = make_django_shop(tmp_path / "shop")
    test = generated_test(name="shop", spec_rel=f"../{TARGET}", app_ref="shop.wsgi:application", served=True)
    (repo / "tests" / "test_shop_webhooks.py").write_text(test)
    # lost-ack and replay pass on this shop whatever the load. lost-ack-reset fails on the receipts
    # only when the provider's retry is checked before the original commits (a race, lost on a
    # loaded machine): either verdict, but a failure must be on the emails.
    tested = pytest_django(repo, "tests/test_shop_webhooks.py", "-k", "lost-ack or replay")
    assert tested.returncode in (0, 1), tested.stdout[-3000:]
    for name in ("lost-ack", "replay"):
        assert f"FAILED tests/test_shop_webhooks.py::test_shop_webhook[{name}]" not in tested.stdout
    if tested.returncode == 1:
        assert "1 failed, 2 passed" in tested.stdout, tested.stdout[-3000:]
        assert "FAILED tests/test_shop_webhooks.py::test_shop_webhook[lost-ack-reset]" in tested.stdout
        assert re.search(r"observed \d+ emails, expected <= 1", tested.stdout)
    # pytest-django did not hide the receipts: every event the shop acknowledged was read with the
    # receipt its order mailed (or more).
    finals = []
    for path in (repo / ".acklab").glob("*/trials/*.json"):
        trial = json.loads(path.read_text())
        acked = {d["event_id"] for d in trial["deliveries"] if d["status"] == 200}
        finals += [o for o in trial["observations"] if o["note"] == "final" and o["event_id"] in acked]
    assert len(finals) >= 3
    assert [o for o in finals if not (o["effects"] >= 1 and o["emails"] >= 1)] == []
    logs = [log.read_text() for log in sorted((repo / ".acklab").rglob("service.log"))]
    assert len(logs) == 3
    assert sum("Applying orders.0001_initial... OK" in log for log in logs) == 1
    assert sum("setup: from the template made at " in log for log in logs) == 2
    with Journal(journal_path(repo / ".acklab"), readonly=True) as journal:
        made = {
            e.name: e.status
            for r in journal.runs()
            for e in journal.history(r)
            if "acklab-template-" in e.name
        }
    [(template, status)] = made.items()  # one template for the session, removed when it ended
    assert status == "released"
    assert not Path(template.partition(":")[2]).exists()


def flow_on(repo: Path, acklab) -> None:
    """`acklab run` (it fails) and `acklab flow init` on `repo`, the flow spec committed."""
    code, out, err = acklab(
        # Three trials: one can miss the race on a loaded machine.
        repo,
        "run",
        "--target",
        TARGET,
        "--experiment",
        "concurrent-duplicates",
        "--trials",
        "3",
    )
    assert code == 1, out + err
    code, _, err = acklab(repo, "flow", "init", "--target", TARGET, "--scope", VIEW)
    assert code == 0, err
    git(repo, "add", "repair.flow.yaml")
    git(repo, "commit", "-q", "-m", "acklab: repair flow")


def test_the_signing_secret_the_spec_names_reaches_the_sandboxed_service(shop_env, tmp_path, acklab):
    # The spec signs with env:STRIPE_WEBHOOK_SECRET and its command.env does not pass it: unconfined
    # the service inherits it, and in the sandbox it gets it from the spec all the same.
    repo = make_django_shop(tmp_path / "shop")
    target = repo / TARGET
    target.write_text(
        target.read_text().replace("    STRIPE_WEBHOOK_SECRET: env:STRIPE_WEBHOOK_SECRET\n", "")
    )
    assert "STRIPE_WEBHOOK_SECRET: env:" not in target.read_text()
    git(repo, "commit", "-q", "-am", "the secret comes from the environment")
    flow_on(repo, acklab)
    with openai_double([reply(fix_diff(repo))], api_key=KEY) as llm:
        shop_env(llm)
        code, out, err = acklab(repo, "flow", "run", "repair.flow.yaml", "--propose-only")
    assert code == 0, err + out
    assert "concurrent-duplicates: fail" in err  # reproduced: the signed deliveries were accepted
    assert "passed the scope guard" in err


def test_a_variable_the_sandbox_did_not_pass_is_named_with_the_fix(shop_env, tmp_path, acklab, monkeypatch):
    # The shop's settings need a variable its spec never passes: fine for `acklab run` (the service
    # inherits the environment), fatal in the sandbox, and said so by name instead of "check signing".
    monkeypatch.setenv("SHOP_RECEIPTS_FROM", "receipts@shop.example")
    repo = make_django_shop(tmp_path / "shop")
    settings = repo / "shop" / "settings.py"
    settings.write_text(
        settings.read_text().replace(
            'DEFAULT_FROM_EMAIL = "receipts@shop.example"',
            'DEFAULT_FROM_EMAIL = os.environ["SHOP_RECEIPTS_FROM"]',
        )
    )
    git(repo, "commit", "-q", "-am", "the sender comes from the environment")
    flow_on(repo, acklab)
    with openai_double([reply(fix_diff(repo))], api_key=KEY) as llm:
        shop_env(llm)
        code, out, err = acklab(repo, "flow", "run", "repair.flow.yaml", "--propose-only")
        calls = llm.calls
    assert code == 4, err + out
    assert calls == 0
    assert (
        "the service's output names SHOP_RECEIPTS_FROM, set in the lab's environment but not passed to the "
        "sandboxed service" in out
    )
    assert f"add SHOP_RECEIPTS_FROM: env:SHOP_RECEIPTS_FROM under command.env in {TARGET}" in out
    assert "receipts@shop.example" not in out + err  # a name, never a value
