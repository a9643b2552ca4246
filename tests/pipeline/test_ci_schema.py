"""The pipeline files are valid for GitLab: checked against GitLab's own CI schema."""

from __future__ import annotations

import copy
import hashlib
import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml

from tests.pipeline.gitlab import ROOT, SCHEMA, CiLoader, Reference, load_yaml, schema_errors

CI_FILES = [ROOT / ".gitlab-ci.yml", *sorted((ROOT / "ci").glob("*.gitlab-ci.yml"))]


def test_vendored_schema_is_the_recorded_copy() -> None:
    sources = (SCHEMA.parent / "SOURCES.md").read_text(encoding="utf-8")
    recorded = re.search(r"`gitlab-ci\.schema\.json` .*?sha256 ([0-9a-f]{64})", sources)
    assert recorded, "SOURCES.md must record the schema's sha256"
    assert hashlib.sha256(SCHEMA.read_bytes()).hexdigest() == recorded.group(1)
    assert "Apache-2.0" in sources
    jsonschema.Draft7Validator.check_schema(json.loads(SCHEMA.read_text(encoding="utf-8")))


def test_there_are_templates_to_include() -> None:
    assert ROOT / "ci" / "acklab.gitlab-ci.yml" in CI_FILES


@pytest.mark.parametrize("path", CI_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_ci_file_is_valid_for_gitlab(path: Path) -> None:
    assert schema_errors(load_yaml(path)) == []


def test_reference_tags_load_as_the_path_they_name() -> None:
    pipeline = load_yaml(ROOT / ".gitlab-ci.yml")
    before = pipeline["reproduce:unsafe"]["before_script"]
    assert before == [".python", "before_script"]
    assert all(isinstance(part, Reference) for part in before)


# Each mistake is one a hand edit could make; the schema must refuse every one, or the
# validation above would prove nothing.
MISTAKES = {
    "misspelled keyword": lambda ci: ci["lint"].update(artifact=ci["lint"].pop("artifacts")),
    "report path not a string": lambda ci: ci["pytest"]["artifacts"]["reports"].update(junit=7),
    "unknown when": lambda ci: ci["release"]["rules"][0].update(when="sometimes"),
    "too many shards": lambda ci: ci["attack:live"].update(parallel=201),
    "pages publish not a path": lambda ci: ci["pages"].update(pages={"publish": 1}),
    "needs of the wrong shape": lambda ci: ci["evidence"].update(needs={"job": "attack:live"}),
    "workflow rule with a bad when": lambda ci: ci["workflow"]["rules"][1].update(when="later"),
}


@pytest.mark.parametrize("mistake", sorted(MISTAKES))
def test_schema_refuses_a_broken_pipeline(mistake: str) -> None:
    pipeline = copy.deepcopy(load_yaml(ROOT / ".gitlab-ci.yml"))
    MISTAKES[mistake](pipeline)
    assert schema_errors(pipeline), f"the schema accepted: {mistake}"


def readme_pipeline_example() -> dict[str, object]:
    """docs/ci.md's pipeline that includes the hidden templates (the README links it)."""
    doc = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
    section = doc.split("## With `include: project:` instead", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```yaml\n(.*?)```", section, flags=re.S)
    examples = [b for b in blocks if "include:" in b and "- project:" in b]
    assert len(examples) == 1, "the section shows one pipeline that includes the templates by project"
    return yaml.load(examples[0], Loader=CiLoader)


def test_readme_pipeline_example_is_valid_and_uses_real_templates() -> None:
    example = readme_pipeline_example()
    assert schema_errors(example) == []
    templates = load_yaml(ROOT / "ci" / "acklab.gitlab-ci.yml")
    for name, job in example.items():
        if isinstance(job, dict) and "extends" in job:
            assert job["extends"] in templates, f"{name} extends a template that does not exist"
    template_text = (ROOT / "ci" / "acklab.gitlab-ci.yml").read_text(encoding="utf-8")
    for variable in ("ACKLAB_PROJECT", "ACKLAB_VERSION", "ACKLAB_TARGET", "ACKLAB_SHARDS", "ACKLAB_RUN_ARGS"):
        assert variable in template_text


def test_a_key_given_twice_is_refused(tmp_path: Path) -> None:
    twice = tmp_path / "twice.yml"
    twice.write_text("lint:\n  script: [a]\nlint:\n  script: [b]\n", encoding="utf-8")
    with pytest.raises(yaml.constructor.ConstructorError, match="duplicate key 'lint'"):
        load_yaml(twice)
