"""The `llm` proposer: any OpenAI-compatible chat-completions endpoint, over httpx.

Configured from the environment: ACKLAB_LLM_BASE_URL (e.g. https://api.openai.com/v1),
ACKLAB_LLM_MODEL and ACKLAB_LLM_API_KEY (optional for local servers). The reply must carry
exactly one unified diff in a ```diff fenced block. Every call is shown on stderr as it
happens and recorded (model, tokens from `usage`, latency). The key goes into the
Authorization header and nowhere else.
"""

from __future__ import annotations

import os
import re
import sys
import time
from typing import Any, TextIO

import httpx

from acklab.evidence.loading import INPUT, DocumentError, parse_json
from acklab.flows.diffs import fenced_diffs
from acklab.flows.errors import FlowSpecInvalid, ModelReplyInvalid, ProposerUnavailable
from acklab.flows.escape import one_line, visible
from acklab.flows.spec import LLMSettings

from .base import LLMCall, Proposal, ProposalRequest

SYSTEM_PROMPT = """\
You repair webhook handlers so that one event has at most one side effect, and every
acknowledged event has exactly one, under retries, lost acknowledgements, concurrent
duplicates and conflicting payloads under a reused event id.

Answer with exactly one unified diff in a ```diff fenced block, in git's format
(diff --git a/PATH b/PATH, --- a/PATH, +++ b/PATH, @@ hunks), and a short explanation.
Rules a fixed guard enforces (a violating diff is rejected):
- change only these paths: {allow}
- never touch: {deny}
- at most {max_files} file(s) and {max_lines} changed lines
- no new, deleted or renamed files, no mode changes, no binary patches
- the result must parse as Python and be ruff-clean
- the patched file may import only what the allowlist below lists, name by name; never the
  interpreter's machinery (sys, os, atexit, signal, importlib, ctypes, gc, builtins,
  subprocess, socket, inspect, threading), no exec/eval/compile/__import__, globals(), vars(),
  setattr/delattr, open, no private or dunder attribute, no getattr with a computed name
- the lab counts effects from a schema it pinned: do not create, rename or drop tables, views or
  triggers; claim the event in the same transaction as its effect instead
- work through the session or connection the handler is given: never the driver beneath it
  (.dialect, .dbapi, .driver_connection, .raw_connection(), an attribute .connection); raw SQL
  is one literal with bound parameters, never DDL, PRAGMA, ATTACH or COPY
"""


class LLMProposer:
    """Asks a chat-completions endpoint for one diff."""

    name = "llm"

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None,
        settings: LLMSettings | None = None,
        transport: httpx.BaseTransport | None = None,
        echo: TextIO | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.settings = settings or LLMSettings()
        self._api_key = api_key
        self._transport = transport
        self._echo = echo

    @classmethod
    def from_env(cls, settings: LLMSettings, env: dict[str, str] | None = None) -> LLMProposer:
        env = dict(os.environ) if env is None else env
        missing = [v for v in ("ACKLAB_LLM_BASE_URL", "ACKLAB_LLM_MODEL") if not env.get(v)]
        if missing:
            raise FlowSpecInvalid(
                f"the llm proposer needs {' and '.join(missing)}; set e.g. "
                "ACKLAB_LLM_BASE_URL=https://api.openai.com/v1 ACKLAB_LLM_MODEL=gpt-4o-mini "
                "(and ACKLAB_LLM_API_KEY), or use --proposer recipe"
            )
        return cls(
            base_url=env["ACKLAB_LLM_BASE_URL"],
            model=env["ACKLAB_LLM_MODEL"],
            api_key=env.get("ACKLAB_LLM_API_KEY") or None,
            settings=settings,
        )

    def _say(self, message: str) -> None:
        stream = self._echo or sys.stderr
        stream.write(f"llm: {visible(message, keep_newlines=False)}\n")
        stream.flush()

    def messages(self, request: ProposalRequest) -> list[dict[str, str]]:
        system = SYSTEM_PROMPT.format(
            allow=", ".join(request.scope.allow),
            deny=", ".join(request.scope.deny) or "(nothing else listed)",
            max_files=request.limits.max_files,
            max_lines=request.limits.max_changed_lines,
        )
        parts = [
            f"The lab's experiments {', '.join(request.failing_experiments)} fail on the current head.",
            f"Incident summary:\n{request.incident_summary}",
            f"The handler, {request.handler_path}, at the expected head:\n```python\n{request.handler_source}```",
        ]
        if request.target_brief:
            parts.append(
                f"How the lab counts effects and what it expects (the target spec):\n{request.target_brief}"
            )
        if request.imports:
            parts.append(
                "The patched file may import only:\n" + "\n".join(f"- {line}" for line in request.imports)
            )
        if request.rejection_reasons:
            reasons = "\n".join(f"- {r}" for r in request.rejection_reasons)
            parts.append(f"Your previous proposal was rejected by the scope guard:\n{reasons}\nFix that.")
        if request.feedback:
            parts.append(f"The approver asked for changes:\n{request.feedback}")
        parts.append(f"Reply with one ```diff block that changes {request.handler_path} only.")
        return [{"role": "system", "content": system}, {"role": "user", "content": "\n\n".join(parts)}]

    def propose(self, request: ProposalRequest) -> Proposal:
        reply, call = self._complete(self.messages(request), attempt=request.attempt)
        blocks = fenced_diffs(reply)
        problems: tuple[str, ...] = ()
        diff = ""
        if not blocks:
            problems = ("the model's reply carries no ```diff fenced block",)
        elif len(blocks) > 1:
            problems = (f"the model's reply carries {len(blocks)} ```diff blocks; exactly one is expected",)
        else:
            diff = blocks[0]
        rationale = _prose(reply)
        return Proposal(proposer="llm", diff=diff, rationale=rationale, llm_calls=(call,), problems=problems)

    def _complete(self, messages: list[dict[str, str]], *, attempt: int) -> tuple[str, LLMCall]:
        url = f"{self.base_url}/chat/completions"
        headers = {"Content-Type": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "temperature": self.settings.temperature,
            "max_tokens": self.settings.max_tokens,
        }
        self._say(f"asking {self.model} at {self.base_url} (attempt {attempt}) ...")
        started = time.perf_counter()
        try:
            with (
                httpx.Client(timeout=self.settings.timeout_s, transport=self._transport) as client,
                client.stream("POST", url, json=body, headers=headers) as response,
            ):
                reply = _read_capped(response, INPUT.max_bytes)
        except httpx.HTTPError as exc:
            raise ProposerUnavailable(
                f"cannot reach the model endpoint {url}: {type(exc).__name__}: {exc}; "
                "check ACKLAB_LLM_BASE_URL, or use --proposer recipe"
            ) from exc
        latency_ms = round((time.perf_counter() - started) * 1000, 3)
        excerpt = reply[:300].decode("utf-8", errors="replace")
        if response.status_code != 200:
            raise ProposerUnavailable(
                f"the model endpoint {url} answered HTTP {response.status_code}: "
                f"{excerpt!r}; check ACKLAB_LLM_MODEL and ACKLAB_LLM_API_KEY"
            )
        if len(reply) > INPUT.max_bytes:
            raise ModelReplyInvalid(
                f"the model endpoint {url} answered more than {INPUT.describe_size()}; acklab refuses the reply"
            )
        try:
            doc = parse_json(reply, source=f"the reply of {url}", limits=INPUT)
        except DocumentError as exc:
            raise ModelReplyInvalid(f"{exc}; the reply began {excerpt!r}") from exc
        try:
            content = doc["choices"][0]["message"]["content"] or ""
        except (KeyError, IndexError, TypeError) as exc:
            raise ProposerUnavailable(
                f"the model endpoint {url} did not answer in the chat-completions format: {excerpt!r}"
            ) from exc
        usage = doc.get("usage") if isinstance(doc.get("usage"), dict) else {}
        call = LLMCall(
            # The endpoint names the model: what it says is shown and recorded escaped.
            model=one_line(str(doc.get("model") or self.model), limit=200),
            prompt_tokens=_int(usage.get("prompt_tokens")),
            completion_tokens=_int(usage.get("completion_tokens")),
            latency_ms=latency_ms,
        )
        self._say(
            f"{call.model} answered in {latency_ms:.0f} ms "
            f"(prompt {call.prompt_tokens} tokens, completion {call.completion_tokens} tokens)"
        )
        return str(content), call


def _read_capped(response: httpx.Response, cap: int) -> bytes:
    """The body, read while streaming up to one byte past `cap` (a huge reply is never buffered)."""
    chunks: list[bytes] = []
    size = 0
    for chunk in response.iter_bytes():
        chunks.append(chunk)
        size += len(chunk)
        if size > cap:
            break
    return b"".join(chunks)[: cap + 1]


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and value >= 0 else None


def _prose(reply: str) -> str:
    """The reply without its fenced blocks: the model's explanation, trimmed."""
    text = re.sub(r"```.*?```", "", reply, flags=re.DOTALL).strip()
    return text[:2000]
