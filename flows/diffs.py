"""Unified diffs: made (for recipes), found (in a model's reply) and parsed strictly (for the guard).

The parser reads what `git apply` would read and refuses what it cannot place: a line it
does not understand is a problem, not something to skip, because git might interpret it.
The guard cross-checks the parser against `git apply --numstat --summary` as well.
"""

from __future__ import annotations

import difflib
import hashlib
import re
from dataclasses import dataclass, field

DEV_NULL = "/dev/null"
_FENCE = re.compile(r"^```[ \t]*diff[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
_GIT_HEADER = re.compile(r"^diff --git a/(\S+) b/(\S+)$")
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_EXTENDED = (
    "old mode ",
    "new mode ",
    "deleted file mode ",
    "new file mode ",
    "similarity index ",
    "dissimilarity index ",
    "rename from ",
    "rename to ",
    "copy from ",
    "copy to ",
    "index ",
)


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def make_diff(path: str, old: str, new: str) -> str:
    """A git-style unified diff turning `old` into `new` at `path` ("" when they are equal)."""
    if old == new:
        return ""
    body = list(
        difflib.unified_diff(
            _lines(old), _lines(new), fromfile=f"a/{path}", tofile=f"b/{path}", n=3, lineterm="\n"
        )
    )
    return f"diff --git a/{path} b/{path}\n" + "".join(body)


def _lines(text: str) -> list[str]:
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n\\ No newline at end of file\n"
    return lines


def fenced_diffs(reply: str) -> list[str]:
    """Every ```diff fenced block of a model's reply, in order (each ending with a newline)."""
    return [block if block.endswith("\n") else block + "\n" for block in _FENCE.findall(reply)]


@dataclass
class FilePatch:
    """What one file section of a diff does."""

    old_path: str | None = None
    new_path: str | None = None
    git_paths: tuple[str, str] | None = None
    added: int = 0
    removed: int = 0
    hunks: int = 0
    binary: bool = False
    new_file: bool = False
    deleted: bool = False
    renamed: bool = False
    copied: bool = False
    modes: list[str] = field(default_factory=list)
    mode_change: bool = False

    @property
    def paths(self) -> list[str]:
        """Every path this section names (old, new and the git header's), without duplicates."""
        found: list[str] = []
        for path in (self.old_path, self.new_path, *(self.git_paths or ())):
            if path is not None and path != DEV_NULL and path not in found:
                found.append(path)
        return found

    @property
    def path(self) -> str:
        return self.new_path if self.new_path not in (None, DEV_NULL) else (self.old_path or "?")


@dataclass
class ParsedDiff:
    files: list[FilePatch]
    problems: list[str]

    @property
    def changed_lines(self) -> int:
        return sum(f.added + f.removed for f in self.files)


def _strip_prefix(raw: str, prefix: str, lineno: int, problems: list[str]) -> str | None:
    # "--- a/app/webhooks.py\t2024-01-01 ..." -> "app/webhooks.py"
    value = raw.split("\t", 1)[0].rstrip()
    if value == DEV_NULL:
        return DEV_NULL
    if value.startswith('"'):
        problems.append(f"line {lineno}: quoted path {value!r} is not accepted; use plain paths")
        return value
    if not value.startswith(prefix):
        problems.append(
            f"line {lineno}: path {value!r} must carry git's {prefix!r} prefix "
            f"(write '{prefix}app/webhooks.py'), or be /dev/null"
        )
        return value
    return value[len(prefix) :]


def parse_diff(text: str) -> ParsedDiff:
    """Parse a unified diff strictly; every line must belong to a header or a hunk."""
    files: list[FilePatch] = []
    problems: list[str] = []
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    current: FilePatch | None = None
    i = 0
    while i < len(lines):
        line, lineno = lines[i], i + 1
        git = _GIT_HEADER.match(line)
        if git:
            current = FilePatch(git_paths=(git.group(1), git.group(2)))
            files.append(current)
        elif line.startswith("diff "):
            problems.append(f"line {lineno}: unparseable diff header {line!r}")
            current = None
        elif line.startswith(_EXTENDED) and current is not None and current.hunks == 0:
            _extended(current, line)
        elif line.startswith(("Binary files ", "GIT binary patch")):
            if current is None:
                current = FilePatch()
                files.append(current)
            current.binary = True
        elif line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            current = _file_header(current, files, line, lines[i + 1], lineno=lineno, problems=problems)
            i += 1
        elif line.startswith("@@"):
            if current is None or current.old_path is None:
                problems.append(f"line {lineno}: hunk without a '---'/'+++' file header")
                current = current or FilePatch()
            i = _hunk(current, lines, i, problems)
            continue
        elif line.strip():
            problems.append(f"line {lineno}: unrecognised line outside any hunk: {line[:80]!r}")
        i += 1
    if not files and not problems:
        problems.append("the diff is empty")
    return ParsedDiff(files=files, problems=problems)


def _file_header(
    current: FilePatch | None, files: list[FilePatch], old: str, new: str, *, lineno: int, problems: list[str]
) -> FilePatch:
    """The '---'/'+++' pair at `lineno`: the patch it names (a new one unless `current` awaits its paths)."""
    if current is None or current.hunks or current.old_path is not None:
        current = FilePatch()
        files.append(current)
    current.old_path = _strip_prefix(old[4:], "a/", lineno, problems)
    current.new_path = _strip_prefix(new[4:], "b/", lineno + 1, problems)
    current.new_file = current.new_file or current.old_path == DEV_NULL
    current.deleted = current.deleted or current.new_path == DEV_NULL
    return current


def _extended(patch: FilePatch, line: str) -> None:
    if line.startswith(("old mode ", "new mode ")):
        patch.mode_change = True
        patch.modes.append(line.rsplit(" ", 1)[-1])
    elif line.startswith("deleted file mode "):
        patch.deleted = True
        patch.modes.append(line.rsplit(" ", 1)[-1])
    elif line.startswith("new file mode "):
        patch.new_file = True
        patch.modes.append(line.rsplit(" ", 1)[-1])
    elif line.startswith(("rename from ", "rename to ", "similarity index ", "dissimilarity index ")):
        patch.renamed = True
    elif line.startswith(("copy from ", "copy to ")):
        patch.copied = True
    elif line.startswith("index ") and len(line.split()) == 3:
        patch.modes.append(line.split()[2])


def _hunk(patch: FilePatch, lines: list[str], start: int, problems: list[str]) -> int:
    header = _HUNK.match(lines[start])
    if not header:
        problems.append(f"line {start + 1}: malformed hunk header {lines[start][:80]!r}")
        return start + 1
    patch.hunks += 1
    old_left = int(header.group(2)) if header.group(2) is not None else 1
    new_left = int(header.group(4)) if header.group(4) is not None else 1
    i = start + 1
    while i < len(lines) and (old_left > 0 or new_left > 0):
        line = lines[i]
        if line.startswith("\\"):
            pass
        elif line.startswith("+"):
            patch.added += 1
            new_left -= 1
        elif line.startswith("-"):
            patch.removed += 1
            old_left -= 1
        elif line.startswith(" ") or line == "":
            # git apply accepts an empty line as an empty context line
            old_left -= 1
            new_left -= 1
        else:
            break
        i += 1
    if old_left > 0 or new_left > 0:
        problems.append(
            f"line {start + 1}: hunk {lines[start][:40]!r} is shorter than its header says "
            f"({max(old_left, 0)} old and {max(new_left, 0)} new lines missing)"
        )
    while i < len(lines) and lines[i].startswith("\\"):
        i += 1
    return i
