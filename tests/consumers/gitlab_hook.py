"""A CI server's GitLab push hook: it starts one build per push, authenticated by token only.

GitLab's legacy webhook secret is a shared token sent as ``X-Gitlab-Token``: it proves who
sent the request, not what the body says. The hook compares it in constant time, dedupes by
``X-Gitlab-Event-UUID`` (GitLab reuses it on a manual resend, with ``Idempotency-Key``) and
records one build per push.

    ACKLAB_TEST_GITLAB_TOKEN=... python -m tests.consumers.gitlab_hook --port 9000 --db sqlite:////tmp/ci.db
"""

from __future__ import annotations

import argparse
import hmac
import json
import os

import uvicorn
from sqlalchemy import Column, Integer, MetaData, String, Table, create_engine
from sqlalchemy.exc import IntegrityError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

metadata = MetaData()
builds = Table(
    "builds",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("event_uuid", String(64), nullable=False, unique=True),
    Column("sha", String(64), nullable=False),
)
EFFECTS_QUERY = "SELECT count(*) FROM builds WHERE event_uuid = :event_id"


def create_app(db_url: str, token: str) -> Starlette:
    engine = create_engine(db_url, connect_args={"timeout": 30} if db_url.startswith("sqlite") else {})
    metadata.create_all(engine)

    def start_build(event_uuid: str, sha: str) -> None:
        try:
            with engine.begin() as conn:
                conn.execute(builds.insert().values(event_uuid=event_uuid, sha=sha))
        except IntegrityError:
            pass  # this push already has its build

    async def hook(request: Request) -> JSONResponse:
        given = request.headers.get("X-Gitlab-Token", "")
        if not hmac.compare_digest(given.encode(), token.encode()):
            return JSONResponse({"error": "invalid token"}, status_code=401)
        if not request.headers.get("X-Gitlab-Event", "").endswith("Hook"):
            return JSONResponse({"error": "not a GitLab hook"}, status_code=400)
        push = json.loads(await request.body())
        await run_in_threadpool(start_build, request.headers["X-Gitlab-Event-UUID"], push["checkout_sha"])
        return JSONResponse({"status": "build started"})

    return Starlette(routes=[Route("/hooks/gitlab", hook, methods=["POST"])])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--db", required=True)
    args = parser.parse_args()
    app = create_app(args.db, os.environ["ACKLAB_TEST_GITLAB_TOKEN"])
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
