"""Documents beside the runs in the sample evidence: reports, CI variables and a repair trail."""

from __future__ import annotations

import zlib
from datetime import UTC, datetime, timedelta
from typing import Any

BASE_TIME = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
XSS_SCRIPT = "<script>window.__xss=1</script>"
XSS_ATTR = '"><img src=x onerror="window.__xss=1">'


def ts(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def code_quality(n: int) -> list[dict[str, Any]]:
    return [
        {
            "description": f"`subprocess` call with shell=True (finding {i})",
            "check_name": "S602",
            "fingerprint": f"{zlib.crc32(str(i).encode()):08x}",
            "severity": ("minor", "major", "critical")[i % 3],
            "location": {"path": "app/webhooks.py", "lines": {"begin": 10 + i}},
        }
        for i in range(n)
    ]


def sast(n: int) -> dict[str, Any]:
    return {
        "version": "15.2.1",
        "vulnerabilities": [
            {
                "id": f"00000000-0000-4000-8000-{i:012d}",
                "name": "Use of assert detected",
                "description": "assert is removed when compiling to optimised byte code",
                "severity": ("Low", "Medium", "High")[i % 3],
                "identifiers": [{"type": "bandit_test_id", "name": "Bandit Test ID B101", "value": "B101"}],
                "location": {"file": "app/webhooks.py", "start_line": 20 + i},
            }
            for i in range(n)
        ],
        "scan": {
            "analyzer": {"id": "bandit", "name": "bandit", "vendor": {"name": "PyCQA"}, "version": "1.9.4"},
            "scanner": {"id": "bandit", "name": "bandit", "vendor": {"name": "PyCQA"}, "version": "1.9.4"},
            "type": "sast",
            "start_time": "2026-01-05T09:00:00",
            "end_time": "2026-01-05T09:00:02",
            "status": "success",
        },
    }


def ci_env(pipeline: int, job: int, commit: str) -> dict[str, str]:
    return {
        "CI_PIPELINE_ID": str(pipeline),
        "CI_JOB_ID": str(job),
        "CI_JOB_NAME": "acklab:experiments",
        "CI_COMMIT_SHA": commit,
        "CI_PROJECT_PATH": "acme/shop",
        "CI_MERGE_REQUEST_IID": "12",
        "CI_PIPELINE_URL": f"https://gitlab.example/acme/shop/-/pipelines/{pipeline}",
    }


DIFF = """--- a/app/webhooks.py
+++ b/app/webhooks.py
@@ -40,7 +40,12 @@ def receive(event: Event, db: Session) -> Response:
-    fulfil(db, event)
-    db.commit()
+    receipt = Receipt(event_id=event.id, body_sha256=event.body_sha256)
+    db.add(receipt)
+    try:
+        fulfil(db, event)
+        db.commit()
+    except IntegrityError:
+        db.rollback()
+        return duplicate_response(db, event)
     return Response(status_code=200)
"""


CHECKS = [
    {"name": "pytest", "argv": ["python", "-m", "pytest", "-q", "tests/app"], "status": "ok", "exit_code": 0,
     "duration_ms": 31052.3, "log": "checks/pytest.log"},
    {"name": "ruff", "argv": ["python", "-m", "ruff", "check", "app/webhooks.py"], "status": "ok", "exit_code": 0,
     "duration_ms": 98.0, "log": "checks/ruff.log"},
]  # fmt: skip


def _run(experiment: str, side: str) -> dict[str, Any]:
    """An experiment record as the repair flow writes it, naming a sample incident (run 0)."""
    failing = side == "unsafe"
    bundle = f"run-0000-{side}"
    return {
        "name": experiment,
        "verdict": "fail" if failing else "pass",
        "violations": 3 if failing else 0,
        "trials": 3,
        "latency": {"deliveries": 6, "p50_ms": 20.5, "p95_ms": 35.0},
        "incident": f"{bundle}/incidents/{bundle}-fixture-{side}-{experiment}.json",
    }


def _compared(experiment: str) -> dict[str, Any]:
    return {
        "experiment": experiment,
        "before": "fail",
        "after": "pass",
        "latency_before": {"deliveries": 2, "p50_ms": 7.7, "p95_ms": 13.4},
        "latency_after": {"deliveries": 2, "p50_ms": 14.5, "p95_ms": 20.6},
        "status": "held",
        "violations_after": 0,
    }


def make_trail(run_id: str, created: datetime, *, hostile: bool = False) -> dict[str, Any]:
    """A repair trail in the shape of evidence/schemas/trail.schema.json."""
    names = ["reproduce", "propose", "approve", "apply", "verify", "strike-again", "publish"]
    checkpoints = []
    moment = created
    for n, name in enumerate(names):
        duration = 400.0 + 300 * n
        end = moment + timedelta(milliseconds=duration)
        decision = None
        if name == "approve":
            decision = {
                "decision": "approve",
                "actor": "release-bot",
                "delegated_by": "alice",
                "source": "file",
                "reason": XSS_SCRIPT if hostile else "receipt table keeps one fulfillment per event",
                "proposal": "p1",
                "decided_at": ts(end),
            }
        outputs: dict[str, Any] = {}
        if name == "reproduce":
            outputs = {
                "experiments": [_run("lost-ack", "unsafe")],
                "failing": ["lost-ack"],
                "verdict": "fail",
            }
        elif name == "verify":
            outputs = {"checks": CHECKS, "experiments": [_run("lost-ack", "live")], "verdict": "pass"}
        elif name == "strike-again":
            outputs = {
                "before": {"experiments": [_run("replay", "unsafe")], "verdict": "fail"},
                "after": {"experiments": [_run("replay", "live")], "verdict": "pass"},
                "aimed": [_compared("lost-ack")],
                "experiments": [_compared("replay")],
                "gaps": [],
            }
        checkpoints.append(
            {
                "name": name,
                "started_at": ts(moment),
                "ended_at": ts(end),
                "duration_ms": duration,
                "status": "ok",
                "input_hashes": {"app/webhooks.py": "ab" * 32},
                "outputs": outputs,
                "decision": decision,
                "error": None,
            }
        )
        moment = end
    return {
        "schema": "acklab/trail/v1",
        "flow": "repair-webhooks",
        "run_id": run_id,
        "started_at": ts(created),
        "ended_at": ts(moment),
        "target": "fixture:live",
        "scope": {"allow": ["app/webhooks.py"], "deny": ["app/unsafe.py"]},
        "expected_head_sha": "0123abcd" * 5,
        "merge_request": {
            "project": "acme/shop",
            "iid": 12,
            "web_url": "https://gitlab.example/acme/shop/-/merge_requests/12",
        },
        "checkpoints": checkpoints,
        "proposals": [
            {
                "id": "p1",
                "proposer": "recipe",
                "recipe": "receipt-handler",
                "diff": DIFF + (XSS_SCRIPT if hostile else ""),
                "files": ["app/webhooks.py"],
                "guard": {"allowed": True, "reasons": ["app/webhooks.py matches allow glob app/webhooks.py"]},
                "llm_calls": [],
            }
        ],
        "outcome": "published",
        "outcome_detail": "the verified patch reached merge request !12",
        "exit_code": 0,
    }
