"""Diffs: made for recipes, found in replies, parsed strictly."""

from __future__ import annotations

from acklab.flows.diffs import fenced_diffs, make_diff, parse_diff
from tests.flows.conftest import LIVE, UNSAFE, run_git


def test_make_diff_applies_with_git(small_repo):
    diff = make_diff("app/webhooks.py", UNSAFE, LIVE)
    assert diff.startswith(
        "diff --git a/app/webhooks.py b/app/webhooks.py\n--- a/app/webhooks.py\n+++ b/app/webhooks.py\n"
    )
    run_git(small_repo, "apply", "-", input_text=diff)
    assert (small_repo / "app/webhooks.py").read_text() == LIVE


def test_make_diff_of_equal_texts_is_empty():
    assert make_diff("app/webhooks.py", LIVE, LIVE) == ""


def test_a_missing_final_newline_is_marked(small_repo):
    diff = make_diff("README.md", "hello\n", "hello\nworld")
    assert "\\ No newline at end of file" in diff
    run_git(small_repo, "apply", "-", input_text=diff)
    assert (small_repo / "README.md").read_text() == "hello\nworld"


def test_parse_counts_lines_and_files():
    parsed = parse_diff(make_diff("app/webhooks.py", UNSAFE, LIVE))
    assert parsed.problems == []
    [patch] = parsed.files
    assert patch.paths == ["app/webhooks.py"]
    assert patch.added > 0
    assert patch.removed > 0
    assert parsed.changed_lines == patch.added + patch.removed


def test_fenced_diffs_finds_each_block():
    reply = "Here:\n```diff\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n```\nand\n```python\nprint()\n```\n```diff\nmore\n```"
    blocks = fenced_diffs(reply)
    assert len(blocks) == 2
    assert blocks[0].startswith("--- a/x")
    assert fenced_diffs("no diff here, just prose") == []


def test_lines_outside_hunks_are_problems():
    parsed = parse_diff("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\nrm -rf /\n")
    assert any("unrecognised line" in p for p in parsed.problems)


def test_short_hunks_are_problems():
    parsed = parse_diff("--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n-a\n+b\n")
    assert any("shorter than its header" in p for p in parsed.problems)


def test_paths_without_git_prefixes_are_problems():
    parsed = parse_diff("--- x.py\n+++ x.py\n@@ -1 +1 @@\n-a\n+b\n")
    assert any("prefix" in p for p in parsed.problems)


def test_extended_headers_are_read():
    parsed = parse_diff(
        "diff --git a/a.py b/b.py\nsimilarity index 90%\nrename from a.py\nrename to b.py\n"
        "diff --git a/c.sh b/c.sh\nold mode 100644\nnew mode 100755\n"
        "diff --git a/l b/l\nnew file mode 120000\n--- /dev/null\n+++ b/l\n@@ -0,0 +1 @@\n+/etc/passwd\n"
        "diff --git a/bin b/bin\nBinary files a/bin and b/bin differ\n"
    )
    rename, mode, link, binary = parsed.files
    assert rename.renamed
    assert mode.mode_change
    assert link.new_file
    assert "120000" in link.modes
    assert binary.binary
