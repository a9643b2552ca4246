"""An incident read in bounded memory: its small fields, and where each trial lies in the file.

An incident holds every delivery of every trial, and a long run makes one of hundreds of
megabytes: parsed whole it takes gigabytes and tens of seconds. The console never does
that. One streaming pass (`outline`) reads the top-level members one at a time; the small
ones are parsed and kept, the ``trials`` array is walked one trial at a time (each parsed at
C speed, counted and dropped), and what is kept of each trial is its byte span, its number
of deliveries and their latencies. A page of deliveries (`page_trials`) then parses only the
trials it shows, straight from their spans.

Byte offsets come free: the file is decoded as Latin-1 (one character per byte; JSON's
structure is ASCII, so it parses the same), and everything shown is parsed again from its
own bytes as UTF-8 with the bounded loader. Limits: the whole file (`MAX_INCIDENT_BYTES`),
any one member or trial (`MAX_PART_BYTES`), the number of trials (`MAX_TRIALS`); past them
the incident shows as unreadable with the reason, never as a slow or exhausted console.
"""

from __future__ import annotations

import bisect
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acklab.evidence.documents.latency import answered_latency
from acklab.evidence.documents.records import is_faulted
from acklab.evidence.loading import EVIDENCE, DocumentError, Limits, json_depth_exceeds, parse_json

MAX_INCIDENT_BYTES = 4 << 30
MAX_PART_BYTES = 64 << 20
MAX_TRIALS = 100_000
CHUNK = 1 << 20
# Below this, parsing the whole file at once is four times faster than walking it (10,000
# small incidents are read when the console starts); a page then re-reads the small file.
SMALL_BYTES = 1 << 20
MAX_PAGE_TRIALS = 200
PART_LIMITS = Limits(max_bytes=MAX_PART_BYTES, max_depth=EVIDENCE.max_depth)
_DECODER = json.JSONDecoder(parse_constant=lambda name: None)
_WHITESPACE = " \t\n\r"


class OutlineError(Exception):
    """The incident cannot be read within the limits (the message says where and why)."""


@dataclass(frozen=True)
class TrialSpan:
    """Where one trial lies in the file, and what the outline counted of it."""

    start: int  # -1: a small incident, whose trials are taken from the whole document
    end: int
    deliveries: int
    first: int  # the number of deliveries in the trials before it


@dataclass
class Outline:
    """An incident without its trials' contents: small members parsed, trials located."""

    head: dict[str, Any]
    trials: list[TrialSpan] = field(default_factory=list)
    # latencies of the answered deliveries (`evidence.documents.latency`), faulted and not
    faulted: list[float] = field(default_factory=list)
    clean: list[float] = field(default_factory=list)
    size: int = 0

    @property
    def deliveries(self) -> int:
        return self.trials[-1].first + self.trials[-1].deliveries if self.trials else 0


class _Reader:
    """A window over the file, as Latin-1 text, with the file offset of each character."""

    def __init__(self, fh: Any, size: int) -> None:
        self.fh, self.size = fh, size
        self.buf = ""
        self.base = 0  # file offset of buf[0]
        self.pos = 0  # index into buf

    @property
    def offset(self) -> int:
        return self.base + self.pos

    def _more(self, at_least: int = CHUNK) -> bool:
        data = self.fh.read(max(at_least, CHUNK))
        if not data:
            return False
        # Drop what has been consumed, so the window holds only what is still to be read.
        self.buf = self.buf[self.pos :] + data.decode("latin-1")
        self.base += self.pos
        self.pos = 0
        return True

    def peek(self) -> str:
        while True:
            while self.pos < len(self.buf) and self.buf[self.pos] in _WHITESPACE:
                self.pos += 1
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self._more():
                raise OutlineError(f"ends unexpectedly at byte {self.offset}")

    def expect(self, char: str) -> None:
        found = self.peek()
        if found != char:
            raise OutlineError(f"expected {char!r} at byte {self.offset}, found {found!r}")
        self.pos += 1

    def value(self) -> tuple[Any, int, int, str]:
        """The next JSON value: (parsed from Latin-1, start offset, end offset, its text)."""
        self.peek()
        want = CHUNK
        while True:
            try:
                parsed, end = _DECODER.raw_decode(self.buf, self.pos)
                if end < len(self.buf) or self.base + end >= self.size:
                    break  # a number may continue past the window; anything else ended here
            except json.JSONDecodeError as exc:
                if self.base + len(self.buf) >= self.size:
                    raise OutlineError(f"is not valid JSON at byte {self.base + exc.pos}: {exc.msg}") from exc
            except RecursionError as exc:
                raise OutlineError(f"nests too deeply near byte {self.offset}") from exc
            if len(self.buf) - self.pos > MAX_PART_BYTES:
                raise OutlineError(
                    f"holds a value larger than {MAX_PART_BYTES >> 20} MiB at byte {self.offset}; "
                    "the lab writes none"
                )
            self._more(want)
            want *= 2  # the window doubles: a large value costs O(n), not O(n^2)
        text = self.buf[self.pos : end]
        start = self.offset
        self.pos = end
        return parsed, start, self.base + end, text


def _latencies(trial: Any, outline: Outline) -> int:
    deliveries = trial.get("deliveries") if isinstance(trial, dict) else None
    if not isinstance(deliveries, list):
        return 0
    for d in deliveries:
        value = answered_latency(d) if isinstance(d, dict) else None
        if value is not None:
            (outline.faulted if is_faulted(d.get("fault")) else outline.clean).append(value)
    return len(deliveries)


def _open(path: Path) -> tuple[Any, int]:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise OutlineError(f"cannot be read: {exc.strerror}") from exc
    fh = os.fdopen(fd, "rb")
    info = os.fstat(fh.fileno())
    if not stat.S_ISREG(info.st_mode):
        fh.close()
        raise OutlineError("is not a regular file")
    return fh, info.st_size


def outline(path: Path) -> Outline:
    """One bounded pass over an incident file (OutlineError naming what is wrong)."""
    fh, size = _open(path)
    with fh:
        if size > MAX_INCIDENT_BYTES:
            raise OutlineError(
                f"is {size >> 20} MiB; the console reads at most {MAX_INCIDENT_BYTES >> 20} MiB"
            )
        if size <= SMALL_BYTES:
            return _small(fh.read(SMALL_BYTES + 1), size)
        reader = _Reader(fh, size)
        result = Outline(head={}, size=size)
        reader.expect("{")
        if reader.peek() == "}":
            return result
        while True:
            key, *_ = reader.value()
            if not isinstance(key, str):
                raise OutlineError(f"has a member name that is not a string at byte {reader.offset}")
            reader.expect(":")
            if key == "trials" and reader.peek() == "[":
                _trials(reader, result)
            else:
                _, start, _, text = reader.value()
                try:
                    result.head[key] = parse_json(text.encode("latin-1"), source=key, limits=PART_LIMITS)
                except DocumentError as exc:
                    raise OutlineError(f"member {key!r} (byte {start}) {exc.problem}") from exc
            if reader.peek() == "}":
                break
            reader.expect(",")
        return result


def _small(data: bytes, size: int) -> Outline:
    try:
        doc = parse_json(data, source="incident", limits=PART_LIMITS)
    except DocumentError as exc:
        raise OutlineError(exc.problem) from exc
    if not isinstance(doc, dict):
        raise OutlineError(f"is a JSON {type(doc).__name__}, not an object")
    trials = doc.pop("trials", None)
    result = Outline(head=doc, size=size)
    if not isinstance(trials, list):
        if trials is not None:
            result.head["trials"] = trials  # shown as it is; there is nothing to page
        return result
    first = 0
    for trial in trials:
        count = _latencies(trial, result)
        result.trials.append(TrialSpan(-1, -1, count, first))
        first += count
    return result


def _trials(reader: _Reader, result: Outline) -> None:
    reader.expect("[")
    if reader.peek() == "]":
        reader.pos += 1
        return
    first = 0
    while True:
        trial, start, end, text = reader.value()
        if json_depth_exceeds(text.encode("latin-1"), PART_LIMITS.max_depth):
            raise OutlineError(f"trial {len(result.trials) + 1} (byte {start}) nests too deeply")
        count = _latencies(trial, result)
        result.trials.append(TrialSpan(start, end, count, first))
        first += count
        if len(result.trials) > MAX_TRIALS:
            raise OutlineError(f"holds more than {MAX_TRIALS:,} trials; the lab writes no such incident")
        if reader.peek() == "]":
            reader.pos += 1
            return
        reader.expect(",")


def page_trials(
    path: Path, spans: list[TrialSpan], first: int, last: int
) -> list[tuple[int, TrialSpan, dict[str, Any]]]:
    """(position, span, trial) of the trials holding deliveries `first` .. `last - 1`, parsed as UTF-8.

    A trial without deliveries belongs to the page its position falls on; at most
    `MAX_PAGE_TRIALS` trials are returned.
    """
    starts = [s.first for s in spans]
    index = bisect.bisect_left(starts, first)
    if index > 0 and spans[index - 1].first + spans[index - 1].deliveries > first:
        index -= 1  # the trial before holds the page's first delivery
    found: list[tuple[int, TrialSpan, dict[str, Any]]] = []
    fh, _ = _open(path)
    with fh:
        whole: list[Any] | None = None
        for n, span in enumerate(spans[index:], start=index):
            if span.first >= last and found:
                break
            if span.start < 0:
                if whole is None:
                    whole = _whole_trials(fh.read(SMALL_BYTES + 1))
                doc = whole[n] if n < len(whole) else {}
            else:
                fh.seek(span.start)
                try:
                    doc = parse_json(
                        fh.read(span.end - span.start),
                        source=f"trial at byte {span.start}",
                        limits=PART_LIMITS,
                    )
                except DocumentError as exc:
                    raise OutlineError(exc.problem) from exc
            found.append((n, span, doc if isinstance(doc, dict) else {}))
            if span.first + span.deliveries >= last or len(found) >= MAX_PAGE_TRIALS:
                break
    return found


def _whole_trials(data: bytes) -> list[Any]:
    try:
        doc = parse_json(data, source="incident", limits=PART_LIMITS)
    except DocumentError as exc:
        raise OutlineError(exc.problem) from exc
    trials = doc.get("trials") if isinstance(doc, dict) else None
    return trials if isinstance(trials, list) else []
