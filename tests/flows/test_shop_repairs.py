"""The same path as the Django shop's (test_django_repair.py) on two other stacks a new user has: a
Flask shop mailing its receipts with ``smtplib`` (`tests.consumers.flask_shop`: its own
``order.paid``, scaffolded from ``--example``) and a FastAPI shop calling a warehouse's API
(`tests.consumers.fastapi_shop`: Shopify's ``orders/paid``). `acklab init --app` writes a spec
that counts the emails or calls it saw, on a database of the service's own; `acklab run` and the
test init wrote (plain pytest) fail on them; `acklab flow init` and `acklab flow run --local`
with the model double answering the maintainer's fix publish a branch that passes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.consumers import fastapi_shop, flask_shop
from tests.consumers.shop_repo import ShopRepo
from tests.consumers.user_repos import git
from tests.doubles.openai_api import openai_double
from tests.flows.conftest import use_model, user_repo_env

pytestmark = pytest.mark.slow
KEY = "sk-double-shops-0123456789abcdef"


@dataclass(frozen=True)
class Stack:
    shop: ShopRepo
    secret_env: str
    secret: str
    init: tuple[str, ...]
    source: str  # what the spec counts besides rows: emails or calls
    sink: str  # effects.smtp or effects.outbound


STACKS = {
    "flask-smtplib": Stack(
        flask_shop.SHOP, "SHOP_WEBHOOK_SECRET", flask_shop.SECRET,
        ("--app", "shop.app:app", "--path", "/hooks/payments", "--provider", "standard",
         "--example", str(flask_shop.EXAMPLE)),
        "emails", "smtp",
    ),
    "fastapi-outbound": Stack(
        fastapi_shop.SHOP, "SHOPIFY_WEBHOOK_SECRET", fastapi_shop.SECRET,
        ("--app", "shop.main:app", "--path", "/webhooks/shopify", "--provider", "shopify", "--event", "orders/paid"),
        "calls", "outbound",
    ),
}  # fmt: skip


def plain_pytest(repo: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "--acklab-trials", "1", *argv],
        cwd=repo, env=os.environ, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip


def reply(diff: str) -> str:
    return (
        "Concurrent copies of one delivery all pass the existence check and each acts before one insert "
        f"wins. Claim the order with its row first and act only when the claim committed.\n\n```diff\n{diff}```\n"
    )


@pytest.mark.parametrize("stack", list(STACKS.values()), ids=list(STACKS))
def test_init_then_the_flow_repair_the_shop(stack, tmp_path, acklab, monkeypatch):
    monkeypatch.setenv(stack.secret_env, stack.secret)
    user_repo_env(monkeypatch)
    repo = stack.shop.make(tmp_path / "shop")
    code, _, err = acklab(
        repo, "init", *stack.init, "--secret-env", stack.secret_env, "--name", "shop", "--yes"
    )
    assert code == 0, err
    spec = yaml.safe_load((repo / "acklab" / "shop.target.yaml").read_text())
    assert spec["effects"]["sql"]["url"].startswith("sqlite:///{{scratch}}/")
    assert spec["expect"][f"max_{stack.source}"] == 1
    assert "setup" not in spec  # each app creates its tables itself (create_all): said in the header
    assert "the app creates its tables itself" in (repo / "acklab" / "shop.target.yaml").read_text()
    assert [p.name for p in repo.glob("*.db")] == []  # nothing of the developer's was written

    code, out, err = acklab(
        repo, "run", "--target", "acklab/shop.target.yaml", "--experiment", "concurrent-duplicates", "--trials", "1",
        "--json",
    )  # fmt: skip
    assert code == 1, err
    [failed] = json.loads(out)["experiments"]
    assert stack.source in {v.get("source") for v in failed["violations"]}, failed
    tested = plain_pytest(repo, "tests/test_shop_webhooks.py", "-k", "concurrent")
    assert tested.returncode == 1, tested.stdout[-3000:]
    assert re.search(rf"observed \d+ {stack.source}, expected <= 1", tested.stdout)

    git(repo, "add", "acklab", "tests/test_shop_webhooks.py")
    git(repo, "commit", "-q", "-m", "acklab: the webhook spec and test")
    code, _, err = acklab(
        repo, "flow", "init", "--target", "acklab/shop.target.yaml", "--scope", stack.shop.view
    )
    assert code == 0, err
    assert "the scope guard refuses" not in err
    git(repo, "add", "repair.flow.yaml")
    git(repo, "commit", "-q", "-m", "acklab: repair flow")
    with openai_double([reply(stack.shop.fix_diff(repo))], api_key=KEY) as llm:
        use_model(monkeypatch, llm, KEY)
        code, out, err = acklab(repo, "flow", "run", "repair.flow.yaml", "--local", "--auto-approve")
    assert code == 0, err + out
    [path] = re.findall(r"trail: (\S+)", out)
    trail = json.loads(Path(path).read_text())
    assert trail["outcome"] == "published", trail["outcome_detail"]
    struck = next(c for c in trail["checkpoints"] if c["name"] == "strike-again")
    assert struck["outputs"]["gaps"] == []
    branch = f"acklab/repair-{trail['run_id']}"
    assert git(repo, "diff", "--name-only", "main", branch).split() == [stack.shop.view]

    git(repo, "checkout", "-q", branch)
    tested = plain_pytest(repo, "tests/test_shop_webhooks.py", "-k", "concurrent")
    assert tested.returncode == 0, tested.stdout[-3000:]
