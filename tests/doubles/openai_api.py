"""An OpenAI-compatible chat-completions double: a real HTTP server that answers from a script.

    with openai_double(["```diff\n...\n```", "prose"], api_key="sk-test") as llm:
        env = {"ACKLAB_LLM_BASE_URL": llm.base_url, "ACKLAB_LLM_MODEL": llm.model, ...}

Each POST /v1/chat/completions takes the next scripted reply and answers in the
chat-completions format with a `usage` block (token counts are word counts, so tests can
predict them). Every request is kept (its JSON body and whether it carried the right key);
a reply past the end of the script is a 500, so a test sees an unexpected extra call.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from tests.doubles.gitlab.server import serve


@dataclass
class ScriptedModel:
    """The script, and what the double was asked."""

    replies: list[str]
    model: str = "double-gpt"
    api_key: str | None = None
    base_url: str = ""
    requests: list[dict[str, Any]] = field(default_factory=list)
    delay_s: float = 0.0  # how long each answer takes (a model slower than the flow's timeout)
    lock: threading.Lock = field(default_factory=threading.Lock)
    _ids: itertools.count[int] = field(default_factory=itertools.count)

    @property
    def calls(self) -> int:
        return len(self.requests)

    def prompt(self, index: int) -> str:
        """The whole prompt (system + user messages) of call `index`."""
        return "\n".join(m["content"] for m in self.requests[index]["body"]["messages"])


def _words(text: str) -> int:
    return len(text.split())


def create_app(script: ScriptedModel) -> FastAPI:
    app = FastAPI(title="OpenAI-compatible double", openapi_url=None, docs_url=None, redoc_url=None)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> JSONResponse:
        body = await request.json()
        authorization = request.headers.get("authorization", "")
        with script.lock:
            index = len(script.requests)
            script.requests.append({"body": body, "authorized": authorization == f"Bearer {script.api_key}"})
        if script.api_key is not None and authorization != f"Bearer {script.api_key}":
            return JSONResponse(
                {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}}, 401
            )
        if index >= len(script.replies):
            return JSONResponse(
                {"error": {"message": "the script has no reply left", "type": "server_error"}}, 500
            )
        reply = script.replies[index]
        if script.delay_s:
            await asyncio.sleep(script.delay_s)
        prompt_tokens = sum(_words(m.get("content", "")) for m in body.get("messages", []))
        return JSONResponse(
            {
                "id": f"chatcmpl-double-{next(script._ids)}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model", script.model),
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}
                ],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": _words(reply),
                    "total_tokens": prompt_tokens + _words(reply),
                },
            }
        )

    return app


@contextmanager
def openai_double(
    replies: list[str], *, api_key: str | None = None, model: str = "double-gpt", delay_s: float = 0.0
) -> Iterator[ScriptedModel]:
    """Serve the script on 127.0.0.1; `base_url` ends in /v1, as OpenAI's does."""
    script = ScriptedModel(replies=list(replies), model=model, api_key=api_key, delay_s=delay_s)
    with serve(create_app(script)) as url:
        script.base_url = f"{url}/v1"
        yield script
