"""A GitLab Duo flow run the way the Duo Workflow Service runs one, against the doubles.

Only the service and its executor are stood in for; everything a flow starts is real (the
commands, git, acklab, the GitLab double over HTTP, the OpenAI-compatible double). The rules
are the ones flows/duo/SOURCES.md cites:

- the flow file is checked first (`flow_file.load`: the custom-flow schema, the references);
- components run in router order from `flow.entry_point` until `end` (COMPLETED) or
  `abort` (ERROR); a conditional router sends a value none of its routes names to
  `default_route`, and the flow fails without one (`RouteMissing`);
- a `DeterministicStepComponent` with `run_command` takes its parameters from its inputs (a
  literal's text, else the flow state at the path) and runs `command` with a shell in the
  workload's checkout, under `timeout` seconds (the tool's default: 120). A non-zero exit or
  the timeout makes `execution_result` "failed", the output kept in `tool_responses`. A
  command past its timeout gets SIGTERM, then SIGKILL after a grace period, its whole
  process group;
- an `AgentComponent` without tools gets one chat completion of its local prompt (system and
  user templates rendered with its inputs) from the model: its answer is `final_answer`;
- a `HumanInputComponent` renders `message_template` (Jinja2) with its inputs and the test
  answers it: "approve" or "reject" in `context:NAME.approval`;
- every command sees a flow's environment only (`flow_environment`): GitLab's URL, the OAuth
  token, the `DUO_WORKFLOW_*` variables and the goal; none of the project's CI/CD variables.

The workload itself is a depth-1 clone of a ref of its own (`refs/workloads/ID`), as the
runner makes it (`clone_workload`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from jinja2 import StrictUndefined
from jinja2.sandbox import SandboxedEnvironment

from tests.doubles.duo import flow_file

DEFAULT_TIMEOUT_S = 120  # the command tool's default (duo_workflow_service/tools/command.py)
GRACE_S = 20.0  # SIGTERM, then this long before SIGKILL
MAX_OUTPUT = 1 << 20


class RouteMissing(RuntimeError):
    """A conditional router met a value none of its routes names and has no default_route."""


@dataclass
class Step:
    """One component's run: what ran and how it ended."""

    name: str
    kind: str
    result: str  # success | failed | approve | reject | answered
    command: str | None = None
    seconds: float = 0.0
    timed_out: bool = False
    session: int | None = None  # a command's session (its process group): none of it may outlive it


@dataclass
class FlowRun:
    """How the flow ended: its status, the components in the order they ran, its state."""

    status: str  # COMPLETED (end) | ERROR (abort)
    steps: list[Step] = field(default_factory=list)
    context: dict[str, Any] = field(default_factory=dict)

    def step(self, name: str) -> Step:
        return next(s for s in self.steps if s.name == name)


@dataclass(frozen=True)
class Model:
    """Where the agent's model answers (an OpenAI-compatible endpoint)."""

    base_url: str
    name: str
    api_key: str | None = None


def flow_environment(
    *, gitlab_url: str, oauth_token: str, project_id: int, project_path: str, goal: str, home: Path
) -> dict[str, str]:
    """The environment of a flow's commands (user/duo_agent_platform/flows/execution/
    execution-variables): the executor's PATH and locale, a HOME, and the Agent Platform's
    variables; no CI/CD variable of the project, no CI_SERVER_URL, no GITLAB_USER_LOGIN."""
    return {
        "PATH": os.environ["PATH"],
        "LANG": "C.UTF-8",
        "HOME": str(home),
        "GITLAB_BASE_URL": gitlab_url,
        "GITLAB_PROJECT_PATH": project_path,
        "GITLAB_TOKEN": oauth_token,
        "DUO_WORKFLOW_GIT_HTTP_BASE_URL": gitlab_url,
        "DUO_WORKFLOW_GIT_HTTP_USER": "oauth",
        "DUO_WORKFLOW_GIT_HTTP_PASSWORD": oauth_token,
        "DUO_WORKFLOW_PROJECT_ID": str(project_id),
        "DUO_WORKFLOW_NAMESPACE_ID": "7",
        "DUO_WORKFLOW_GOAL": goal,
        "DUO_WORKFLOW_DEFINITION": "acklab-scoped-repair/v1",
        "DUO_WORKFLOW_SERVICE_REALM": "self-managed",
        "DUO_WORKFLOW_GIT_USER_NAME": "Jane Developer",
        "DUO_WORKFLOW_GIT_USER_EMAIL": "jane@example.com",
        "DUO_WORKFLOW_GIT_AUTHOR_USER_NAME": "Duo acklab repair",
        "DUO_WORKFLOW_GIT_AUTHOR_EMAIL": "service_account_group_7@noreply.gitlab.example",
        "AGENT_PLATFORM_GITLAB_VERSION": "19.2.0",
    }


def clone_workload(bare: Path, git_url: str, workload_id: str, where: Path, *, at: str = "main") -> Path:
    """The runner's checkout: GitLab makes `refs/workloads/ID` (here at branch `at`) and the
    runner fetches it at depth 1 from the project's git URL, detached."""
    subprocess.run(
        ["git", "--git-dir", str(bare), "update-ref", f"refs/workloads/{workload_id}", f"refs/heads/{at}"],
        check=True,
        timeout=60,
    )
    where.mkdir(parents=True)
    for args in (
        ["init", "-q", "-b", "workload"],
        ["remote", "add", "origin", git_url],
        ["fetch", "-q", "--depth=1", "origin", f"refs/workloads/{workload_id}"],
        ["checkout", "-q", "--detach", "FETCH_HEAD"],
    ):
        subprocess.run(["git", "-C", str(where), *args], check=True, capture_output=True, timeout=120)
    return where


class Workload:
    """Runs one flow file in one checkout, with a flow's environment."""

    def __init__(
        self,
        checkout: Path,
        env: Mapping[str, str],
        *,
        model: Model,
        answer: Callable[[str, str], str],
    ) -> None:
        self.checkout = checkout
        self.env = dict(env)
        self.model = model
        self.answer = answer  # (component name, rendered message) -> "approve" | "reject"
        self.templates = SandboxedEnvironment(undefined=StrictUndefined, autoescape=False)  # nosec B701

    def run(self, flow_path: Path) -> FlowRun:
        doc = flow_file.load(flow_path)
        components = {c["name"]: c for c in doc["components"]}
        routers = {r["from"]: r for r in doc["routers"]}
        prompts = {p["prompt_id"]: p for p in doc.get("prompts") or []}
        run = FlowRun(status="", context={"goal": self.env["DUO_WORKFLOW_GOAL"]})
        current = doc["flow"]["entry_point"]
        while current not in flow_file.BUILT_IN:
            component = components[current]
            run.steps.append(self._run_component(component, prompts, run.context))
            current = self._route(routers[current], run)
        run.status = "COMPLETED" if current == "end" else "ERROR"
        return run

    def _route(self, router: dict[str, Any], run: FlowRun) -> str:
        if "to" in router:
            return str(router["to"])
        value = str(self._value(router["condition"]["input"], run.context))
        routes = router["condition"]["routes"]
        if value in routes:
            return str(routes[value])
        if "default_route" in routes:
            return str(routes["default_route"])
        raise RouteMissing(f"route value {value!r} of {router['from']!r} is none of {sorted(routes)}")

    def _value(self, path: str, context: dict[str, Any]) -> Any:
        target, _, rest = path.partition(":")
        if target != "context":
            raise ValueError(f"this double reads context: inputs only; got {path!r}")
        node: Any = context
        for key in rest.split("."):
            node = node[key]  # a path that does not exist fails the flow, as in the service
        return node

    def _inputs(self, component: dict[str, Any], context: dict[str, Any]) -> dict[str, Any]:
        values = {}
        for given in component.get("inputs", []):
            entry = {"from": given} if isinstance(given, str) else given
            name = entry.get("as") or entry["from"].rpartition(".")[2].rpartition(":")[2]
            values[name] = entry["from"] if entry.get("literal") else self._value(entry["from"], context)
        return values

    def _run_component(
        self, component: dict[str, Any], prompts: dict[str, Any], context: dict[str, Any]
    ) -> Step:
        kind, name = component["type"], component["name"]
        inputs = self._inputs(component, context)
        if kind == "DeterministicStepComponent" and component["tool_name"] == "run_command":
            step, output = self._command(name, inputs)
            context[name] = {
                "tool_responses": output,
                "error": None if step.result == "success" else output[-2000:],
                "execution_result": step.result,
            }
            return step
        if kind == "AgentComponent" and not component.get("toolset"):
            answer = self._ask_model(prompts[component["prompt_id"]], inputs)
            context[name] = {"final_answer": answer}
            return Step(name, kind, "answered")
        if kind == "HumanInputComponent":
            message = self.templates.from_string(component["message_template"]).render(**inputs)
            decision = self.answer(name, message)
            context[name] = {"approval": decision, "message": message}
            return Step(name, kind, decision)
        raise NotImplementedError(f"this double does not run {kind} {name!r}")

    def _command(self, name: str, parameters: dict[str, Any]) -> tuple[Step, str]:
        command = str(parameters["command"])
        timeout = int(parameters.get("timeout", DEFAULT_TIMEOUT_S))
        started = time.monotonic()
        # The tool runs a shell command, as the executor does.
        process = subprocess.Popen(
            ["bash", "-c", command],
            cwd=self.checkout,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        timed_out = False
        try:
            output, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            output = self._stop(process)
        text = output.decode("utf-8", "replace")[-MAX_OUTPUT:]
        result = "success" if process.returncode == 0 and not timed_out else "failed"
        if timed_out:
            text += f"\nAction error: the command did not finish within its timeout of {timeout} s"
        step = Step(
            name,
            "DeterministicStepComponent",
            result,
            command,
            time.monotonic() - started,
            timed_out,
            process.pid,
        )
        return step, text

    @staticmethod
    def _stop(process: subprocess.Popen[bytes]) -> bytes:
        """SIGTERM to the command's process group, SIGKILL after the grace period."""
        os.killpg(process.pid, signal.SIGTERM)
        try:
            output, _ = process.communicate(timeout=GRACE_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            try:
                output, _ = process.communicate(timeout=GRACE_S)
            except subprocess.TimeoutExpired:  # something outside the group holds the pipe
                process.kill()
                output = b""
        return output

    def _ask_model(self, prompt: dict[str, Any], inputs: dict[str, Any]) -> str:
        template = prompt["prompt_template"]
        messages = [
            {"role": role, "content": self.templates.from_string(template[role]).render(**inputs)}
            for role in ("system", "user")
            if role in template
        ]
        headers = {"Authorization": f"Bearer {self.model.api_key}"} if self.model.api_key else {}
        timeout = float((prompt.get("params") or {}).get("timeout", 120))
        reply = httpx.post(
            f"{self.model.base_url}/chat/completions",
            json={"model": self.model.name, "messages": messages},
            headers=headers,
            timeout=timeout,
        )
        reply.raise_for_status()
        return str(reply.json()["choices"][0]["message"]["content"])
