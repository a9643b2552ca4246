"""Bounded loading of JSON and YAML: the one way acklab reads a document it did not just write.

Every document acklab reads may be hostile or broken: a spec, a decisions file, a model's
reply, an evidence bundle pulled from a pipeline. Parsers left alone spin, recurse or
allocate without end on such input (a billion-laughs YAML, 100,000 nested brackets, a
2 GB file), and the error that escapes is a RecursionError or a MemoryError, not a message.
So every read goes through here, with `Limits`:

* size: the file is read up to ``max_bytes`` and refused beyond (never read whole first);
* depth: nesting beyond ``max_depth`` is refused *before* a recursive parser sees it;
* YAML aliases: expanded size counted (``max_nodes``) and cycles refused before anything is
  constructed, so ``&a [*a, *a ...]`` nine levels deep costs nothing; duplicate keys refused;
* JSON: ``NaN``/``Infinity`` refused (not JSON), integers of more than 4,300 digits refused;
* text: UTF-8 only (a BOM is allowed); anything else names the byte where decoding failed.

Errors are `DocumentError`s naming the file and what was wrong: exit 3, for input (specs,
decisions, model replies — `INPUT`, `SPEC`). A document of a bundle that cannot be read is
`EvidenceUnreadable` instead (exit 7: `load_evidence_json`, or ``error=EvidenceUnreadable``).
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .errors import EvidenceError
from .exitcodes import ExitCode


@dataclass(frozen=True)
class Limits:
    """How much of a document acklab accepts."""

    max_bytes: int
    max_depth: int = 64
    max_nodes: int = 1_000_000  # YAML: scalars + collections, aliases expanded

    def describe_size(self) -> str:
        return _size(self.max_bytes)


SPEC = Limits(max_bytes=1 << 20, max_depth=64, max_nodes=100_000)
INPUT = Limits(max_bytes=8 << 20, max_depth=64, max_nodes=500_000)
EVIDENCE = Limits(max_bytes=64 << 20, max_depth=64, max_nodes=5_000_000)


class DocumentError(EvidenceError):
    """A document could not be read within acklab's limits (exit 3: bad input)."""

    exit_code = ExitCode.INVALID_INPUT

    def __init__(self, source: str, problem: str) -> None:
        super().__init__(f"{source}: {problem}")
        self.source = source
        self.problem = problem


class EvidenceUnreadable(DocumentError):
    """A document of a bundle (or the journal) could not be read within the limits (exit 7)."""

    exit_code = ExitCode.INTEGRITY


def _size(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} bytes"  # pragma: no cover


def read_bounded(
    path: Path,
    limits: Limits,
    *,
    follow_symlinks: bool = True,
    error: type[DocumentError] = DocumentError,
    what: str | None = None,
) -> bytes:
    """The bytes of a regular file, refusing one larger than ``limits.max_bytes`` (never read whole).

    With ``follow_symlinks=False`` a symlink is refused (O_NOFOLLOW), so a link planted in
    evidence never makes acklab read a file elsewhere.
    """
    source = what or str(path)
    flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
    if not follow_symlinks:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise error(source, "is a symbolic link; acklab does not follow links here") from exc
        raise error(source, f"cannot read it: {exc.strerror}") from exc
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fh.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise error(source, "is not a regular file")
        if info.st_size > limits.max_bytes:
            raise error(
                source,
                f"is {_size(info.st_size)}; acklab reads at most {limits.describe_size()} of such a document",
            )
        data = fh.read(limits.max_bytes + 1)  # the file may grow while it is read
    if len(data) > limits.max_bytes:
        raise error(source, f"is larger than {limits.describe_size()}, the most acklab reads here")
    return data


def decode_text(data: bytes, source: str, *, error: type[DocumentError] = DocumentError) -> str:
    """UTF-8 text (a leading BOM dropped); other encodings are refused naming the offset."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise error(source, "is UTF-16; save it as UTF-8")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(
            source,
            f"is not UTF-8 text (byte {exc.start}: {data[exc.start : exc.start + 4]!r}); save it as UTF-8",
        ) from exc
    return text.removeprefix("\ufeff")


# --- JSON -------------------------------------------------------------------------------

_KEEP_BRACKETS_AND_QUOTES = bytes(b for b in range(256) if b not in b'[]{}"')
_QUOTED = re.compile(rb'"[^"]*"')


def json_depth_exceeds(data: bytes, max_depth: int) -> bool:
    """Whether JSON text nests deeper than `max_depth`, found without a recursive parser.

    All C-speed passes over the bytes (about 0.5 s for 200 MB): escaped backslashes and
    quotes are dropped, then everything but brackets and quotes, then the strings (adjacent
    quote pairs first: removing two quotes with nothing between them never moves a bracket
    in or out of a string); each pass over what is left deletes the innermost bracket pairs,
    so anything left after `max_depth` passes nests deeper.
    """
    if data.count(b"[") + data.count(b"{") <= max_depth:
        return False
    if b"\\" in data:
        data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    kept = data.translate(None, _KEEP_BRACKETS_AND_QUOTES).replace(b'""', b"")
    brackets = _QUOTED.sub(b"", kept) if b'"' in kept else kept
    for _ in range(max_depth):
        if not brackets:
            return False
        shorter = brackets.replace(b"[]", b"").replace(b"{}", b"")
        if shorter == brackets:
            # No pair left to remove: it does not balance. A short rest is a syntax error the
            # parser names; a long one is an unclosed nest as deep as it is long.
            return len(brackets) > max_depth
        brackets = shorter
    return bool(brackets)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_json(
    data: bytes | str, *, source: str, limits: Limits = INPUT, error: type[DocumentError] = DocumentError
) -> Any:
    """Parse JSON text within `limits`; DocumentError naming `source` and the problem."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    if len(raw) > limits.max_bytes:
        raise error(source, f"is {_size(len(raw))}; acklab reads at most {limits.describe_size()}")
    if json_depth_exceeds(raw, limits.max_depth):
        raise error(source, f"nests deeper than {limits.max_depth} levels; acklab refuses it")
    text = data if isinstance(data, str) else decode_text(raw, source, error=error)
    try:
        return json.loads(text, parse_constant=_no_constant)
    except RecursionError as exc:  # the depth check above makes this unreachable in practice
        raise error(source, "nests too deeply to read") from exc
    except ValueError as exc:  # JSONDecodeError, NaN/Infinity, integers too long to convert
        raise error(source, f"is not valid JSON: {exc}") from exc


def load_json(
    path: Path,
    *,
    limits: Limits = INPUT,
    error: type[DocumentError] = DocumentError,
    follow_symlinks: bool = True,
    what: str | None = None,
) -> Any:
    """Read and parse a JSON file within `limits`."""
    source = what or str(path)
    data = read_bounded(path, limits, follow_symlinks=follow_symlinks, error=error, what=source)
    return parse_json(data, source=source, limits=limits, error=error)


def load_evidence_json(path: Path, *, what: str | None = None, limits: Limits = EVIDENCE) -> Any:
    """A JSON document of a bundle: symlinks refused, EVIDENCE limits, exit 7 when unreadable."""
    return load_json(path, limits=limits, error=EvidenceUnreadable, follow_symlinks=False, what=what)


# --- YAML -------------------------------------------------------------------------------

_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _mark(node: yaml.Node) -> str:
    mark = node.start_mark
    return f"line {mark.line + 1}, column {mark.column + 1}"


class _NodeCheck:
    """Walks a composed YAML graph once per distinct node, counting what construction would expand."""

    def __init__(self, source: str, limits: Limits, error: type[DocumentError]) -> None:
        self.source, self.limits, self.error = source, limits, error
        self.expanded: dict[int, int] = {}

    def fail(self, problem: str) -> DocumentError:
        return self.error(self.source, problem)

    def size(self, root: yaml.Node) -> int:
        """Expanded node count of `root` (aliases counted each time they are used), iteratively."""
        # (node, depth, children done?) — an explicit stack: hostile depth must not recurse.
        stack: list[tuple[yaml.Node, int, bool]] = [(root, 1, False)]
        on_path: set[int] = set()
        while stack:
            node, depth, done = stack.pop()
            key = id(node)
            if done:
                on_path.discard(key)
                total = 1 + sum(self.expanded[id(c)] for c in _children(node))
                if total > self.limits.max_nodes:
                    raise self.fail(
                        f"expands to more than {self.limits.max_nodes:,} values (aliases such as "
                        f"*name count each time they are used, near {_mark(node)}); acklab refuses it"
                    )
                self.expanded[key] = total
                continue
            if key in self.expanded:
                continue
            if key in on_path:
                raise self.fail(
                    f"an alias refers to a value that contains it ({_mark(node)}); acklab refuses it"
                )
            if depth > self.limits.max_depth:
                raise self.fail(
                    f"nests deeper than {self.limits.max_depth} levels ({_mark(node)}); acklab refuses it"
                )
            on_path.add(key)
            stack.append((node, depth, True))
            if isinstance(node, yaml.MappingNode):
                seen: set[Any] = set()
                for k, _ in node.value:
                    if isinstance(k, yaml.ScalarNode):
                        label = (k.tag, k.value)
                        if label in seen:
                            raise self.fail(f"the key {k.value!r} appears twice ({_mark(k)}); keep one")
                        seen.add(label)
            stack.extend((child, depth + 1, False) for child in _children(node))
        return self.expanded[id(root)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _check_events(text: str, source: str, limits: Limits, error: type[DocumentError]) -> None:
    """Depth and event count from the parser's event stream, before the (recursive) composer runs."""
    depth = events = 0
    try:
        for event in yaml.parse(text, Loader=_Loader):
            events += 1
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > limits.max_depth:
                    line = event.start_mark.line + 1 if event.start_mark is not None else "?"
                    raise error(
                        source,
                        f"nests deeper than {limits.max_depth} levels (line {line}); acklab refuses it",
                    )
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
            if events > limits.max_nodes:
                raise error(source, f"holds more than {limits.max_nodes:,} values; acklab refuses it")
    except yaml.YAMLError as exc:
        if "maximum nesting depth" in str(exc):  # libyaml's own limit, met while scanning ahead
            raise error(source, f"nests deeper than {limits.max_depth} levels; acklab refuses it") from exc
        raise error(source, f"is not valid YAML: {exc}") from exc


def parse_yaml(
    data: bytes | str, *, source: str, limits: Limits = SPEC, error: type[DocumentError] = DocumentError
) -> Any:
    """Parse one YAML document within `limits` (safe tags only; aliases bounded; no duplicate keys)."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    if len(raw) > limits.max_bytes:
        raise error(source, f"is {_size(len(raw))}; acklab reads at most {limits.describe_size()}")
    text = data if isinstance(data, str) else decode_text(raw, source, error=error)
    _check_events(text, source, limits, error)
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _NodeCheck(source, limits, error).size(node)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise error(source, f"is not valid YAML: {exc}") from exc
    except ValueError as exc:  # a scalar that cannot be converted, e.g. an integer of 5,000 digits
        raise error(source, f"holds a value acklab cannot read: {exc}") from exc
    except RecursionError as exc:  # the checks above make this unreachable in practice
        raise error(source, "nests too deeply to read") from exc
    finally:
        loader.dispose()


def load_yaml(
    path: Path, *, limits: Limits = SPEC, error: type[DocumentError] = DocumentError, what: str | None = None
) -> Any:
    """Read and parse a YAML file within `limits`."""
    source = what or str(path)
    data = read_bounded(path, limits, error=error, what=source)
    return parse_yaml(data, source=source, limits=limits, error=error)
