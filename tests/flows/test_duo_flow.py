"""The GitLab Duo flow definition (Flow Registry v1) gives a hosted agent no tool beyond fixed acklab commands."""

from __future__ import annotations

import shlex

import click
import pytest
import yaml

from acklab.cli import cli
from tests.flows.conftest import ROOT

FLOW = yaml.safe_load((ROOT / "flows" / "duo" / "repair-flow.yaml").read_text())
COMPONENT_TYPES = {"AgentComponent", "DeterministicStepComponent", "OneOffComponent", "HumanInputComponent"}
BUILT_IN = {"end", "abort"}


def components() -> dict[str, dict]:
    return {c["name"]: c for c in FLOW["components"]}


def test_it_is_a_v1_flow_with_the_required_sections():
    assert FLOW["version"] == "v1"
    assert FLOW["environment"] in {"ambient", "chat", "chat-partial"}
    assert {"components", "routers", "flow"} <= FLOW.keys()
    assert FLOW["flow"]["entry_point"] in components()
    for name, component in components().items():
        assert component["type"] in COMPONENT_TYPES
        assert ":" not in name
        assert "." not in name


def test_routers_connect_known_components_and_every_component_is_reached():
    names = set(components()) | BUILT_IN
    reached = {FLOW["flow"]["entry_point"]}
    for router in FLOW["routers"]:
        assert router["from"] in components()
        targets = [router["to"]] if "to" in router else list(router["condition"]["routes"].values())
        assert set(targets) <= names
        reached |= set(targets)
    assert set(components()) <= reached


def test_agents_have_no_tools_and_their_prompts_are_defined():
    prompts = {p["prompt_id"] for p in FLOW.get("prompts", [])}
    for component in components().values():
        if component["type"] in {"AgentComponent", "OneOffComponent"}:
            assert component.get("toolset", []) == []
            assert component["prompt_id"] in prompts
            assert component.get("prompt_version") is None  # the local prompt


def _commands() -> list[tuple[str, list[str]]]:
    found = []
    for name, component in components().items():
        tools = [t if isinstance(t, str) else next(iter(t)) for t in component.get("toolset", [])]
        assert set(tools) <= {"run_command"}, name
        if component["type"] != "DeterministicStepComponent":
            continue
        assert component["tool_name"] == "run_command"
        inputs = {i["as"]: i for i in component["inputs"]}
        assert set(inputs) == {"program", "args"}
        assert all(i.get("literal") is True for i in inputs.values()), "no argument may come from a model"
        found.append((inputs["program"]["from"], shlex.split(inputs["args"]["from"])))
    return found


def test_every_step_runs_a_fixed_acklab_command_the_cli_accepts():
    commands = _commands()
    assert len(commands) == 3
    for program, args in commands:
        assert program == "acklab"
        command: click.Command = cli
        ctx = None
        words = list(args)
        while isinstance(command, click.Group):
            ctx = click.Context(command, info_name=command.name, parent=ctx)
            sub = command.get_command(ctx, words[0])
            assert sub is not None, f"acklab has no command {words[0]!r}"
            command, words = sub, words[1:]
        command.make_context(command.name, list(words), parent=ctx)  # raises on an unknown option


@pytest.mark.parametrize("forbidden", ["--decisions", "--local", "--proposer llm"])
def test_no_step_can_widen_what_acklab_does(forbidden):
    assert all(forbidden not in " ".join(args) for _, args in _commands())


def test_each_checkpoint_is_mapped():
    text = " ".join(" ".join(args) for _, args in _commands())
    assert "run --target fixture:live" in text  # reproduce
    assert "--propose-only" in text  # propose
    assert any(c["type"] == "HumanInputComponent" for c in components().values())  # approve
    assert "--mr ci --auto-approve" in text  # apply, verify, strike-again, publish
