"""acklab's jobs as GitLab CI/CD components (templates/*.yml): valid for GitLab's CI schema
with any inputs GitLab accepts, every input declared, described and used, and the same
scripts as the `include: project:` templates in ci/acklab.gitlab-ci.yml.

The components run for real in acklab's own pipeline (.gitlab-ci.yml includes them at
$CI_COMMIT_SHA; tests/pipeline/test_local_pipeline.py runs it with gitlab-ci-local)."""

from __future__ import annotations

import json
import re
import tomllib
from typing import Any

import pytest
import yaml

from tests.pipeline import components
from tests.pipeline.components import Context, InputError, included, inputs_of
from tests.pipeline.gitlab import ROOT, SCHEMA, CiLoader, load_yaml, resolve_job, schema_errors

LEGACY = load_yaml(ROOT / "ci" / "acklab.gitlab-ci.yml")
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
# The inputs each component needs beyond its defaults, as a user would give them.
REQUIRED: dict[str, dict[str, Any]] = {
    "run": {"target": "acklab/shop.target.yaml"},
    "evidence": {"needs": ["webhooks"], "shards": "out/webhooks-*/"},
    "pages": {"needs": ["webhooks-evidence"]},
    "repair": {},
}
# Other inputs GitLab accepts, each changing what the job looks like.
OTHERS: dict[str, dict[str, Any]] = {
    "run": {
        "target": "fixture:unsafe",
        "expect": "fail",
        "shards": 4,
        "trials": 1,
        "seed": "7",
        "job_name": "x",
        "setup": ["pip install -e .", "uvicorn shop.main:app --port 9000 &"],
    },
    "evidence": {"needs": [{"job": "webhooks", "artifacts": True}], "shards": "out/*/", "stage": "verify"},
    "pages": {"needs": ["e"], "history": 0, "history_job": "e", "python_image": "python:3.12"},
    "repair": {"flow": "ci/flow.yaml", "pip_spec": "acklab @ git+https://example.com/acklab.git@v1"},
}
# The template each component's job mirrors.
MIRRORS = {
    "run": ".acklab-run",
    "evidence": ".acklab-evidence",
    "pages": ".acklab-pages",
    "repair": ".acklab-repair",
}


def the_job(name: str, given: dict[str, Any]) -> dict[str, Any]:
    (job,) = included(name, given).values()
    return job


def test_the_components_are_the_four_templates() -> None:
    assert components.components() == sorted(MIRRORS) == sorted(REQUIRED)


def test_the_vendored_schema_knows_the_spec_header() -> None:
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    assert set(schema["properties"]["spec"]["properties"]) >= {"inputs"}
    assert schema["properties"]["spec"]["properties"]["inputs"] == {"$ref": "#/definitions/configInputs"}
    assert "component" in json.dumps(schema["definitions"]["include_item"])


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_the_header_is_valid_and_every_input_is_described_and_used(name: str) -> None:
    header, _ = components.load(name)
    # GitLab's editor schema (vendored) predates spec:component (GitLab 18.7): that key is
    # checked against the documented fields, the rest against the schema.
    assert set(header["spec"]["component"]) <= set(components.CONTEXT_FIELDS)
    assert schema_errors({"spec": {k: v for k, v in header["spec"].items() if k != "component"}}) == []
    declared = header["spec"]["inputs"]
    for input_name, declaration in declared.items():
        assert declaration.get("description"), f"{name}: input {input_name} has no description"
    text = (ROOT / "templates" / f"{name}.yml").read_text(encoding="utf-8").split("\n---\n", 1)[1]
    used = set(re.findall(r"\$\[\[\s*inputs\.([\w-]+)", text))
    assert used == set(declared), (
        f"{name}: declared but unused {set(declared) - used}, undeclared {used - set(declared)}"
    )


@pytest.mark.parametrize("name", sorted(REQUIRED))
@pytest.mark.parametrize("which", ["required", "others"])
def test_the_included_configuration_is_valid_for_gitlab(name: str, which: str) -> None:
    given = REQUIRED[name] if which == "required" else OTHERS[name]
    configuration = included(name, given)
    assert schema_errors(configuration) == []
    job = the_job(name, given)
    assert job["image"] == given.get("python_image", "python:3.11-slim")
    if "job_name" in given:
        assert list(configuration) == [given["job_name"]]


def test_run_takes_what_the_issue_and_the_templates_promise() -> None:
    header, _ = components.load("run")
    assert {"target", "trials", "shards", "expect", "python_image", "acklab_version"} <= set(
        header["spec"]["inputs"]
    )
    job = the_job("run", OTHERS["run"])
    assert job["parallel"] == 4
    assert job["variables"]["ACKLAB_TRIALS"] == 1
    assert job["variables"]["ACKLAB_EXPECT"] == "fail"
    assert job["variables"]["ACKLAB_SEED"] == "7"
    assert job["artifacts"]["reports"]["junit"] == "reports/acklab-*.xml"
    assert job["before_script"][0] == OTHERS["run"]["setup"]  # before acklab's own install


def test_every_knob_of_the_templates_is_an_input_of_a_component() -> None:
    """What ci/acklab.gitlab-ci.yml documents as a variable, a component sets from an input
    (except ACKLAB_VENV: a ready virtualenv is for local runs, not for a published job)."""
    text = (ROOT / "ci" / "acklab.gitlab-ci.yml").read_text(encoding="utf-8")
    knobs = set(re.findall(r"^#\s+(ACKLAB_[A-Z_]+)\s", text, re.M)) - {"ACKLAB_VENV"}
    set_by_inputs = set()
    for name in REQUIRED:
        for variable in the_job(name, REQUIRED[name])["variables"]:
            template = components.load(name)[1]
            (raw,) = template.values()
            if variable == "ACKLAB_COMPONENT":  # GitLab's knowledge of the component, no knob
                assert "$[[ component.version ]]" in raw["variables"][variable]
            elif variable.startswith("ACKLAB_"):
                set_by_inputs.add(variable)
                assert "$[[ inputs." in str(raw["variables"][variable]), f"{name}: {variable} is not an input"
    assert knobs <= set_by_inputs, knobs - set_by_inputs


@pytest.mark.parametrize("name", sorted(MIRRORS))
def test_the_scripts_are_those_of_the_project_include_templates(name: str) -> None:
    job = the_job(name, REQUIRED[name])
    legacy = resolve_job(LEGACY, MIRRORS[name])
    before = job["before_script"]
    if name == "run":  # the service's own setup comes first (its `setup` input)
        assert before[0] == []
        before = before[1:]
    assert before == LEGACY[".acklab"]["before_script"]
    assert job["script"] == legacy["script"]
    assert job["artifacts"] == legacy["artifacts"]
    for key in ("rules", "interruptible", "resource_group"):
        if key in legacy:
            assert job[key] == legacy[key], key


@pytest.mark.parametrize("name", sorted(REQUIRED))
@pytest.mark.parametrize(
    ("reference", "released", "component"),
    [
        (VERSION, [VERSION], f"{VERSION}@{VERSION}"),  # a catalog release
        ("0", ["0.9.0", VERSION, "0.10.0rc1"], "0.10.0@0"),  # a partial version: the newest
        ("~latest", ["0.9.0", "1.2.0"], "1.2.0@~latest"),
        (VERSION, [], f"@{VERSION}"),  # a tag outside the catalog: its reference only
        ("main", [VERSION], "@main"),  # a branch names no release
    ],
    ids=["release", "partial", "latest", "plain-tag", "branch"],
)
def test_the_default_release_is_the_components_own(
    name: str, reference: str, released: list[str], component: str
) -> None:
    """No version is hard-coded: acklab_version defaults to empty, and the job is told the
    version@reference GitLab resolved for the include (the install script picks from it)."""
    header, _ = components.load(name)
    assert header["spec"]["inputs"]["acklab_version"]["default"] == ""
    released = ["0.10.0", *released] if reference == "0" else released
    context = Context(name=name, reference=reference, version=components.catalog_version(reference, released))
    (job,) = included(name, REQUIRED[name], context).values()
    assert job["variables"]["ACKLAB_VERSION"] == ""
    assert job["variables"]["ACKLAB_COMPONENT"] == component


@pytest.mark.parametrize(
    ("given", "error"),
    [
        ({}, "input target is required"),
        ({"target": "t.yaml", "shard": 2}, "unknown input"),
        ({"target": "t.yaml", "shards": "2"}, "is not a number"),
        ({"target": "t.yaml", "trials": True}, "is not a number"),
        ({"target": "t.yaml", "expect": "maybe"}, "is not one of"),
        ({"target": "../elsewhere/t.yaml"}, "does not match"),
        ({"target": "/etc/t.yaml"}, "does not match"),
        ({"target": "fixture:other"}, "does not match"),
        ({"target": "t.yaml", "acklab_version": "v1.2.0"}, "does not match"),
        ({"target": "t.yaml", "acklab_version": "latest"}, "does not match"),
        ({"target": "t.yaml", "acklab_project": "https://gitlab.example/acme/acklab"}, "does not match"),
    ],
)
def test_inputs_gitlab_would_refuse_are_refused(given: dict[str, Any], error: str) -> None:
    with pytest.raises(InputError, match=error):
        inputs_of(components.load("run")[0], given)


def test_the_schema_refuses_what_a_bad_input_value_makes() -> None:
    """Validation after interpolation can fail: 300 shards is past GitLab's limit, and a
    job needs a stage that is not empty."""
    assert schema_errors(included("run", {"target": "t.yaml", "shards": 300}))
    assert schema_errors(included("run", {"target": "t.yaml", "stage": ""}))


def readme_component_example() -> dict[str, Any]:
    """The whole pipeline of docs/ci.md (the README links it)."""
    doc = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
    section = doc.split("## The whole pipeline: shards, evidence and Pages", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```yaml\n(.*?)```", section, flags=re.S)
    examples = [b for b in blocks if "component:" in b]
    assert len(examples) == 1, "the section shows one pipeline with the components"
    return yaml.load(examples[0], Loader=CiLoader)


def test_the_readme_example_includes_real_components_with_inputs_they_take() -> None:
    example = readme_component_example()
    assert schema_errors(example) == []
    merged: dict[str, Any] = {}
    for entry in example["include"]:
        match = re.fullmatch(
            r"\$CI_SERVER_FQDN/[\w./-]+/(?P<name>[\w-]+)@(?P<ref>[\w.~-]+)", entry["component"]
        )
        assert match, entry["component"]
        assert match["ref"] == VERSION
        merged |= included(match["name"], entry.get("inputs", {}))
    for name in example:
        if name not in ("include", "stages", "variables", "default", "workflow"):
            assert name in merged, f"docs/ci.md completes a job no component adds: {name}"
    assert schema_errors({**merged, **{k: v for k, v in example.items() if k != "include"}}) == []


@pytest.mark.parametrize(
    ("name", "given"),
    [
        ("run", {"target": "acklab/shop.target.yaml", "acklab_version": "1.2.0rc1"}),
        ("run", {"target": ".acklab/shop.yaml", "acklab_project": "1217"}),
        ("repair", {"flow": "ci/flows/repair.yaml"}),
        ("evidence", {"needs": ["w"], "shards": "out/webhooks-*/"}),
        ("pages", {"needs": ["e"], "docs": "site/"}),
    ],
)
def test_the_regexes_take_what_users_write(name: str, given: dict[str, Any]) -> None:
    assert inputs_of(components.load(name)[0], given)


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_every_regex_is_one_re2_reads(name: str) -> None:
    """GitLab checks inputs:regex with RE2: no lookaround, no backreference, anchored."""
    for input_name, declaration in components.load(name)[0]["spec"]["inputs"].items():
        pattern = declaration.get("regex")
        if pattern is None:
            continue
        assert declaration.get("type", "string") == "string", input_name
        assert pattern.startswith("^"), input_name
        assert pattern.endswith("$"), input_name
        assert not re.search(r"\(\?|\\[1-9]", pattern), f"{name}.{input_name}: {pattern}"


def test_the_docs_show_every_components_inputs_as_its_header_declares_them() -> None:
    """docs/ci.md has a section per component whose inputs table is generated from the header."""
    import subprocess
    import sys

    script = ROOT / "scripts" / "component_docs.py"
    done = subprocess.run(
        [sys.executable, str(script), "--check"], check=False, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    doc = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
    for name in REQUIRED:
        table = doc.split(f"<!-- inputs: templates/{name}.yml -->", 1)[1].split("<!-- end of inputs -->", 1)[
            0
        ]
        for input_name in components.load(name)[0]["spec"]["inputs"]:
            assert f"| `{input_name}` |" in table, f"{name}: {input_name}"
