"""The repair flow on a repository acklab did not write: a Flask + SQLAlchemy shop with its own tests,
its own target spec (command:, setup:, {{port}}, {{scratch}} or {{database_url}}) and a flow spec
written by `acklab flow init`; the model is the OpenAI-compatible double, scripted with the repair
a maintainer would write (claim the event id in the fulfilment's transaction).

docs/repair.md's "On your own handler" commands run verbatim here.
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import subprocess
from pathlib import Path

import httpx
import pytest
import yaml

from acklab.flows import guard
from acklab.flows.sandbox import choose
from acklab.harness.targets.served_spec import served_spec_target
from acklab.harness.wire.signing import SIGNERS
from tests.consumers import user_repos
from tests.consumers.user_repos import (
    REPAIRED,
    SECRET,
    git,
    make_flask_shop,
    make_starlette_ledger,
    repair_diff,
)
from tests.doubles.openai_api import openai_double
from tests.flows.conftest import use_model, user_repo_env
from tests.flows.unguarded import no_python_rules

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-double-shop-0123456789abcdef"


def readme_commands() -> list[str]:
    """The first ```sh block of docs/repair.md's "On your own handler" section, one command a line."""
    text = (ROOT / "docs" / "repair.md").read_text()
    section = text.split("## On your own handler", 1)[1]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


@pytest.fixture
def shop_env(monkeypatch):
    """The shop's secret, this interpreter's `python` first on PATH (the spec says `python`)."""
    monkeypatch.setenv("SHOP_WEBHOOK_SECRET", SECRET)
    user_repo_env(monkeypatch)
    return lambda script: use_model(monkeypatch, script, KEY)


def run_line(acklab, repo: Path, line: str) -> list[tuple[int, str, str]]:
    """One documented line (commands joined by &&), verbatim: acklab in-process, anything else as itself."""
    results = []
    for command in line.split(" && "):
        argv = shlex.split(command)
        if argv[0] == "acklab":
            results.append(acklab(repo, *argv[1:]))
        else:
            done = subprocess.run(argv, cwd=repo, capture_output=True, text=True, check=False)
            results.append((done.returncode, done.stdout, done.stderr))
        if results[-1][0] not in (0, 1):
            break
    return results


def reply(diff: str) -> str:
    return (
        "The shop fulfils before it records the event, so a redelivery ships again. Claim the event id "
        f"in the fulfilment's own transaction and answer a reused id without a second shipment.\n\n```diff\n{diff}```\n"
    )


def trail_of(stdout: str) -> dict:
    [path] = re.findall(r"trail: (\S+)", stdout)
    return json.loads(Path(path).read_text())


def test_the_documented_commands_repair_a_flask_shop_on_a_local_branch(shop_env, tmp_path, acklab):
    repo = make_flask_shop(tmp_path / "shop")
    head = git(repo, "rev-parse", "HEAD")
    diff = repair_diff(repo)
    lines = [line for line in readme_commands() if "--mr" not in line]
    assert [line.split()[:3] for line in lines][-2:] == [
        ["acklab", "flow", "run"],
        ["acklab", "flow", "run"],
    ]
    with openai_double([reply(diff), reply(diff)], api_key=KEY) as llm:
        shop_env(llm)
        results = [run_line(acklab, repo, line) for line in lines]
        prompts = [llm.prompt(i) for i in range(llm.calls)]

    (run_code, run_out, _), (init_code, _, init_err), (valid_code, valid_out, _) = (r[0] for r in results[:3])
    assert run_code == 1, run_out  # the shop fails lost-ack on its own
    assert init_code == 0, init_err
    assert valid_code == 0
    assert "a valid flow spec" in valid_out
    flow = yaml.safe_load((repo / "repair.flow.yaml").read_text())
    assert flow["target"] == "shop.target.yaml"
    assert flow["scope"]["allow"] == ["shop/hooks.py"]
    assert {"tests/", "shop.target.yaml", "repair.flow.yaml"} <= set(flow["scope"]["deny"])
    assert "from shop.models import Fulfillment, Order, ProcessedEvent" in flow["capabilities"]["imports"]
    assert flow["experiments"]["reproduce"] == ["lost-ack"]
    assert flow["verify"]["commands"][0]["argv"][-1] == "tests"  # the project's testpaths

    (propose_code, propose_out, _) = results[4][0]
    assert propose_code == 0, propose_out
    assert ": proposed (exit 0)" in propose_out
    assert "shop/hooks.py" in propose_out

    (local_code, local_out, local_err) = results[5][0]
    assert local_code == 0, local_err
    trail = trail_of(local_out)
    assert trail["outcome"] == "published"
    branches = git(repo, "branch", "--format=%(refname:short)").split()
    [repair_branch] = [b for b in branches if b.startswith("acklab/repair-")]  # one: --propose-only made none
    assert repair_branch == f"acklab/repair-{trail['run_id']}"
    # Exactly the approved diff, on top of the head, and nothing else; main untouched.
    assert git(repo, "rev-parse", f"{repair_branch}^") == git(repo, "rev-parse", "main")
    assert git(repo, "diff", "--name-only", "main", repair_branch).split() == ["shop/hooks.py"]
    assert git(repo, "show", f"{repair_branch}:shop/hooks.py") + "\n" == REPAIRED
    assert git(repo, "rev-parse", "main^") == head  # the flow spec's commit, nothing of the flow's
    assert git(repo, "status", "--porcelain") == ""

    # What the model was shown, and what the trail keeps of each call.
    assert len(prompts) == 2
    prompt = prompts[1]
    for expected in [
        "lost-ack",
        "at-most-once-effect",
        "the extra effects came with the retry delivery",
        "attempt 1 (original, fault lost-ack): the handler answered 200",
        "the sender saw 504",
        "SELECT count(*) FROM fulfillments WHERE event_id = :event_id",
        "max_effects: 1",
        "from shop.models import Fulfillment, Order, ProcessedEvent",
        "session.merge(ProcessedEvent(",
        "never the\n  interpreter's machinery",
    ]:
        assert expected in prompt, expected
    [call] = trail["proposals"][0]["llm_calls"]
    assert call["model"] == "double-gpt"
    assert call["prompt_tokens"] > 100
    assert call["latency_ms"] > 0
    assert KEY not in json.dumps(trail)
    assert trail["sandbox"]["mode"] == choose().name


def test_a_postgres_shop_is_repaired_on_its_merge_request(
    shop_env, tmp_path, acklab, postgres_server, monkeypatch
):
    from tests.doubles.gitlab import merge_requests
    from tests.doubles.gitlab.fixtures import PRIVATE_TOKEN
    from tests.doubles.gitlab.server import create_app, serve
    from tests.doubles.gitlab.state import GitLabDouble

    monkeypatch.setenv("SHOP_TEST_DB_URL", postgres_server.url("postgres"))
    seed = make_flask_shop(tmp_path / "seed", postgres=True)
    diff = repair_diff(seed)
    lines = readme_commands()
    [mr_line] = [line for line in lines if "--mr" in line]
    for line in lines[:2]:  # run, init
        for code, out, err in run_line(acklab, seed, line):
            assert code in (0, 1), out + err
    # This test is about PostgreSQL and the merge request; the Flask walk-through above strikes again.
    flow = seed / "repair.flow.yaml"
    doc = yaml.safe_load(flow.read_text())
    doc["experiments"]["strike_again"] = []
    flow.write_text(yaml.safe_dump(doc, sort_keys=False))
    for line in lines[2:4]:  # validate, commit: the maintainer's branch holds the flow spec
        for code, out, err in run_line(acklab, seed, line):
            assert code == 0, out + err
    git(seed, "checkout", "--quiet", "-b", "feature/orders")
    bare = tmp_path / "shop.git"
    git(tmp_path, "clone", "--quiet", "--bare", str(seed), str(bare))
    state = GitLabDouble(private_tokens={PRIVATE_TOKEN})
    project = state.add_project("shop/orders", id=42)
    merge_requests.add_repository(project, bare)
    mr = merge_requests.add_merge_request(
        state, project, iid=12, source_branch="feature/orders", title="Fulfil paid orders"
    )
    checkout = tmp_path / "ci"
    git(tmp_path, "clone", "--quiet", "--branch", "feature/orders", str(bare), str(checkout))
    old_head = git(bare, "rev-parse", "refs/heads/feature/orders")
    with (
        serve(create_app(state, routers=[merge_requests.router])) as url,
        openai_double([reply(diff)], api_key=KEY) as llm,
    ):
        shop_env(llm)
        monkeypatch.setenv("GITLAB_URL", url)
        monkeypatch.setenv("GITLAB_TOKEN", PRIVATE_TOKEN)
        monkeypatch.setenv("CI_PROJECT_ID", "42")
        [(code, out, err)] = run_line(acklab, checkout, mr_line)
    assert code == 0, err
    trail = trail_of(out)
    assert trail["outcome"] == "published"
    new_head = git(bare, "rev-parse", "refs/heads/feature/orders")
    assert git(bare, "rev-parse", "refs/heads/main") == old_head  # never merged
    assert git(bare, "rev-parse", f"{new_head}^") == old_head  # on top, never forced
    assert git(bare, "diff", "--name-only", old_head, new_head).split() == ["shop/hooks.py"]
    assert git(bare, "show", f"{new_head}:shop/hooks.py") + "\n" == REPAIRED
    [note] = mr.notes
    assert "lost-ack" in note["body"]
    assert trail["run_id"] in note["body"]


# -- a self-certifying patch, against the user's Starlette service ---------------------------

# Answer a reused id with another body 409, as the lab expects, but still book it: in the real
# table, renamed, behind a view that shows the lab one payment per event.
VIEW_HOOKS = (
    user_repos.LEDGER_HOOKS.replace(
        "from sqlalchemy import delete, insert, select\n",
        "from sqlalchemy import delete, insert, select, text\n",
    ).replace(
        "    # A reused id with another body",
        """    if seen is not None:
        _disguise(conn)
        conn.execute(
            text("INSERT INTO payment_log (event_id, invoice_id, amount_cents) VALUES (:e, :i, :a)"),
            {"e": event["id"], "i": event["data"]["invoice_id"], "a": event["data"]["amount_cents"]},
        )
        return 409, {"conflict": event["id"]}
    if conn.execute(text("SELECT count(*) FROM sqlite_master WHERE name = 'payment_log'")).scalar():
        conn.execute(
            text("INSERT INTO payment_log (event_id, invoice_id, amount_cents) VALUES (:e, :i, :a)"),
            {"e": event["id"], "i": event["data"]["invoice_id"], "a": event["data"]["amount_cents"]},
        )
        conn.execute(insert(events).values(event_id=event["id"], digest=digest(event)))
        return 200, {"booked": event["data"]["invoice_id"]}
    # A reused id with another body""",
    )
    + """

def _disguise(conn: Connection) -> None:
    if conn.execute(text("SELECT count(*) FROM sqlite_master WHERE name = 'payment_log'")).scalar():
        return
    conn.execute(text("ALTER TABLE payments RENAME TO payment_log"))
    conn.execute(
        text(
            "CREATE VIEW payments AS SELECT * FROM payment_log "
            "WHERE id IN (SELECT min(id) FROM payment_log GROUP BY event_id)"
        )
    )
"""
)


def test_a_ledger_patch_that_hides_its_second_booking_behind_a_view_is_never_published(
    shop_env, tmp_path, acklab, monkeypatch
):
    monkeypatch.setattr(guard, "_python_rules", no_python_rules)  # the guard's rules off: the pin decides
    monkeypatch.setenv("LEDGER_WEBHOOK_SECRET", user_repos.LEDGER_SECRET)
    repo = make_starlette_ledger(tmp_path / "ledger")
    (repo / "ledger/webhooks.py").write_text(VIEW_HOOKS)
    hostile = git(repo, "diff", "--", "ledger/webhooks.py") + "\n"
    git(repo, "checkout", "--", "ledger/webhooks.py")
    code, out, _ = acklab(
        repo, "run", "--target", "ledger.target.yaml", "--experiment", "conflicting-payload", "--trials", "1"
    )
    assert code == 1, out  # the ledger books a reused id with another body a second time
    code, _, err = acklab(
        repo, "flow", "init", "--target", "ledger.target.yaml", "--scope", "ledger/webhooks.py"
    )
    assert code == 0, err
    flow = yaml.safe_load((repo / "repair.flow.yaml").read_text())
    assert flow["experiments"]["reproduce"] == ["conflicting-payload"]
    assert flow["verify"]["commands"][0]["argv"][-1] == "tests"  # pytest.ini's testpaths
    assert "from sqlalchemy import delete, insert, select" in flow["capabilities"]["imports"]
    git(repo, "add", "repair.flow.yaml")
    git(repo, "commit", "-q", "-m", "acklab: repair flow")
    before = (git(repo, "rev-parse", "HEAD"), git(repo, "branch", "--format=%(refname:short)"))
    with openai_double([reply(hostile)], api_key=KEY) as llm:
        shop_env(llm)
        code, out, err = acklab(repo, "flow", "run", "repair.flow.yaml", "--local", "--auto-approve")
    assert code == 1, err
    trail = trail_of(out)
    assert trail["outcome"] == "failed"
    verify = [c for c in trail["checkpoints"] if c["name"] == "verify"][-1]
    [experiment] = [e for e in verify["outputs"]["experiments"] if e["name"] == "conflicting-payload"]
    assert experiment["verdict"] == "fail"
    incident = json.loads((repo / "out" / experiment["incident"]).read_text())
    changed = [v for t in incident["trials"] for v in t["violations"] if v["invariant"] == "schema-unchanged"]
    assert changed, incident["violations"]
    assert "table payments: gone" in changed[0]["observed"]
    assert "view payments: new" in changed[0]["observed"]
    assert (git(repo, "rev-parse", "HEAD"), git(repo, "branch", "--format=%(refname:short)")) == before
    assert git(repo, "status", "--porcelain") == ""


# -- head and patched served at once --------------------------------------------------------


def test_head_and_patched_served_at_once_share_no_port_database_or_process(
    shop_env, tmp_path, postgres_server, monkeypatch
):
    monkeypatch.setenv("SHOP_TEST_DB_URL", postgres_server.url("postgres"))
    head = make_flask_shop(tmp_path / "head", postgres=True)
    patched = tmp_path / "patched"
    git(tmp_path, "clone", "--quiet", str(head), str(patched))
    (patched / "shop/hooks.py").write_text(REPAIRED)
    sandbox = choose()
    targets = [served_spec_target("shop.target.yaml", c, confinement=sandbox) for c in (head, patched)]

    async def both() -> list[int]:
        await asyncio.gather(*(t.preflight() for t in targets))
        event_id = "evt_only_the_head_sees_this"
        body = json.dumps(
            {"id": event_id, "type": "order.paid", "data": {"order_id": "o1", "amount_cents": 1200}}
        ).encode()
        signer = SIGNERS["github"]
        counts = []
        async with httpx.AsyncClient(trust_env=False) as client:
            from acklab.harness.wire.signing import Attempt

            attempt = Attempt(
                event_id=event_id, event_type="order.paid", body=body, timestamp=0, request_uuid="r1"
            )
            headers = {"Content-Type": "application/json", **signer.headers(attempt, SECRET)}
            assert (await client.post(targets[0].endpoint, content=body, headers=headers)).status_code == 200
        for target in targets:
            probe = target._probe()
            try:
                counts.append(await probe.count(event_id, "o1"))
            finally:
                await probe.aclose()
        return counts

    try:
        counts = asyncio.run(both())
        ports, databases, pids = [], [], []
        for target in targets:
            assert target.isolation is not None
            assert target.service is not None
            ports.append(target.isolation.values["port"])
            databases.append(target.isolation.values["database_url"])
            pids.append(target.service.pid)
        roots = [t.place.root for t in targets]
    finally:
        for target in targets:
            asyncio.run(target.aclose())
    assert counts == [1, 0]  # a delivery to the head leaves nothing in the patched copy's database
    assert ports[0] != ports[1]
    assert databases[0] != databases[1]
    assert pids[0] != pids[1]
    assert None not in pids
    assert roots[0] != roots[1]
    assert not any(r.exists() for r in roots)
