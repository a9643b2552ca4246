"""The repair flow on an ordinary Django view (`tests.consumers.django_shop`): `acklab run`, then
`acklab flow init`, then `acklab flow run --local` with the OpenAI-compatible double answering
with the fix a maintainer would write (the row first, the receipt in ``transaction.on_commit``).

Nothing of the shop is edited for acklab: its view imports as Django projects do (``from
.models import Fulfillment``, ``from django.db import transaction``), reads its settings from
the environment and mails through Django's SMTP backend; the allowlist is what `flow init`
wrote.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from tests.consumers.django_shop import FIXED_VIEW, SECRET, TARGET, VIEW, fix_diff, git, make_django_shop
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


def test_flow_init_then_run_local_repairs_the_django_view(shop_env, tmp_path, acklab):
    repo = make_django_shop(tmp_path / "shop")
    code, out, err = acklab(
        repo, "run", "--target", TARGET, "--experiment", "concurrent-duplicates", "--trials", "1"
    )
    assert code == 1, out + err  # every concurrent copy mails a receipt
    code, _, err = acklab(repo, "flow", "init", "--target", TARGET, "--scope", VIEW)
    assert code == 0, err
    assert "the scope guard refuses" not in err  # the view as it is passes the guard's rules
    flow = yaml.safe_load((repo / "repair.flow.yaml").read_text())
    imports = flow["capabilities"]["imports"]
    assert "from orders.models import Fulfillment" in imports  # the relative import, as what it names
    assert "from django.db import transaction" in imports
    assert flow["experiments"]["reproduce"] == ["concurrent-duplicates"]
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
    [proposal] = trail["proposals"]
    assert proposal["guard"]["allowed"], proposal["guard"]["reasons"]
    verify = next(c for c in trail["checkpoints"] if c["name"] == "verify")
    assert {c["name"]: c["status"] for c in verify["outputs"]["checks"]} == {"pytest": "ok", "ruff": "ok"}
    assert {e["name"]: e["verdict"] for e in verify["outputs"]["experiments"]} == {
        "concurrent-duplicates": "pass"
    }
    struck = next(c for c in trail["checkpoints"] if c["name"] == "strike-again")
    assert struck["outputs"]["gaps"] == []
    judged = {e["experiment"] for e in struck["outputs"]["experiments"]}
    skipped = {e["experiment"] for e in struck["outputs"]["skipped"]}
    assert judged | skipped == set(flow["experiments"]["strike_again"])
    assert {"lost-ack", "lost-ack-reset", "timeout-overlap", "conflicting-payload", "replay"} <= judged
    branch = f"acklab/repair-{trail['run_id']}"
    assert git(repo, "diff", "--name-only", "main", branch).split() == [VIEW]
    assert git(repo, "show", f"{branch}:{VIEW}") + "\n" == FIXED_VIEW
    assert {p: (repo / p).read_text() for p in shop_before} == shop_before  # the working tree as it was


def flow_on(repo: Path, acklab) -> None:
    """`acklab run` (it fails) and `acklab flow init` on `repo`, the flow spec committed."""
    code, out, err = acklab(
        repo, "run", "--target", TARGET, "--experiment", "concurrent-duplicates", "--trials", "1"
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
