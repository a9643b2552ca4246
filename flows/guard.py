"""The scope guard: fixed rules every proposal passes before anything is applied.

A proposal is refused when it touches a path outside the scope (or a denied one), uses an
absolute path or '..', creates, deletes, renames or copies a file, changes a mode, adds a
symlink, submodule or binary patch, touches a path that is not a regular file below plain
directories at the expected head (modes read from the repository, not from the diff),
exceeds the limits, does not apply cleanly at the expected head, does not parse as Python,
is not ruff-clean, or breaks a capability rule (`capabilities`: the patched file reaches for
the interpreter's machinery or imports what the spec does not allow). The rules are code,
not configuration: a spec can narrow the scope, the limits and the imports, never switch a
rule off. Every reason is one escaped line: it quotes what the proposal wrote.

The static rules run first and touch nothing; only a statically clean diff is tried, in a
throwaway worktree, with `git apply`, whose own reading of the diff (`--numstat --summary`)
must agree with ours.
"""

from __future__ import annotations

import ast
import subprocess  # nosec B404
import sys
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from . import capabilities
from .diffs import FilePatch, parse_diff
from .errors import FlowError
from .escape import one_line
from .spec import FlowSpec
from .worktree import Worktree, git, worktree

RUFF_TIMEOUT_S = 120
_SPECIAL_MODES = {"120000": "a symlink", "160000": "a submodule"}
_REGULAR_FILE_MODES = ("100644", "100755")
_DIRECTORY_MODE = "040000"


@dataclass(frozen=True)
class GuardResult:
    """What the guard said: allowed, and every refusal (or, when allowed, what it checked)."""

    allowed: bool
    reasons: list[str]
    files: list[str] = field(default_factory=list)
    changed_lines: int = 0
    warnings: list[str] = field(default_factory=list)  # shown at the approve gate, refusing nothing

    def as_dict(self) -> dict[str, object]:
        return {"allowed": self.allowed, "reasons": list(self.reasons)}


def check(diff: str, *, spec: FlowSpec, repo: Path, commit: str) -> GuardResult:
    """Judge `diff` against `spec` at `commit` of `repo`; never changes the repository."""
    if not diff.strip():
        return GuardResult(False, ["the proposal carries no diff (expected one ```diff fenced block)"])
    parsed = parse_diff(diff)
    reasons = list(parsed.problems)
    files: list[str] = []
    for patch in parsed.files:
        reasons += _file_rules(patch, spec)
        files += [p for p in patch.paths if p not in files]
    if len(parsed.files) > spec.limits.max_files:
        reasons.append(f"the diff touches {len(parsed.files)} files; the limit is {spec.limits.max_files}")
    if parsed.changed_lines > spec.limits.max_changed_lines:
        reasons.append(
            f"the diff changes {parsed.changed_lines} lines; the limit is {spec.limits.max_changed_lines}"
        )
    if not reasons:
        reasons = [problem for path in files if (problem := head_path_problem(repo, commit, path))]
    if reasons:
        return _refused(reasons, files, parsed.changed_lines)
    with worktree(repo, commit, label="guard") as wt:
        reasons = _apply_rules(wt, diff, files, spec)
        warned = [
            one_line(w, limit=300)
            for path in files
            if path.endswith(".py") and (wt.path / path).is_file()
            for w in capabilities.warnings(wt.read(path), path=path)
        ]
    if reasons:
        return _refused(reasons, files, parsed.changed_lines)
    checked = [
        f"in scope: {', '.join(files)}",
        f"{len(parsed.files)} file(s), {parsed.changed_lines} changed lines "
        f"(limits {spec.limits.max_files}, {spec.limits.max_changed_lines})",
        "no new, deleted, renamed or copied files; no mode changes, symlinks or binary patches",
        f"regular files below plain directories at {commit[:12]}",
        f"applies cleanly at {commit[:12]}",
        "parses as Python; ruff check is clean (noqa comments ignored)",
        "capabilities: imports only the names the spec allows; no module, introspection helper, "
        "interpreter machinery, private attribute, confusable identifier or control character",
    ]
    return GuardResult(True, checked, files, parsed.changed_lines, warned)


def _refused(reasons: list[str], files: list[str], changed_lines: int) -> GuardResult:
    # A reason may quote the proposal (a path, a line): one escaped line each, whoever reads it.
    return GuardResult(False, [one_line(r, limit=1000) for r in reasons], files, changed_lines)


def head_path_problem(repo: Path, commit: str, path: str) -> str | None:
    """Why `path` at `commit` is not a regular file below plain directories (None when it is).

    Read from the repository's trees (`git ls-tree`), never from a diff's headers: a symlinked
    file or folder would make a patch, and every read of the file, land somewhere else.
    """
    parts = PurePosixPath(path).parts
    for depth in range(1, len(parts) + 1):
        prefix = "/".join(parts[:depth])
        # One folder at a time: `git ls-tree C -- dir` names the folder itself, not its files.
        listed = git(repo, "ls-tree", "-z", commit, "--", prefix).stdout
        modes = {
            name: meta.split(" ", 1)[0] for meta, _, name in (e.partition("\t") for e in listed.split("\0"))
        }
        mode = modes.get(prefix)
        wanted = _REGULAR_FILE_MODES if depth == len(parts) else (_DIRECTORY_MODE,)
        if mode is None:
            return f"{path} does not exist at {commit[:12]} (no {prefix!r} in its tree)"
        if mode not in wanted:
            what = _SPECIAL_MODES.get(mode, f"mode {mode}")
            return f"{prefix!r} is {what} at {commit[:12]}; only a regular file below plain directories may be patched"
    return None


def path_problem(path: str) -> str | None:
    """Why `path` can never be patched, whatever the scope (None when it is a plain relative path)."""
    pure = PurePosixPath(path)
    if not path or path.startswith("/") or pure.is_absolute():
        return f"absolute path {path!r} is not allowed"
    if any(part == ".." for part in pure.parts):
        return f"path traversal in {path!r} ('..' is not allowed)"
    if "\\" in path or "\x00" in path or any(ord(c) < 32 for c in path):
        return f"path {path!r} contains a backslash or a control character"
    if path.startswith("~") or any(part in ("", ".") for part in path.split("/")):
        return f"path {path!r} is not a normalised repository-relative path"
    if ".git" in pure.parts:
        return f"path {path!r} points into .git"
    return None


def _file_rules(patch: FilePatch, spec: FlowSpec) -> list[str]:
    reasons: list[str] = []
    name = patch.path
    for path in patch.paths:
        problem = path_problem(path) or spec.scope.why_not(path)
        if problem:
            reasons.append(problem)
    if patch.git_paths and patch.old_path and patch.new_path:
        header = set(patch.git_paths)
        named = {p for p in (patch.old_path, patch.new_path) if p != "/dev/null"}
        if not named <= header:
            reasons.append(f"{name}: the diff --git header names {sorted(header)}, the hunks {sorted(named)}")
    if patch.new_file:
        reasons.append(f"{name}: creating a file is not allowed (only existing scoped files may change)")
    if patch.deleted:
        reasons.append(f"{name}: deleting a file is not allowed")
    if patch.renamed or patch.copied or (patch.git_paths and patch.git_paths[0] != patch.git_paths[1]):
        reasons.append(f"{name}: renames and copies are not allowed")
    if patch.mode_change:
        reasons.append(f"{name}: mode changes are not allowed")
    for mode in patch.modes:
        if mode in _SPECIAL_MODES:
            reasons.append(f"{name}: {_SPECIAL_MODES[mode]} (mode {mode}) is not allowed")
    if patch.binary:
        reasons.append(f"{name}: binary patches are not allowed")
    if patch.hunks == 0 and not patch.binary:
        reasons.append(f"{name}: the section has no hunks")
    return reasons


def _apply_rules(wt: Worktree, diff: str, files: list[str], spec: FlowSpec) -> list[str]:
    try:
        wt.apply(diff, check_only=True)
    except FlowError as exc:
        return [f"does not apply cleanly at {wt.commit[:12]}: {_git_message(exc)}"]
    summary = wt.run("apply", "--numstat", "--summary", "-", input_text=diff)
    git_paths, git_events = _read_numstat(summary)
    reasons = []
    if sorted(git_paths) != sorted(files):
        reasons.append(f"git reads the diff as touching {sorted(git_paths)}, not {sorted(files)}")
    reasons += [f"git reports: {event}" for event in git_events]
    if reasons:
        return reasons
    wt.apply(diff)
    changed = wt.changed_files()
    if changed != sorted(files):
        return [f"applying changed {changed}, not {sorted(files)}"]
    for path in files:
        reasons += _python_rules(wt, path, spec)
    return reasons


def _read_numstat(output: str) -> tuple[list[str], list[str]]:
    paths: list[str] = []
    events: list[str] = []
    for line in output.splitlines():
        parts = line.split("\t")
        if len(parts) == 3:
            if parts[0] == "-" or parts[1] == "-":
                events.append(f"binary change to {parts[2]}")
            paths.append(parts[2])
        elif line.strip():
            # --summary lines: " create mode ...", " delete mode ...", " rename ...", " mode change ..."
            events.append(line.strip())
    return paths, events


def _python_rules(wt: Worktree, path: str, spec: FlowSpec) -> list[str]:
    if not path.endswith(".py"):
        return []
    source = wt.read(path)
    try:
        ast.parse(source, filename=path)
    except SyntaxError as exc:
        return [f"{path} does not parse as Python after the patch: {exc.msg} (line {exc.lineno})"]
    refused = capabilities.check(source, path=path, imports=spec.imports, root=wt.path)
    if refused:
        return refused
    try:
        # --ignore-noqa: a noqa comment in the patch, file-wide or on a line, switches no rule off.
        done = subprocess.run(  # nosec B603
            [
                sys.executable,
                "-m",
                "ruff",
                "check",
                "--no-cache",
                "--ignore-noqa",
                "--quiet",
                "--output-format=concise",
                path,
            ],
            cwd=wt.path,
            capture_output=True,
            text=True,
            timeout=RUFF_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise FlowError(f"ruff did not finish within {RUFF_TIMEOUT_S}s on {path}") from exc
    if done.returncode == 0:
        return []
    findings = [line for line in done.stdout.splitlines() if line.strip()][:10]
    if done.returncode != 1 or not findings:
        # Exit 1 without a finding is Python's own ("No module named ruff"): the lab's failure, not
        # the proposal's.
        raise FlowError(
            f"ruff could not run on {path} (exit {done.returncode}): {one_line(done.stderr.strip(), limit=500)}"
        )
    return [f"ruff check is not clean on {path}: " + "; ".join(findings)]


def _git_message(exc: FlowError) -> str:
    return str(exc).split(": ", 1)[-1].strip()
