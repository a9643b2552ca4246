"""The scope guard refuses every out-of-scope or unsafe diff, and never changes the repository."""

from __future__ import annotations

import pytest

from acklab.flows import capabilities
from acklab.flows.diffs import make_diff
from acklab.flows.guard import check, path_problem
from acklab.flows.spec import load_spec
from acklab.flows.worktree import head_sha, repo_snapshot
from tests.flows import hostile_three, hostile_two
from tests.flows.conftest import LIVE, ROOT, UNSAFE
from tests.flows.unguarded import no_capability_rule

SPEC = load_spec(ROOT / "flows" / "repair.yaml")
GOOD = make_diff("app/webhooks.py", UNSAFE, LIVE)


def judge(repo, diff, spec=SPEC):
    return check(diff, spec=spec, repo=repo, commit=head_sha(repo))


def test_the_recipe_diff_is_allowed(small_repo):
    before = repo_snapshot(small_repo)
    result = judge(small_repo, GOOD)
    assert result.allowed, result.reasons
    assert result.files == ["app/webhooks.py"]
    assert repo_snapshot(small_repo) == before


NEW_TEST_FILE = (
    "diff --git a/tests/test_green.py b/tests/test_green.py\nnew file mode 100644\n"
    "--- /dev/null\n+++ b/tests/test_green.py\n@@ -0,0 +1,2 @@\n+def test_green():\n+    assert True\n"
)
TRAVERSAL = "--- a/app/../../outside.py\n+++ b/app/../../outside.py\n@@ -1 +1 @@\n-a\n+b\n"
CI = "--- a/.gitlab-ci.yml\n+++ b/.gitlab-ci.yml\n@@ -1,2 +1,2 @@\n test:\n-  script: [make test]\n+  script: [true]\n"
ABSOLUTE = "--- a//etc/passwd\n+++ b//etc/passwd\n@@ -1 +1 @@\n-root\n+toor\n"
RENAME = "diff --git a/app/webhooks.py b/app/handler.py\nsimilarity index 100%\nrename from app/webhooks.py\nrename to app/handler.py\n"
DELETE = (
    "diff --git a/app/webhooks.py b/app/webhooks.py\ndeleted file mode 100644\n"
    "--- a/app/webhooks.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n"
)
MODE = "diff --git a/app/webhooks.py b/app/webhooks.py\nold mode 100644\nnew mode 100755\n"
SYMLINK = (
    "diff --git a/app/webhooks.py b/app/webhooks.py\nindex 1234567..89abcde 120000\n"
    "--- a/app/webhooks.py\n+++ b/app/webhooks.py\n@@ -1 +1 @@\n-a\n+b\n"
)
BINARY = "diff --git a/app/webhooks.py b/app/webhooks.py\nindex 1234567..89abcde 100644\nGIT binary patch\nliteral 0\n"


@pytest.mark.parametrize(
    ("diff", "reason"),
    [
        ("", "carries no diff"),
        (NEW_TEST_FILE, "'tests/test_green.py' is denied by scope rule 'tests/'"),
        (NEW_TEST_FILE, "creating a file is not allowed"),
        (TRAVERSAL, "path traversal"),
        (CI, "'.gitlab-ci.yml' is denied"),
        (ABSOLUTE, "absolute path"),
        (RENAME, "renames and copies are not allowed"),
        (DELETE, "deleting a file is not allowed"),
        (MODE, "mode changes are not allowed"),
        (SYMLINK, "a symlink (mode 120000)"),
        (BINARY, "binary patches are not allowed"),
        ("--- app/webhooks.py\n+++ app/webhooks.py\n@@ -1 +1 @@\n-a\n+b\n", "prefix"),
        (GOOD + "echo pwned\n", "unrecognised line"),
    ],
)
def test_static_refusals(small_repo, diff, reason):
    before = repo_snapshot(small_repo)
    result = judge(small_repo, diff)
    assert not result.allowed
    assert any(reason in r for r in result.reasons), result.reasons
    assert repo_snapshot(small_repo) == before


def test_limits(small_repo):
    import dataclasses

    from acklab.flows.spec import Limits

    tight = dataclasses.replace(SPEC, limits=Limits(max_files=1, max_changed_lines=5))
    result = judge(small_repo, GOOD, tight)
    assert not result.allowed
    assert any("the limit is 5" in r for r in result.reasons)


def _edit(old: str, new: str) -> str:
    return make_diff("app/webhooks.py", UNSAFE, UNSAFE.replace(old, new, 1))


def test_a_diff_that_does_not_apply_is_refused(small_repo):
    stale = make_diff("app/webhooks.py", "something else\n", "entirely\n")
    result = judge(small_repo, stale)
    assert not result.allowed
    assert any("does not apply cleanly" in r for r in result.reasons)


def test_python_that_does_not_parse_is_refused(small_repo):
    result = judge(small_repo, _edit("def process(", "def process(("))
    assert not result.allowed
    assert any("does not parse as Python" in r for r in result.reasons)


def test_ruff_findings_are_refused(small_repo):
    result = judge(
        small_repo,
        _edit(
            "from __future__ import annotations\n", "from __future__ import annotations\n\nimport hashlib\n"
        ),
    )
    assert not result.allowed
    assert any("ruff check is not clean" in r and "F401" in r for r in result.reasons), result.reasons


@pytest.mark.parametrize(
    "path",
    [
        "/etc/passwd",
        "../x",
        "a/../../b",
        "a\\b",
        "~/x",
        "a//b",
        "./a",
        ".git/config",
        "a/.git/hooks/pre-commit",
    ],
)
def test_path_problems(path):
    assert path_problem(path) is not None


def test_plain_paths_have_no_problem():
    assert path_problem("app/webhooks.py") is None


@pytest.mark.parametrize("name", hostile_three.ATTACKS)
def test_a_patch_reaching_beneath_the_orm_is_refused_naming_why(small_repo, name, monkeypatch):
    _, rule, word = hostile_three.ATTACKS[name]
    before = repo_snapshot(small_repo)
    result = judge(small_repo, hostile_three.PATCHES[name])
    assert not result.allowed
    reasons = " ".join(result.reasons)
    assert f"capability rule {rule!r}" in reasons, reasons
    assert word in reasons
    assert repo_snapshot(small_repo) == before
    # Nothing else refuses it (in scope, applies, ruff-clean): the capability rules are what stop it.
    monkeypatch.setattr(capabilities, "check", no_capability_rule)
    assert judge(small_repo, hostile_three.PATCHES[name]).allowed


@pytest.mark.parametrize(
    ("source", "statement"),
    [
        (hostile_two.VIEW_SOURCE, "ALTER TABLE fulfillments RENAME TO fulfillment_log"),
        (hostile_two.TRIGGER_SOURCE, "CREATE TRIGGER IF NOT EXISTS fulfillments_once"),
    ],
    ids=["view-in-place-of-the-table", "trigger-deleting-duplicates"],
)
def test_the_schema_attacks_the_pin_catches_are_refused_before_that(small_repo, source, statement):
    result = judge(small_repo, hostile_two.diff(source))
    assert not result.allowed
    refused = [r for r in result.reasons if "capability rule 'raw-sql'" in r and "changes the schema" in r]
    assert any(statement in r for r in refused), result.reasons
