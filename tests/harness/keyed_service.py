"""A realistic service behind API keys, for target specs with ``command:``, ``headers:`` and ``env:``.

``python -m tests.harness.keyed_service --port N`` serves on 127.0.0.1:N:

* ``POST /hooks?token=...`` — a GitHub-signed push (``X-Hub-Signature-256`` checked as GitHub
  documents it), accepted only with the right ``token`` in the URL, ``X-Api-Key`` and
  ``X-Tenant-Token``; dedupes by ``X-GitHub-Delivery`` with a unique receipt (409 to a
  different body under a used id) and records one push per event;
* ``GET /effects/{event_id}`` — ``{"count": n}``, only with ``X-Read-Key``.

Everything comes from the environment: ``DATABASE_URL`` (SQLite or PostgreSQL, a password
and all), ``SIGNING_SECRET``, ``URL_TOKEN``, ``HOOK_KEY``, ``TENANT_TOKEN``, ``READ_KEY``.
It is careless on purpose: it prints its configuration and every request's headers — the
secrets included — to stdout, which the lab keeps as ``service.log`` (redacted).
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import os
import sys

import uvicorn
from sqlalchemy import Column, MetaData, String, Table, create_engine, func, select
from sqlalchemy.exc import IntegrityError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

metadata = MetaData()
receipts = Table(
    "receipts",
    metadata,
    Column("event_id", String(128), primary_key=True),
    Column("body_sha256", String(64), nullable=False),
)
pushes = Table("pushes", metadata, Column("event_id", String(128), nullable=False))
EFFECTS_QUERY = "SELECT count(*) FROM pushes WHERE event_id = :event_id"


def app_from_env() -> Starlette:
    env = os.environ
    print(
        f"keyed_service: starting with DATABASE_URL={env['DATABASE_URL']} SIGNING_SECRET={env['SIGNING_SECRET']} "
        f"HOOK_KEY={env['HOOK_KEY']} TENANT_TOKEN={env['TENANT_TOKEN']} READ_KEY={env['READ_KEY']}",
        flush=True,
    )
    engine = create_engine(env["DATABASE_URL"], pool_size=10, max_overflow=10)
    metadata.create_all(engine)
    required = {"x-api-key": env["HOOK_KEY"], "x-tenant-token": env["TENANT_TOKEN"]}

    def receive(headers: dict[str, str], token: str, body: bytes) -> tuple[int, dict[str, str]]:
        print(f"keyed_service: POST /hooks token={token} headers={headers}", flush=True)
        if not hmac.compare_digest(token, env["URL_TOKEN"]):
            return 401, {"error": "token"}
        for name, value in required.items():
            if not hmac.compare_digest(headers.get(name, ""), value):
                return 401, {"error": name}
        expected = "sha256=" + hmac.new(env["SIGNING_SECRET"].encode(), body, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, headers.get("x-hub-signature-256", "")):
            return 401, {"error": "signature"}
        event_id, digest = headers["x-github-delivery"], hashlib.sha256(body).hexdigest()
        try:
            with engine.begin() as conn:
                conn.execute(receipts.insert().values(event_id=event_id, body_sha256=digest))
                conn.execute(pushes.insert().values(event_id=event_id))
        except IntegrityError:
            with engine.connect() as conn:
                stored = conn.execute(
                    select(receipts.c.body_sha256).where(receipts.c.event_id == event_id)
                ).scalar()
            return (200, {"status": "duplicate"}) if stored == digest else (409, {"error": "conflict"})
        return 200, {"status": "recorded"}

    async def hooks(request: Request) -> JSONResponse:
        body = await request.body()
        token = request.query_params.get("token", "")
        status, answer = await run_in_threadpool(receive, dict(request.headers), token, body)
        return JSONResponse(answer, status_code=status)

    def count(event_id: str) -> int:
        with engine.connect() as conn:
            query = select(func.count()).select_from(pushes).where(pushes.c.event_id == event_id)
            return int(conn.execute(query).scalar_one())

    async def effects(request: Request) -> JSONResponse:
        print(f"keyed_service: GET /effects headers={dict(request.headers)}", flush=True)
        if not hmac.compare_digest(request.headers.get("x-read-key", ""), env["READ_KEY"]):
            return JSONResponse({"error": "x-read-key"}, status_code=401)
        return JSONResponse({"count": await run_in_threadpool(count, request.path_params["event_id"])})

    return Starlette(
        routes=[
            Route("/hooks", hooks, methods=["POST"]),
            Route("/effects/{event_id}", effects, methods=["GET"]),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    uvicorn.run(app_from_env(), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
