"""No credential is ever written or printed, by any command that writes.

Distinct values are planted in every place a secret enters acklab: a signing secret, two
``env:`` headers, a probe header, a token in an ``env:`` endpoint URL, a password in
``--db``, a password in ``effects.sql.url``, ``GITLAB_URL``'s userinfo, ``GITLAB_TOKEN`` and
the LLM key. Then every command that writes runs once, each in a process of its own (so
nothing it redacts is remembered from a previous command): ``run`` with each experiment
(two shards, a careless service behind API keys started by ``command:``, crash included),
``run`` on the fixture with ``--db``, ``sweep``, ``explore``, a lab killed mid-run and the
``janitor`` after it, ``evidence merge``, ``history``, ``pages``, ``flow run`` (LLM proposer,
published to a merge request) and ``evidence pull`` (through object storage). Not one byte
under the test's directory, no MR note, no commit and nothing printed may hold a planted
value in any spelling.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import pytest
import yaml

from acklab.evidence.journal import Journal, journal_path
from acklab.harness.ports import free_port
from acklab.harness.procs.janitor import open_leases
from acklab.harness.procs.leases import same_process_alive
from tests.harness.keyed_service import EFFECTS_QUERY
from tests.harness.test_db_passwords import role_with_password

pytestmark = [pytest.mark.slow, pytest.mark.postgres]
ROOT = Path(__file__).resolve().parents[1]
LAUNCHER = "import sys; from acklab.cli import main; main(sys.argv[1:])"


@dataclass(frozen=True)
class Planted:
    """One distinct value per place a secret enters the lab."""

    signing_secret: str = "sig-PLANTED-signing-7f3a9c01"
    hook_key: str = "hk1-PLANTED-hookkey-51c2e0aa"  # env: header 1
    tenant_token: str = "hk2-PLANTED-tenant-9d44ab12"  # env: header 2
    read_key: str = "prb-PLANTED-readkey-08be7f3d"  # the probe's header
    url_token: str = "url-PLANTED-token-33a1f0c9"  # in the env: endpoint's query
    db_password: str = "dbp-PLANTED-dbflag-6c0d12ee"  # in --db
    sql_password: str = "sql-PLANTED-effects-a9e5b377"  # in effects.sql.url
    gitlab_userinfo: str = "glu-PLANTED-urlpass-4e7d2166"  # GITLAB_URL's user:password@
    gitlab_token: str = "glpat-PLANTED-token-c58f90bb"
    llm_key: str = "sk-PLANTED-llmkey-1b6e27d4"

    def spellings(self) -> dict[str, str]:
        found = {}
        for name, value in vars(self).items():
            for spelling in {value, quote(value, safe=""), quote_plus(value)}:
                found[spelling] = name
        return found


@dataclass
class Done:
    argv: tuple[str, ...]
    code: int
    out: str
    err: str


@dataclass
class Sweep:
    """What the scenario ran and produced."""

    root: Path
    done: list[Done] = field(default_factory=list)
    extra_text: dict[str, str] = field(default_factory=dict)  # MR notes, pushed commits
    left_in_tmp: list[str] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)

    def acklab(self, *argv: str | Path, cwd: Path, env: dict[str, str], ok: tuple[int, ...] = (0,)) -> Done:
        done = subprocess.run(
            [sys.executable, "-c", LAUNCHER, *map(str, argv)],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        result = Done(tuple(map(str, argv)), done.returncode, done.stdout, done.stderr)
        self.done.append(result)
        assert result.code in ok, f"{argv}: exit {result.code}\n{result.out}\n{result.err}"
        return result


def keyed_target(root: Path, name: str, *, port: int, effects: dict[str, Any], database_url: str) -> Path:
    """A careless service behind API keys (tests.harness.keyed_service), started by the lab."""
    doc = {
        "apiVersion": "acklab/v1",
        "kind": "target",
        "name": name,
        "endpoint": f"env:{name.upper().replace('-', '_')}_HOOK_URL",
        "headers": {"X-Api-Key": "env:SWEEP_HOOK_KEY", "X-Tenant-Token": "env:SWEEP_TENANT_TOKEN"},
        "signing": {"scheme": "github", "secret": "env:SWEEP_SIGNING_SECRET"},
        "delivery": {"timeout_s": 3.0, "event_type": "push"},
        "event": {
            "ref": "refs/heads/main",
            "after": "{{event_id}}",
            "repository": {"full_name": "shop/orders"},
            "commits": [{"id": "{{order_id}}", "message": "Ship it", "timestamp": "{{timestamp}}"}],
        },
        "conflict": {"set": {"commits.0.message": "rewritten"}},
        "effects": effects,
        "command": {
            "argv": [sys.executable, "-m", "tests.harness.keyed_service", "--port", str(port)],
            "env": {
                "PYTHONPATH": str(ROOT),
                "DATABASE_URL": database_url,
                "SIGNING_SECRET": "env:SWEEP_SIGNING_SECRET",
                "URL_TOKEN": "env:SWEEP_URL_TOKEN",
                "HOOK_KEY": "env:SWEEP_HOOK_KEY",
                "TENANT_TOKEN": "env:SWEEP_TENANT_TOKEN",
                "READ_KEY": "env:SWEEP_READ_KEY",
            },
            "ready_timeout_s": 30,
        },
    }
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def zipped(root: Path) -> bytes:
    """The job's `artifacts: paths: [out/]` (run bundles; a sweep's nested bundles stay out: pull
    does not unpack a bundle inside a bundle yet)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(root.rglob("*")):
            nested = path.relative_to(root).parts[0].startswith("sweep-")
            if path.is_file() and path.name != "journal.sqlite" and not nested:
                zf.write(path, f"out/{path.relative_to(root).as_posix()}")
    return buffer.getvalue()


def kill_a_lab_mid_run_then_janitor(sweep: Sweep, target: Path, env: dict[str, str]) -> None:
    """A lab with a command: service dies by SIGKILL; the janitor ends the service and removes its log dir."""
    out = sweep.root / "killed"
    argv = ["run", "--target", target, "--experiment", "crash-after-commit", "--trials", "40", "--out", out]
    lab = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, *map(str, argv)],
        cwd=sweep.root,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 90
        while True:
            assert time.monotonic() < deadline, "the lab never leased its service and log directory"
            leases = []
            if journal_path(out).exists():
                with Journal(journal_path(out)) as journal:
                    leases = open_leases(journal)
            kinds = {e.payload["resource"] for e in leases}
            if {"process", "directory"} <= kinds:
                break
            time.sleep(0.1)
        os.killpg(lab.pid, signal.SIGKILL)  # the lab only: the service leads a session of its own
        lab.wait(10)
    finally:
        if lab.poll() is None:
            os.killpg(lab.pid, signal.SIGKILL)
            lab.wait(10)
    service = next(e for e in leases if e.payload["resource"] == "process").payload["detail"]
    log_dir = Path(next(e for e in leases if e.payload["resource"] == "directory").payload["detail"]["path"])
    assert log_dir.name.startswith("acklab-service-log-")
    assert log_dir.parent == Path(env["TMPDIR"])  # where the sweep looks for leftovers
    assert log_dir.exists()
    done = sweep.acklab("janitor", "--out", out, "--json", cwd=sweep.root, env=env)
    assert json.loads(done.out)["failed"] == 0
    assert not same_process_alive(service["pid"], service["start_ticks"])
    assert not log_dir.exists()


def flow_and_pull(sweep: Sweep, planted: Planted, env: dict[str, str]) -> None:
    """The repair flow publishes to MR !1 (LLM proposer); then the pipeline's evidence is pulled."""
    from acklab.flows.scratch_repo import make_scratch_repo
    from tests.doubles.gitlab import merge_requests
    from tests.doubles.gitlab.object_storage import serve_storage
    from tests.doubles.gitlab.server import create_app, serve
    from tests.doubles.gitlab.state import GitLabDouble
    from tests.doubles.openai_api import openai_double
    from tests.flows import patches
    from tests.flows.conftest import fast_spec, run_git, write_decisions

    root = sweep.root
    seed = root / "seed"
    make_scratch_repo(seed)
    run_git(seed, "checkout", "--quiet", "-b", "feature/orders")
    bare = root / "project.git"
    run_git(root, "clone", "--quiet", "--bare", str(seed), str(bare))
    checkout = root / "checkout"
    run_git(root, "clone", "--quiet", "--branch", "feature/orders", str(bare), str(checkout))
    before = run_git(bare, "rev-parse", "feature/orders").strip()
    state = GitLabDouble(private_tokens={planted.gitlab_token})
    project = state.add_project("shop/orders", id=42)
    merge_requests.add_repository(project, bare)
    mr = merge_requests.add_merge_request(state, project, iid=1, source_branch="feature/orders", title="Ship")
    spec = fast_spec(root, strike_again=(), checks=("ruff",))
    decisions = write_decisions(root, [{"gate": "approve", "decision": "approve", "actor": "carol"}])
    with (
        serve(create_app(state, routers=[merge_requests.router])) as url,
        openai_double([patches.reply(patches.GOOD)], api_key=planted.llm_key) as llm,
    ):
        gitlab_env = {
            **env,
            "GITLAB_URL": url.replace("http://", f"http://oauth2:{planted.gitlab_userinfo}@"),
            "GITLAB_TOKEN": planted.gitlab_token,
            "CI_PROJECT_ID": "42",
            "ACKLAB_LLM_BASE_URL": llm.base_url,
            "ACKLAB_LLM_MODEL": "double-gpt",
            "ACKLAB_LLM_API_KEY": planted.llm_key,
        }
        flow = sweep.acklab(
            "flow", "run", spec, "--proposer", "llm", "--mr", "1", "--decisions", decisions,
            "--out", root / "flow-out", "--json", cwd=checkout, env=gitlab_env,
        )  # fmt: skip
        sweep.facts["flow"] = json.loads(flow.out)["outcome"]
        sweep.extra_text["mr notes"] = json.dumps(mr.notes)
        pushed = run_git(bare, "log", "-p", f"{before}..feature/orders")
        assert pushed  # the flow published a commit
        sweep.extra_text["pushed commits"] = pushed

        pipeline = state.add_pipeline(project)
        state.add_job(pipeline, "acklab run", artifacts=zipped(root / "out"))
        with serve_storage(state):
            pull = sweep.acklab(
                "evidence", "pull", "--project", "42", "--pipeline", str(pipeline.id), "--out", root / "pulled",
                "--json", cwd=root, env=gitlab_env,
            )  # fmt: skip
        sweep.facts["pulled"] = len(json.loads(pull.out))
        sweep.facts["storage saw a token"] = any(
            {"private-token", "job-token", "authorization"} & set(h) for h in state.storage_requests
        )


@pytest.fixture(scope="module")
def sweep(postgres_server, tmp_path_factory) -> Sweep:
    planted = Planted()
    root = tmp_path_factory.mktemp("secret-sweep")
    sweep = Sweep(root=root)
    # A temporary directory of the sweep's own: other test runs on this machine leave and
    # remove their service logs in the shared one while this sweep runs.
    private_tmp = root / "tmp"
    private_tmp.mkdir()
    db_url = role_with_password(postgres_server, planted.db_password)
    sql_url = role_with_password(postgres_server, planted.sql_password)
    port_a, port_c = free_port(), free_port()
    env = {
        **os.environ,
        "SWEEP_SIGNING_SECRET": planted.signing_secret,
        "SWEEP_HOOK_KEY": planted.hook_key,
        "SWEEP_TENANT_TOKEN": planted.tenant_token,
        "SWEEP_READ_KEY": planted.read_key,
        "SWEEP_URL_TOKEN": planted.url_token,
        "KEYED_HTTP_HOOK_URL": f"http://127.0.0.1:{port_a}/hooks?token={planted.url_token}",
        "KEYED_SQL_HOOK_URL": f"http://127.0.0.1:{port_c}/hooks?token={planted.url_token}",
        "SWEEP_SQL_URL": sql_url,
        "TMPDIR": str(private_tmp),
    }
    for name in ("GITLAB_URL", "GITLAB_TOKEN", "CI_JOB_TOKEN", "ACKLAB_LLM_API_KEY", "CI_SERVER_URL"):
        env.pop(name, None)
    http_target = keyed_target(
        root,
        "keyed-http",
        port=port_a,
        effects={
            "http": {
                "url": f"http://127.0.0.1:{port_a}/effects/{{{{event_id}}}}",
                "json_path": "count",
                "headers": {"X-Read-Key": "env:SWEEP_READ_KEY"},
            }
        },
        database_url=f"sqlite:///{root}/keyed-http.db",
    )
    sql_target = keyed_target(
        root,
        "keyed-sql",
        port=port_c,
        effects={"sql": {"url": "env:SWEEP_SQL_URL", "count": EFFECTS_QUERY}},
        database_url="env:SWEEP_SQL_URL",
    )
    out = root / "out"
    every = ("lost-ack", "lost-ack-reset", "timeout-overlap", "concurrent-duplicates", "conflicting-payload",
             "replay", "crash-after-commit")  # fmt: skip
    experiments = [a for name in every for a in ("--experiment", name)]
    shards = []
    for shard in ("1/2", "2/2"):
        done = sweep.acklab(
            "run", "--target", http_target, *experiments, "--trials", "1", "--shard", shard, "--out", out,
            "--json", cwd=root, env=env, ok=(0, 1, 4),
        )  # fmt: skip
        shards.append(json.loads(done.out))
    sweep.facts["experiments"] = sorted({e["name"] for s in shards for e in s["experiments"]})
    sweep.facts["service.log"] = [(Path(s["bundle"]) / "service.log").read_text() for s in shards]
    sweep.acklab(
        "run", "--target", "fixture:live", "--db", db_url, "--experiment", "lost-ack", "--experiment", "db-reset",
        "--trials", "1", "--out", out, cwd=root, env=env,
    )  # fmt: skip
    sweep.acklab(
        "sweep", "--target", sql_target, "--target", "fixture:live", "--db", db_url, "--experiment", "lost-ack",
        "--trials", "1", "--out", out, "--json", cwd=root, env=env, ok=(0, 1, 4),
    )  # fmt: skip
    sweep.acklab(
        "explore", "--target", http_target, "--budget", "2", "--out", out, cwd=root, env=env, ok=(0, 1)
    )
    kill_a_lab_mid_run_then_janitor(sweep, sql_target, env)
    sweep.acklab(
        "evidence", "merge", *(s["bundle"] for s in shards), "--run-id", "merged", "--out", root / "merged",
        cwd=root, env=env,
    )  # fmt: skip
    sweep.acklab("history", shards[0]["run_id"], "--evidence", out, "--json", cwd=root, env=env)
    sweep.acklab("pages", "--evidence", out, "--out", root / "public", cwd=root, env=env)
    flow_and_pull(sweep, planted, env)
    sweep.acklab("janitor", "--out", out, cwd=root, env=env)
    sweep.left_in_tmp = sorted(str(p) for p in private_tmp.glob("acklab-service-log-*"))
    return sweep


def test_no_planted_value_is_in_any_byte_written(sweep):
    spellings = Planted().spellings()
    leaks = []
    scanned = 0
    for path in sorted(sweep.root.rglob("*")):
        # The flow's sandbox is a copy of this project, this test (and its planted values) included.
        if path.is_file() and not path.is_symlink() and path.name != Path(__file__).name:
            data = path.read_bytes()
            scanned += 1
            leaks += [(str(path), name) for spelling, name in spellings.items() if spelling.encode() in data]
    for where, text in sweep.extra_text.items():
        leaks += [(where, name) for spelling, name in spellings.items() if spelling in text]
    assert leaks == []
    assert scanned > 100
    names = {p.name for p in sweep.root.rglob("*")}
    assert {
        "journal.sqlite",
        "service.log",
        "trail.json",
        "junit.xml",
        "index.html",
        "manifest.json",
    } <= names


def test_no_planted_value_is_printed(sweep):
    spellings = Planted().spellings()
    leaks = [
        (" ".join(done.argv[:2]), stream, name)
        for done in sweep.done
        for stream, text in (("stdout", done.out), ("stderr", done.err))
        for spelling, name in spellings.items()
        if spelling in text
    ]
    assert leaks == []


def test_every_command_that_writes_ran(sweep):
    commands = {" ".join(d.argv[:2]) if d.argv[0] in ("evidence", "flow") else d.argv[0] for d in sweep.done}
    assert commands == {
        "run", "sweep", "explore", "janitor", "evidence merge", "history", "pages", "flow run", "evidence pull",
    }  # fmt: skip
    assert sweep.facts["experiments"] == sorted(
        ["lost-ack", "lost-ack-reset", "timeout-overlap", "concurrent-duplicates", "conflicting-payload",
         "replay", "crash-after-commit"]
    )  # fmt: skip
    assert sweep.facts["flow"] == "published"
    assert sweep.facts["pulled"] >= 2
    assert sweep.facts["storage saw a token"] is False


def test_the_service_log_is_kept_redacted_and_its_directory_is_removed(sweep):
    for log in sweep.facts["service.log"]:
        assert "keyed_service: starting with DATABASE_URL=" in log  # the service's own words
        assert "[redacted]" in log
        assert "X-GitHub-Delivery".lower() in log
    assert sweep.left_in_tmp == []
