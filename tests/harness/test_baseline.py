"""``acklab run --baseline REF``: before and after your own fix, one plan, one comparison.

A user's repository (git init in a temporary directory) holds a shop served by gunicorn: its
last commit fulfils every delivery, the working tree claims each event first. One command
attacks both revisions with the same seed and bundles them as one comparison.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from acklab.evidence.documents.comparison import ComparisonDocument
from acklab.evidence.loading import load_evidence_json
from tests.consumers.scenarios import ROOT, SECRETS

SHOP_SOURCE = ROOT / "tests" / "consumers" / "migrated_shop.py"


def git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
    }
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env
    ).stdout


# Both revisions say, at import, who they run as and which variables they were given (service.log).
PROBE = (
    "import json as _json, os as _os, sys as _sys\n"
    "print('acklab-probe', _json.dumps({'uid': _os.getuid(), 'env': sorted(_os.environ)}), file=_sys.stderr)\n"
)
CANARIES = {
    "ACKLAB_MANIFEST_KEY": "canary-manifest-key",
    "GITLAB_TOKEN": "glpat-canary",
    "CI_JOB_TOKEN": "canary",
}


def shop_repo(tmp: Path) -> Path:
    """A repository whose HEAD ships every delivery and whose working tree claims events first."""
    repo = tmp / "shop"
    (repo / "shop").mkdir(parents=True)
    (repo / "shop" / "__init__.py").write_text("")
    buggy = SHOP_SOURCE.read_text().replace('os.environ.get("SHOP_DEDUPE", "claim")', '"none"')
    (repo / "shop" / "app.py").write_text(buggy + PROBE)
    spec = {
        "apiVersion": "acklab/v1",
        "kind": "target",
        "name": "shop",
        "endpoint": "http://127.0.0.1:{{port}}/hooks",
        "signing": {"scheme": "standard", "secret": "env:ACKLAB_TEST_WEBHOOK_SECRET"},
        "event": {"id": "{{event_id}}", "type": "order.paid", "data": {"order_id": "{{order_id}}"}},
        "setup": {"argv": [sys.executable, "-c", "from shop.app import migrate; migrate()"]},
        "command": {
            "argv": [
                *(sys.executable, "-m", "gunicorn", "--workers", "2", "--bind", "127.0.0.1:{{port}}"),
                *("--log-level", "warning", "shop.app:create_app()"),
            ],
            "env": {"SHOP_DB_URL": "sqlite:///{{scratch}}/shop.db", "PYTHONPATH": "."},
            "ready": {"url": "http://127.0.0.1:{{port}}/health", "status": [200]},
            "ready_timeout_s": 30,
        },
        "effects": {
            "sql": {
                "url": "sqlite:///{{scratch}}/shop.db",
                "count": "SELECT count(*) FROM shipments WHERE event_id = :event_id",
            }
        },
    }
    (repo / "shop.target.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    git(repo.parent, "init", "-q", str(repo))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "ship on every delivery")
    (repo / "shop" / "app.py").write_text(SHOP_SOURCE.read_text() + PROBE)  # the fix, not committed yet
    return repo


def acklab(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **SECRETS, **CANARIES}
    exe = shutil.which("acklab", path=str(Path(sys.executable).parent)) or "acklab"
    return subprocess.run(
        [exe, *args], cwd=repo, capture_output=True, text=True, env=env, timeout=600, check=False
    )


@pytest.mark.slow  # two real runs, each side served
def test_baseline_attacks_head_and_the_working_tree_with_one_plan(tmp_path: Path) -> None:
    repo = shop_repo(tmp_path)
    before = git(repo, "status", "--porcelain")
    done = acklab(
        repo,
        "run",
        "--target",
        "shop.target.yaml",
        "--baseline",
        "HEAD",
        "--experiment",
        "lost-ack",
        "--trials",
        "2",
        "--out",
        str(tmp_path / "out"),
        "--json",
    )
    assert done.returncode == 0, done.stderr  # the working tree's verdict: the fix holds
    result = json.loads(done.stdout)
    assert result["verdict"] == "pass"
    [baseline] = result["compared"]
    assert baseline["verdict"] == "fail"  # HEAD ships twice under a lost acknowledgement
    comparison = Path(result["comparison"])
    doc = ComparisonDocument.read(load_evidence_json(comparison / "comparison.json"), what="comparison")
    head = git(repo, "rev-parse", "HEAD").strip()
    assert doc.targets == ["shop.target.yaml: working tree", f"shop.target.yaml: HEAD {head[:8]}"]
    # Each side named before its run's own output, and both verdicts with their names at the end.
    assert f"baseline: HEAD {head[:8]} (its code checked out in a worktree)" in done.stderr
    assert done.stderr.index(f"baseline: HEAD {head[:8]}") < done.stderr.index("baseline: working tree")
    assert f"shop.target.yaml: HEAD {head[:8]}: fail; shop.target.yaml: working tree: pass" in done.stderr
    assert len({r.run_id for r in doc.runs}) == 2
    sides = [
        load_evidence_json(next((comparison / run.bundle / "incidents").glob("*.json")))["target"]
        for run in doc.runs
    ]
    # The working tree (HEAD plus the uncommitted fix) first, then HEAD itself, pinned.
    assert [(t["commit_sha"], t.get("dirty")) for t in sides] == [(head, True), (head, False)]
    assert git(repo, "status", "--porcelain") == before  # the checkout is as it was
    assert "acklab-baseline" not in git(repo, "worktree", "list")
    # REF ran confined (the sandbox's user, an allowlisted environment); the working tree as the
    # user's own code, without the lab's credentials either.
    working_tree, ref = (probes(comparison / run.bundle / "service.log") for run in doc.runs)
    assert {p["uid"] for p in ref} == {pwd.getpwnam("acklab-sandbox").pw_uid} or os.geteuid() != 0
    for seen in (*working_tree, *ref):
        assert not set(seen["env"]) & set(CANARIES), seen["env"]
    assert len(ref[0]["env"]) < len(working_tree[0]["env"])  # an allowlist, not the lab's minus a list


def probes(log: Path) -> list[dict]:
    lines = [line for line in log.read_text().splitlines() if line.startswith("acklab-probe ")]
    assert lines, log.read_text()[-2000:]
    return [json.loads(line.split(" ", 1)[1]) for line in lines]


@pytest.mark.parametrize(
    ("ref", "message"),
    [("no-such-ref", "names no commit"), ("--help", "names no commit")],
    ids=["unknown", "option-like"],
)
def test_a_bad_ref_is_a_usage_error_naming_it(tmp_path: Path, ref: str, message: str) -> None:
    repo = shop_repo(tmp_path)
    done = acklab(
        repo, "run", "--target", "shop.target.yaml", f"--baseline={ref}", "--out", str(tmp_path / "o")
    )
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").glob("cmp-*"))


def test_a_spec_counting_in_a_fixed_database_is_refused(tmp_path: Path) -> None:
    repo = shop_repo(tmp_path)
    spec = repo / "shop.target.yaml"
    spec.write_text(
        spec.read_text().replace("sqlite:///{{scratch}}/shop.db", f"sqlite:///{tmp_path}/fixed.db")
    )
    done = acklab(
        repo, "run", "--target", "shop.target.yaml", "--baseline", "HEAD", "--out", str(tmp_path / "o")
    )
    assert done.returncode == 3, done.stderr
    assert "{{scratch}}" in done.stderr


@pytest.mark.slow  # two real runs, each side served
def test_the_fixture_baseline_serves_ref_from_a_worktree_of_this_checkout(tmp_path: Path) -> None:
    from acklab.flows.sandbox import choose
    from acklab.harness.engine.baseline import run_baseline
    from acklab.harness.engine.runner import RunOptions

    options = RunOptions(
        target="fixture:live", experiments=("lost-ack",), trials=1, out=tmp_path / "out", confinement=choose()
    )
    result = run_baseline(options, "HEAD")  # REF's fixture is served from a worktree: confined
    assert [r.verdict for r in result.runs] == ["pass", "pass"]
    served = [r.document.target for r in result.runs]
    assert served == ["fixture:live", "fixture:live"]
    assert (
        "served by its own process"
        in load_evidence_json(
            next((result.bundle / result.runs[1].bundle.name / "incidents").glob("*.json"))
        )["target"]["endpoint"]
    )
