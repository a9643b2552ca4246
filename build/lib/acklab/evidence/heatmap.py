"""The verdict heatmap as a standalone SVG document: rows x columns of cells, text on every cell.

A pure function of its cells (`render_heatmap`), standard library only, so that the harness
(``acklab sweep`` writes ``heatmap.svg``) and the console can both draw it. Every cell
carries its verdict as a word, its pass rate, its counts and a ``<title>``; colour repeats
what the text says and is never the only carrier of a verdict. Every attribute value and
text node is escaped: a target or experiment name recorded from a hostile handler can never
become markup.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

# verdict -> (fill, stroke/ink); the same palette as the console's charts
VERDICT_COLORS = {
    "pass": ("#dafbe1", "#1a7f37"),
    "fail": ("#ffebe9", "#cf222e"),
    "error": ("#fff8c5", "#9a6700"),
}
MUTED_COLORS = ("#f6f8fa", "#57606a")  # skipped, pending, anything else
INK = "#1f2328"
FONT = "system-ui, -apple-system, Segoe UI, Roboto, sans-serif"
LABEL_W, CELL_W, CELL_H, HEAD_H, GAP, PAD = 250, 160, 78, 58, 4, 12
TITLE_LIMIT, ROW_LIMIT, COLUMN_LIMIT = 90, 38, 22


@dataclass(frozen=True)
class HeatCell:
    """One cell: a row (e.g. target and database), a column (an experiment), and its counts."""

    row: str  # a line break starts a second line of the row's label (e.g. the database)
    column: str
    verdict: str  # pass | fail | error | skipped | pending
    trials: int = 0
    passed: int = 0
    failed: int = 0
    errors: int = 0
    violations: int = 0
    note: str = ""  # shown in the tooltip (why a cell was skipped or errored)
    href: str | None = None

    @property
    def rate(self) -> float | None:
        """Passed trials over trials; None when no trial ran."""
        return self.passed / self.trials if self.trials else None


def _attrs(values: Mapping[str, object]) -> str:
    out = []
    for name, value in values.items():
        if value is None:
            continue
        shown = f"{value:.1f}" if isinstance(value, float) else str(value)
        out.append(f' {name.rstrip("_").replace("_", "-")}="{escape(shown, quote=True)}"')
    return "".join(out)


def _el(tag: str, attrs: Mapping[str, object], *children: str) -> str:
    """An element; children are already-built markup (use `_text` for text nodes)."""
    return f"<{tag}{_attrs(attrs)}>{''.join(children)}</{tag}>"


def _text(x: float, y: float, label: str, **attrs: object) -> str:
    base: dict[str, object] = {"x": x, "y": y, "font_size": 12, "fill": INK}
    return _el("text", {**base, **attrs}, escape(label))


def _clip(label: str, limit: int) -> str:
    return label if len(label) <= limit else label[: limit - 1] + "\u2026"


def _wrap(label: str, width: int, lines: int) -> list[str]:
    """`label` in at most `lines` lines of about `width` characters, the last clipped."""
    out: list[str] = []
    words = label.split()
    while words and len(out) < lines:
        line = words.pop(0)
        while words and len(line) + 1 + len(words[0]) <= width:
            line += " " + words.pop(0)
        out.append(line)
    if words:
        out[-1] = _clip(out[-1] + " " + " ".join(words), width)
    return [_clip(line, width) for line in out]


def _ordered(values: Iterable[str], order: Sequence[str] | None) -> list[str]:
    seen = list(dict.fromkeys(values))
    if not order:
        return seen
    known = [v for v in order if v in seen]
    return known + [v for v in seen if v not in known]


def describe(cell: HeatCell) -> str:
    """The cell in one sentence (its tooltip, and what a screen reader hears)."""
    row = " \u00b7 ".join(cell.row.split("\n"))
    sentence = f"{row} \u00d7 {cell.column}: {cell.verdict}"
    if cell.trials:
        sentence += (
            f", {cell.passed}/{cell.trials} trials passed, {cell.failed} failed, {cell.errors} errors, "
            f"{cell.violations} violation{'s' if cell.violations != 1 else ''}"
        )
    return sentence + (f" \u2014 {cell.note}" if cell.note else "")


def _cell(cell: HeatCell, x: float, y: float) -> str:
    fill, ink = VERDICT_COLORS.get(cell.verdict, MUTED_COLORS)
    rate = cell.rate
    bar = {"x": x + 10, "y": y + CELL_H - 16, "height": 6, "rx": 3}
    parts = [
        _el("title", {}, escape(describe(cell))),
        _el(
            "rect", {"x": x, "y": y, "width": CELL_W, "height": CELL_H, "rx": 6, "fill": fill, "stroke": ink}
        ),
        _text(x + 10, y + 20, cell.verdict.upper(), font_size=13, font_weight="700", fill=ink),
    ]
    if rate is None:
        for n, line in enumerate(_wrap(cell.note or "no trials", 25, 2)):
            parts.append(_text(x + 10, y + 40 + 16 * n, line, font_size=11, fill=ink))
    else:
        parts += [
            _text(x + CELL_W - 10, y + 20, f"{rate:.0%} pass", text_anchor="end"),
            _text(x + 10, y + 38, f"{cell.passed}/{cell.trials} passed \u00b7 {cell.failed} failed"),
            _text(x + 10, y + 54, f"{cell.errors} errors \u00b7 {cell.violations} viol."),
            _el("rect", {**bar, "width": CELL_W - 20, "fill": "#ffffff", "stroke": ink, "stroke_width": 0.5}),
            _el("rect", {**bar, "width": (CELL_W - 20) * rate, "fill": ink}),
        ]
    attrs = {"class": f"cell {cell.verdict}", "data-row": cell.row, "data-column": cell.column}
    if cell.href:
        return _el("a", {"href": cell.href, **attrs}, *parts)
    return _el("g", attrs, *parts)


def render_heatmap(
    cells: Iterable[HeatCell],
    *,
    title: str = "Verdict per target and experiment",
    rows: Sequence[str] | None = None,
    columns: Sequence[str] | None = None,
    declaration: bool = True,
) -> str:
    """A complete SVG document: one row per `row`, one column per `column`, a cell each.

    ``declaration=False`` leaves out the XML declaration, to inline the ``<svg>`` in HTML.

    `rows` and `columns` fix the order (names not among the cells are dropped; cells whose
    names are not listed follow in the order met). A missing cell reads "not run".
    """
    grid = {(c.row, c.column): c for c in cells}
    row_names = [r for r in _ordered((r for r, _ in grid), rows) if any(k[0] == r for k in grid)]
    col_names = [c for c in _ordered((c for _, c in grid), columns) if any(k[1] == c for k in grid)]
    shown_title = _clip(title, TITLE_LIMIT)
    # ~9 px per character of the 15 px bold title, so that it is never cut off
    width = max(LABEL_W + max(1, len(col_names)) * (CELL_W + GAP) + PAD, 2 * PAD + 9 * len(shown_title))
    height = HEAD_H + max(1, len(row_names)) * (CELL_H + GAP) + PAD
    parts = [
        _el("title", {}, escape(title)),
        _el("desc", {}, escape(" ; ".join(describe(c) for c in grid.values()) or "no cells")),
        _el("rect", {"x": 0, "y": 0, "width": width, "height": height, "fill": "#ffffff"}),
        _text(PAD, 22, shown_title, font_size=15, font_weight="700"),
    ]
    if not grid:
        parts.append(_text(PAD, HEAD_H + 20, "no cells", fill=MUTED_COLORS[1]))
    for col, name in enumerate(col_names):
        x = LABEL_W + col * (CELL_W + GAP) + CELL_W / 2
        parts.append(
            _text(x, HEAD_H - 10, _clip(name, COLUMN_LIMIT), text_anchor="middle", font_weight="600")
        )
    for row, name in enumerate(row_names):
        y = HEAD_H + row * (CELL_H + GAP)
        lines = name.split("\n")[:3]
        top = y + CELL_H / 2 + 4 - 8 * (len(lines) - 1)
        for n, line in enumerate(lines):
            weight = "600" if n == 0 else "normal"
            parts.append(
                _text(
                    LABEL_W - 10, top + 16 * n, _clip(line, ROW_LIMIT), text_anchor="end", font_weight=weight
                )
            )
        for col, column in enumerate(col_names):
            x = LABEL_W + col * (CELL_W + GAP)
            cell = grid.get((name, column))
            if cell is None:
                box = {"x": x, "y": y, "width": CELL_W, "height": CELL_H, "rx": 6}
                parts += [
                    _el("rect", {**box, "fill": MUTED_COLORS[0], "stroke": "#d0d7de"}),
                    _text(x + CELL_W / 2, y + CELL_H / 2 + 4, "not run", text_anchor="middle"),
                ]
            else:
                parts.append(_cell(cell, x, y))
    root = {
        "xmlns": "http://www.w3.org/2000/svg",
        "viewBox": f"0 0 {width} {height}",
        "width": width,
        "height": height,
        "role": "img",
        "aria-label": title,
        "font-family": FONT,
    }
    document = _el("svg", root, *parts) + "\n"
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + document if declaration else document


def sweep_cells(
    doc: Mapping[str, Any], href: Callable[[Mapping[str, Any]], str | None] | None = None
) -> list[HeatCell]:
    """The cells of a sweep.json document (rows: target, then database); `href` links a cell.

    Without `href` a cell links its incident file, relative to the sweep's directory.
    """
    return [
        HeatCell(
            row=f"{c['target']}\n{c['database']}",
            column=c["experiment"],
            verdict=c["verdict"],
            trials=c["trials"],
            passed=c["passed"],
            failed=c["failed"],
            errors=c["errors"],
            violations=c["violations"],
            note=c.get("reason") or "",
            href=href(c) if href is not None else c.get("incident"),
        )
        for c in doc["cells"]
    ]


def sweep_heatmap(
    doc: Mapping[str, Any],
    *,
    href: Callable[[Mapping[str, Any]], str | None] | None = None,
    declaration: bool = True,
) -> str:
    """The heatmap of a sweep.json document (what ``acklab sweep`` writes as heatmap.svg)."""
    trials = doc["trials_per_experiment"]
    title = f"acklab sweep {doc['sweep_id']}: {doc['verdict']} ({trials} trial{'s' if trials != 1 else ''} per cell)"
    return render_heatmap(
        sweep_cells(doc, href), title=title, columns=doc["experiments"], declaration=declaration
    )
