"""A test handler as a service of its own, for target specs with ``command:``.

``python -m tests.harness.crash_service --variant receipt|no-dedupe --port N --db URL``
serves `handler_app` with uvicorn on 127.0.0.1:N; the signing secret comes from the
environment (ACKLAB_TEST_WEBHOOK_SECRET). ``--after-commit-ms`` is work the service does
after its handler committed and before the response is written (an email, a log flush),
the window in which the lab's SIGKILL must land. ``--once FILE``: the service starts only
once (it leaves FILE behind and refuses to start while FILE exists), like a service whose
restart fails on a lock file its crash left.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

import uvicorn
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tests.harness.handlers import NoDedupe, Receipt, Variant, handler_app

VARIANTS: dict[str, Variant] = {"receipt": Receipt(), "no-dedupe": NoDedupe()}


class AfterCommitWork:
    """Delays the start of every webhook response: the handler has returned (committed) by then."""

    def __init__(self, app: ASGIApp, delay_s: float) -> None:
        self.app, self.delay_s = app, delay_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def delayed(message: Message) -> None:
            if message["type"] == "http.response.start" and self.delay_s:
                await asyncio.sleep(self.delay_s)
            await send(message)

        webhook = scope["type"] == "http" and scope["method"] == "POST"
        await self.app(scope, receive, delayed if webhook else send)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--variant", choices=sorted(VARIANTS), required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--db", required=True)
    parser.add_argument("--after-commit-ms", type=int, default=0)
    parser.add_argument("--once", type=Path, default=None)
    args = parser.parse_args()
    if args.once is not None:
        if args.once.exists():
            sys.exit(f"refusing to start: {args.once} exists (left by a previous run that did not stop)")
        args.once.touch()
    app = handler_app(VARIANTS[args.variant], args.db, os.environ["ACKLAB_TEST_WEBHOOK_SECRET"])
    # What a real service says on start; the bundle's service.log must keep it.
    print(f"crash_service: serving the {args.variant} handler on port {args.port}", flush=True)
    uvicorn.run(
        AfterCommitWork(app, args.after_commit_ms / 1000),
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
    )


if __name__ == "__main__":
    main()
