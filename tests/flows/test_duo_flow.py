"""The GitLab Duo flow (flows/duo/repair-flow.yaml) as GitLab would take it: valid for the
project's schema of the custom-flow rules (a restricted field, a program/args step or a router
without default_route is refused with its line named), and giving a hosted agent nothing
beyond fixed acklab commands with explicit timeouts."""

from __future__ import annotations

import shlex
from pathlib import Path

import click
import pytest
import yaml

from acklab.cli import cli
from acklab.flows.spec import load_spec
from tests.doubles.duo import flow_file
from tests.flows.conftest import ROOT

FLOW_PATH = ROOT / "flows" / "duo" / "repair-flow.yaml"
TEXT = FLOW_PATH.read_text(encoding="utf-8")
FLOW = yaml.safe_load(TEXT)
COMMAND_TOOL_DEFAULT_S = 120  # what run_command allows without a timeout


def components() -> dict[str, dict]:
    return {c["name"]: c for c in FLOW["components"]}


def test_the_flow_file_passes_the_projects_schema_and_the_references_resolve() -> None:
    assert flow_file.problems(FLOW_PATH) == []


def line_of(text: str, needle: str) -> int:
    (index,) = [i for i, line in enumerate(text.splitlines(), start=1) if needle in line]
    return index


# Each change breaks one rule; the problem must name the line of the key at fault.
BROKEN = {
    "top-level name": (
        lambda t: t.replace("version: ", 'name: "acklab repair"\nversion: ', 1),
        'name: "acklab repair"',
    ),
    "top-level description": (
        lambda t: t.replace("environment: ambient", "environment: ambient\ndescription: repairs", 1),
        "description: repairs",
    ),
    "chat environment": (lambda t: t.replace("environment: ambient", "environment: chat", 1), "environment:"),
    "prompt model": (
        lambda t: t.replace("    unit_primitives: []", "    model: claude\n    unit_primitives: []", 1),
        "model: claude",
    ),
    "prompt stop": (lambda t: t.replace("      timeout: 120", "      stop: [END]", 1), "stop: [END]"),
    "program and args": (
        lambda t: t.replace(
            '      - from: "acklab flow run flows/repair.yaml --proposer recipe --mr goal --propose-only"\n'
            '        as: "command"',
            '      - from: "acklab"\n        as: "program"\n        literal: true\n'
            '      - from: "flow run flows/repair.yaml --mr goal --propose-only"\n        as: "args"',
            1,
        ),
        'as: "program"',
    ),
    "router without default_route": (
        lambda t: t.replace(
            '        "reject": "end"\n        "default_route": "end"\n', '        "reject": "end"\n', 1
        ),
        'input: "context:approve.approval"',
    ),
    "timeout that is not whole seconds": (
        lambda t: t.replace('- from: "1200"', '- from: "20 minutes"', 1),
        'from: "20 minutes"',
    ),
}


@pytest.mark.parametrize("broken", sorted(BROKEN))
def test_a_flow_gitlab_would_refuse_fails_with_the_line_named(tmp_path: Path, broken: str) -> None:
    change, needle = BROKEN[broken]
    text = change(TEXT)
    assert text != TEXT, f"the change for {broken!r} no longer applies to the flow file"
    path = tmp_path / "flow.yaml"
    path.write_text(text, encoding="utf-8")
    found = flow_file.problems(path)
    line = line_of(text, needle)
    if broken == "router without default_route":
        line += 1  # the `routes:` mapping that lacks it, under the condition's input
    assert found, broken
    assert any(problem.startswith(f"flow.yaml:{line}: ") for problem in found), (line, found)


def _commands() -> list[tuple[str, dict[str, str]]]:
    found = []
    for name, component in components().items():
        tools = [t if isinstance(t, str) else next(iter(t)) for t in component.get("toolset", [])]
        assert set(tools) <= {"run_command"}, name
        if component["type"] != "DeterministicStepComponent":
            continue
        assert component["tool_name"] == "run_command"
        inputs = {i["as"]: i for i in component["inputs"]}
        assert set(inputs) == {"command", "timeout"}, f"{name}: an explicit timeout, past the tool's default"
        assert all(i.get("literal") is True for i in inputs.values()), (
            "no argument may come from a model or the goal"
        )
        found.append((name, {key: i["from"] for key, i in inputs.items()}))
    return found


def test_every_step_runs_one_fixed_acklab_command_the_cli_accepts() -> None:
    commands = _commands()
    assert [name for name, _ in commands] == ["propose", "repair"]
    for _, parameters in commands:
        command = parameters["command"]
        # One program, no shell: nothing a shell would expand, chain or redirect.
        assert not set(command) & set("$`;|&<>(){}*?!~\\\"'\n")
        program, *args = shlex.split(command)
        assert program == "acklab"
        group: click.Command = cli
        ctx = None
        words = list(args)
        while isinstance(group, click.Group):
            ctx = click.Context(group, info_name=group.name, parent=ctx)
            sub = group.get_command(ctx, words[0])
            assert sub is not None, f"acklab has no command {words[0]!r}"
            group, words = sub, words[1:]
        group.make_context(group.name, list(words), parent=ctx)  # raises on an unknown option


def test_every_timeout_is_long_enough_for_its_step() -> None:
    timeouts = {name: int(parameters["timeout"]) for name, parameters in _commands()}
    spec = load_spec(ROOT / "flows" / "repair.yaml")
    assert timeouts["propose"] > COMMAND_TOOL_DEFAULT_S
    # apply, verify (each check may take verify.timeout_s), strike again before and after, publish
    assert timeouts["repair"] >= 3 * spec.verify_timeout_s
    assert timeouts["repair"] > timeouts["propose"]


@pytest.mark.parametrize(
    "forbidden", ["--decisions", "--local", "--proposer llm", "--unsandboxed", "--mr ci"]
)
def test_no_step_can_widen_what_acklab_does(forbidden: str) -> None:
    assert all(forbidden not in parameters["command"] for _, parameters in _commands())


def test_each_checkpoint_is_mapped_and_the_merge_request_comes_from_the_goal() -> None:
    commands = dict(_commands())
    assert commands["propose"]["command"].endswith("--mr goal --propose-only")  # reproduce, propose
    assert components()["approve"]["type"] == "HumanInputComponent"  # approve
    assert components()["approve"]["interaction_type"] == "approval"
    assert commands["repair"]["command"].endswith("--mr goal --auto-approve")  # the rest


def test_the_approval_shows_the_proposal_with_its_scope() -> None:
    approve = components()["approve"]
    inputs = {i["as"]: i["from"] for i in approve["inputs"]}
    # The propose step's output: the numbered diff and its "scope:" line (acklab flow run).
    assert inputs["proposal_output"] == "context:propose.tool_responses"
    assert "{{ proposal_output }}" in approve["message_template"]
    assert "scope" in approve["message_template"]


def test_the_agent_has_no_tools_and_its_prompt_is_the_flows_own() -> None:
    prompts = {p["prompt_id"] for p in FLOW.get("prompts", [])}
    for component in components().values():
        if component["type"] in {"AgentComponent", "OneOffComponent"}:
            assert component.get("toolset", []) == []
            assert component["prompt_id"] in prompts
            assert component.get("prompt_version") is None  # the local prompt


def test_every_conditional_router_has_a_default_route_and_failures_abort() -> None:
    for router in FLOW["routers"]:
        if "condition" in router:
            routes = router["condition"]["routes"]
            assert "default_route" in routes
            if router["condition"]["input"].endswith(".execution_result"):
                assert routes["failed"] == routes["default_route"] == "abort"
