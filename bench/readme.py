"""``python -m bench.readme``: rewrite docs/performance.md's table from bench/results.json.

The table lives between ``<!-- bench:start -->`` and ``<!-- bench:end -->``, the slowest test
files of the last ``make test`` between ``<!-- slowest-files:start -->`` and
``<!-- slowest-files:end -->``; everything outside the markers is left byte for byte. ``--check`` exits 1 when the page's table is
not the one the results file gives (nothing is written).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from bench.figures import RESULTS

# The table is reference, so it lives in the docs site: docs/performance.md.
README = Path(__file__).resolve().parent.parent / "docs" / "performance.md"
START, END = "<!-- bench:start -->", "<!-- bench:end -->"
SLOWEST_START, SLOWEST_END = "<!-- slowest-files:start -->", "<!-- slowest-files:end -->"


class MarkersMissing(ValueError):
    """The page has no (or a broken) pair of bench markers."""


def number(value: float | None, unit: str = "") -> str:
    """A figure's value for humans: three significant digits, thousands grouped."""
    if value is None:
        return "—"
    if value == 0 or not math.isfinite(value):
        text = f"{value:g}"
    elif abs(value) >= 1000:
        text = f"{value:,.0f}"
    else:
        digits = max(0, 2 - math.floor(math.log10(abs(value))))
        text = f"{value:.{digits}f}"
    return f"{text} {unit}".strip() if unit else text


def _met(met: bool | None, value: float | None) -> str:
    if value is None:
        return "not measured"
    return {True: "yes", False: "**no**", None: "—"}[met]


def _value(figure: dict[str, Any], unit: str) -> str:
    """The value cell; a figure measured in independent rounds shows its worst round and the median."""
    shown = number(figure["value"], unit)
    if figure.get("rounds") and figure["value"] is not None:
        shown += f" (worst of {figure['rounds']} rounds; median {number(figure.get('median'), unit)})"
    return shown


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def table(doc: dict[str, Any]) -> str:
    """The markdown between the markers: the table, the notes, and where it was measured."""
    lines = [
        "| figure | value | baseline | ratio | target | met |",
        "| --- | ---: | ---: | ---: | --- | --- |",
    ]
    notes = []
    for f in doc["figures"]:
        unit = f.get("unit", "")
        ratio = f"{f['ratio']:.2f}x" if f.get("ratio") is not None else "—"
        lines.append(
            "| "
            + " | ".join(
                _cell(c)
                for c in (
                    f["name"],
                    _value(f, unit),
                    number(f.get("baseline"), unit),
                    ratio,
                    f.get("target") or "—",
                    _met(f.get("met"), f["value"]),
                )
            )
            + " |"
        )
        if f.get("note"):
            notes.append(f"- *{_cell(f['name'])}*: {_cell(f['note'])}")
    m = doc.get("machine", {})
    where = (
        f"Measured {doc.get('generated_at', '?')} on {m.get('cpus', '?')} CPUs ({m.get('processor', '?')}, "
        f"{m.get('platform', '?')}), Python {m.get('python', '?')}"
    )
    if doc.get("quick"):
        where += " — quick variant"
    where += f"; `make bench` took {doc['elapsed_s']:.0f} s." if "elapsed_s" in doc else "."
    where += times(doc.get("timings") or {})
    for update in doc.get("updates", []):
        where += f" Re-measured {update['at']}: {', '.join(update['modules'])}" + (
            " (quick variant)." if update.get("quick") else "."
        )
    return "\n".join([*lines, "", where, "", *notes])


def times(timings: dict[str, Any]) -> str:
    """Where the bench's own time went, module by module (results.json's ``timings``), longest first."""

    cpu = timings.get("reliability_cpu_s") or {}
    busy = timings.get("busy") or {}

    def each(part: str) -> str:
        seconds = sorted((timings.get(part) or {}).items(), key=lambda kv: -kv[1])
        return ", ".join(
            f"{name} {s:.0f} s"
            + (f" ({cpu[name]:.0f} CPU-s)" if part == "reliability" and name in cpu else "")
            for name, s in seconds
        )

    def how_busy(part: str) -> str:
        return f", the machine's cores {busy[part]:.0%} busy" if part in busy else ""

    found = ""
    if timings.get("figures"):
        found += f" The timing figures, one module at a time{how_busy('figures')}: {each('figures')}."
    if timings.get("reliability"):
        found += (
            f" The reliability parts, {timings.get('jobs', '?')} at a time with "
            f"{timings.get('runs_at_once', 1)} run(s) of a figure at once{how_busy('reliability')}"
            + (" (a part's CPU: its processes and those they waited for)" if cpu else "")
            + f": {each('reliability')}."
        )
    return found


def slowest_table(doc: dict[str, Any]) -> str:
    """The markdown between the slowest-files markers: where the suite's time went."""
    files = doc.get("slowest_files") or []
    if not files:
        return "No test session recorded its files yet: run `make test`, then `make bench`."
    lines = [
        "| test file | tests | wall | CPU | fixtures that cost most | programs it started |",
        "| --- | ---: | ---: | ---: | --- | --- |",
    ]
    for f in files:
        fixtures = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in f.get("fixtures", {}).items())
        programs = ", ".join(f"{name} x{n}" for name, n in f.get("programs", {}).items())
        cells = (f"`{f['file']}`", str(f["tests"]), f"{f['wall_s']:.1f} s", f"{f['cpu_s']:.1f} s", fixtures or "—",
                 programs or "—")  # fmt: skip
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines)


def _between(page: str, start: str, end: str, text: str) -> str:
    head, found, rest = page.partition(start)
    if not found or end not in rest:
        raise MarkersMissing(f"the page has no {start} ... {end} pair; add both where the table belongs")
    _, _, tail = rest.partition(end)
    return f"{head}{start}\n{text}\n{end}{tail}"


def render(readme: str, doc: dict[str, Any]) -> str:
    """`readme` with the text between the markers replaced by `table(doc)`, and — where the page
    has them — the slowest test files between theirs."""
    page = _between(readme, START, END, table(doc))
    if SLOWEST_START in page:
        page = _between(page, SLOWEST_START, SLOWEST_END, slowest_table(doc))
    return page


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.readme", description=__doc__.split("\n", 1)[0])
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--readme", type=Path, default=README)
    parser.add_argument("--check", action="store_true", help="exit 1 when the table is out of date")
    args = parser.parse_args(argv)
    doc = json.loads(args.results.read_text())
    current = args.readme.read_text()
    try:
        updated = render(current, doc)
    except MarkersMissing as exc:
        print(f"bench.readme: {args.readme}: {exc}", file=sys.stderr)
        return 2
    if args.check:
        if updated != current:
            print(
                f"{args.readme}'s performance table is out of date: run python -m bench.readme",
                file=sys.stderr,
            )
            return 1
        return 0
    args.readme.write_text(updated)
    print(f"updated the performance table in {args.readme}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
