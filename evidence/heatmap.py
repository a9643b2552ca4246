"""The verdict heatmap: rows x columns of cells, text on every cell — acklab's one heatmap renderer.

A pure function of its cells, standard library only, so that ``acklab sweep`` (its
``heatmap.svg``), the console's sweep page and the console's overview all draw the same
heatmap. Two shapes of one drawing:

* `render_heatmap`: a standalone SVG document (title, row labels and grid in one image);
* `heatmap_frame`: the same labels and grid as two SVGs in an HTML frame, the labels kept in
  place while the grid scrolls sideways in its own region (the console's overview, where
  eleven experiments must fit 1300 px and a narrow window still reads which row is which).

Every cell carries its verdict as a word, its pass rate, its counts and a ``<title>``;
colour repeats what the text says and is never the only carrier of a verdict. Every
attribute value and text node is escaped: a target or experiment name recorded from a
hostile handler can never become markup. Only presentation attributes are used (no
``style``, which the console's CSP refuses).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from html import escape

from acklab.evidence.documents.sweep import SweepCell, SweepDocument

# verdict -> (fill, stroke/ink); the console's charts use the same palette
VERDICT_COLORS = {
    "pass": ("#dafbe1", "#1a7f37"),
    "fail": ("#ffebe9", "#cf222e"),
    "error": ("#fff8c5", "#9a6700"),
}
MUTED_COLORS = ("#f6f8fa", "#57606a")  # skipped, pending, anything else
EMPTY_STROKE = "#d0d7de"
INK, MUTED = "#1f2328", "#57606a"
FONT = "system-ui, -apple-system, Segoe UI, Roboto, sans-serif"
LABEL_W, CELL_W, CELL_H, HEAD_H, GAP, PAD, TITLE_H = 160, 92, 84, 44, 4, 12, 34
HEAD_LIMIT, ROW_LIMIT, NOTE_LIMIT, TITLE_LIMIT = 12, 21, 13, 90
WARNING = " \u26a0"


@dataclass(frozen=True)
class HeatRow:
    """A row: its key (what cells name), the lines of its label (the first in bold), its title."""

    key: str
    lines: tuple[str, ...]
    title: str

    @classmethod
    def of(cls, key: str) -> HeatRow:
        """A row whose label is its key, a line break starting each further line."""
        lines = tuple(key.split("\n"))
        return cls(key, lines, " \u00b7 ".join(lines))


@dataclass(frozen=True)
class HeatCell:
    """One cell: a row (its key), a column (an experiment), its verdict and counts."""

    row: str
    column: str
    verdict: str  # pass | fail | error | skipped | pending
    trials: int = 0
    passed: int = 0
    failed: int = 0
    errors: int = 0
    violations: int = 0
    note: str = ""  # said in the tooltip; drawn on a cell without trials (why it was skipped)
    href: str | None = None
    warning: str = ""  # drawn as a sign beside the verdict, said in the tooltip

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


def _titled(title: str, *children: str, **attrs: object) -> str:
    return _el("g", attrs, _el("title", {}, escape(title)), *children)


def clip(label: str, limit: int) -> str:
    return label if len(label) <= limit else label[: limit - 1] + "\u2026"


def wrap_name(name: str, limit: int) -> list[str]:
    """A column name on at most two lines, broken after a hyphen (the second line clipped)."""
    if len(name) <= limit:
        return [name]
    hyphens = [n + 1 for n, c in enumerate(name[:limit]) if c == "-"]
    cut = max(hyphens) if hyphens else limit - 1
    return [name[:cut] if hyphens else name[:cut] + "-", clip(name[cut:], limit)]


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
        out[-1] = clip(out[-1] + " " + " ".join(words), width)
    return [clip(line, width) for line in out]


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def describe(cell: HeatCell, row: str | None = None) -> str:
    """The cell in one sentence (its tooltip, and what a screen reader hears)."""
    sentence = f"{row or HeatRow.of(cell.row).title} \u00d7 {cell.column}: {cell.verdict}"
    if cell.trials:
        sentence += (
            f", {cell.passed}/{cell.trials} trials passed, {cell.failed} failed, {cell.errors} errors, "
            f"{_plural(cell.violations, 'violation')}"
        )
    return sentence + "".join(f" \u2014 {part}" for part in (cell.note, cell.warning) if part)


def _cell(cell: HeatCell, x: float, y: float, row: HeatRow) -> str:
    fill, ink = VERDICT_COLORS.get(cell.verdict, MUTED_COLORS)
    rate = cell.rate
    bar = {"x": x + 8, "y": y + CELL_H - 12, "height": 5, "rx": 2.5}
    box = {"x": x, "y": y, "width": CELL_W, "height": CELL_H, "rx": 6}
    parts = [
        _el("title", {}, escape(describe(cell, row.title))),
        _el("rect", {**box, "fill": fill, "stroke": ink, "stroke_width": 1.5}),
        _text(
            x + 8, y + 18, cell.verdict.upper() + (WARNING if cell.warning else ""), font_size=13,
            font_weight="700", fill=ink,
        ),
    ]  # fmt: skip
    if rate is None:
        for n, line in enumerate(_wrap(cell.note or "no trials", NOTE_LIMIT, 3)):
            parts.append(_text(x + 8, y + 36 + 15 * n, line, font_size=11, fill=ink))
    else:
        parts += [
            _text(x + 8, y + 35, f"{rate:.0%} pass"),
            _text(x + 8, y + 51, _plural(cell.trials, "trial"), font_size=11),
            _text(x + 8, y + 66, _plural(cell.violations, "violation"), font_size=11),
            _el("rect", {**bar, "width": CELL_W - 16, "fill": "#ffffff", "stroke": ink, "stroke_width": 0.5}),
            _el("rect", {**bar, "width": (CELL_W - 16) * rate, "fill": ink}),
        ]
    attrs = {"class": f"cell {cell.verdict}", "data-row": row.title, "data-column": cell.column}
    if cell.href:
        return _el("a", {"href": cell.href, **attrs}, *parts)
    return _el("g", attrs, *parts)


def _empty(x: float, y: float) -> str:
    box = {"x": x, "y": y, "width": CELL_W, "height": CELL_H, "rx": 6}
    return _el("rect", {**box, "fill": MUTED_COLORS[0], "stroke": EMPTY_STROKE}) + _text(
        x + CELL_W / 2, y + CELL_H / 2 + 4, "not run", text_anchor="middle", fill=MUTED
    )


@dataclass(frozen=True)
class _Grid:
    """The rows, columns and cells to draw, and the header's height."""

    rows: list[HeatRow]
    columns: list[str]
    cells: dict[tuple[str, str], HeatCell]

    @property
    def head_h(self) -> int:
        return HEAD_H if any(len(wrap_name(c, HEAD_LIMIT)) > 1 for c in self.columns) else HEAD_H - 15

    @property
    def width(self) -> int:
        return max(1, len(self.columns)) * (CELL_W + GAP)

    @property
    def height(self) -> int:
        return self.head_h + max(1, len(self.rows)) * (CELL_H + GAP)

    def labels(self, right: float, top: float) -> list[str]:
        """Each row's label, right-aligned at `right`, the grid's first row at `top`."""
        out = []
        for n, row in enumerate(self.rows):
            y = top + self.head_h + n * (CELL_H + GAP)
            lines = row.lines[:3]
            baseline = y + CELL_H / 2 + 4 - 8 * (len(lines) - 1)
            texts = [
                _text(
                    right, baseline + 16 * k, clip(line, ROW_LIMIT), text_anchor="end",
                    font_weight="600" if k == 0 else "normal", fill=INK if k == 0 else MUTED,
                )
                for k, line in enumerate(lines)
            ]  # fmt: skip
            out.append(_titled(row.title, *texts))
        return out

    def body(self, left: float, top: float) -> list[str]:
        """The column headers and the cells, the grid's top-left corner at (`left`, `top`)."""
        out = []
        for col, name in enumerate(self.columns):
            x = left + col * (CELL_W + GAP) + CELL_W / 2
            lines = wrap_name(name, HEAD_LIMIT)
            first = top + self.head_h - 10 - 15 * (len(lines) - 1)
            texts = [
                _text(x, first + 15 * n, line, text_anchor="middle", font_weight="600")
                for n, line in enumerate(lines)
            ]
            out.append(_titled(name, *texts))
        for n, row in enumerate(self.rows):
            y = top + self.head_h + n * (CELL_H + GAP)
            for col, column in enumerate(self.columns):
                x = left + col * (CELL_W + GAP)
                cell = self.cells.get((row.key, column))
                out.append(_empty(x, y) if cell is None else _cell(cell, x, y, row))
        return out


def _ordered(values: Iterable[str], order: Sequence[str] | None) -> list[str]:
    seen = list(dict.fromkeys(values))
    if not order:
        return seen
    known = [v for v in order if v in seen]
    return known + [v for v in seen if v not in known]


def _grid(
    cells: Iterable[HeatCell], rows: Sequence[HeatRow | str] | None, columns: Sequence[str] | None
) -> _Grid:
    """`rows` and `columns` fix the order (names not among the cells are dropped; cells whose
    names are not listed follow in the order met)."""
    grid = {(c.row, c.column): c for c in cells}
    given = {r.key: r for r in (rows or ()) if isinstance(r, HeatRow)}
    order = [r.key if isinstance(r, HeatRow) else r for r in (rows or ())]
    row_keys = [k for k in _ordered((k for k, _ in grid), order) if any(g[0] == k for g in grid)]
    col_names = [c for c in _ordered((c for _, c in grid), columns) if any(g[1] == c for g in grid)]
    return _Grid([given.get(k) or HeatRow.of(k) for k in row_keys], col_names, grid)


def _svg(width: float, height: float, label: str, parts: Sequence[str], **attrs: object) -> str:
    root = {
        "xmlns": "http://www.w3.org/2000/svg",
        **attrs,
        "viewBox": f"0 0 {width:.0f} {height:.0f}",
        "width": f"{width:.0f}",
        "height": f"{height:.0f}",
        "role": "img",
        "aria-label": label,
        "font-family": FONT,
    }
    return _el("svg", root, *parts)


def render_heatmap(
    cells: Iterable[HeatCell],
    *,
    title: str = "Verdict per target and experiment",
    rows: Sequence[HeatRow | str] | None = None,
    columns: Sequence[str] | None = None,
    declaration: bool = True,
) -> str:
    """A complete SVG document: a title, then one row per `row`, one column per `column`.

    ``declaration=False`` leaves out the XML declaration, to inline the ``<svg>`` in HTML.
    A missing cell reads "not run".
    """
    cells = list(cells)
    grid = _grid(cells, rows, columns)
    shown = clip(title, TITLE_LIMIT)
    # ~9 px per character of the 15 px bold title, so that it is never cut off
    width = max(PAD + LABEL_W + GAP + grid.width + PAD, 2 * PAD + 9 * len(shown))
    height = TITLE_H + grid.height + PAD
    titles = {r.key: r.title for r in grid.rows}
    everything = " ; ".join(describe(c, titles.get(c.row)) for c in cells)
    parts = [
        _el("title", {}, escape(title)),
        _el("desc", {}, escape(everything or "no cells")),
        _el("rect", {"x": 0, "y": 0, "width": width, "height": height, "fill": "#ffffff"}),
        _text(PAD, 22, shown, font_size=15, font_weight="700"),
    ]
    if not grid.cells:
        parts.append(_text(PAD, TITLE_H + 20, "no cells", fill=MUTED))
    parts += grid.labels(PAD + LABEL_W - 10, TITLE_H)
    parts += grid.body(PAD + LABEL_W + GAP, TITLE_H)
    document = _svg(width, height, title, parts) + "\n"
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + document if declaration else document


def heatmap_frame(
    cells: Iterable[HeatCell],
    *,
    rows: Sequence[HeatRow],
    columns: Sequence[str],
    label: str,
    rows_label: str = "Targets and databases",
) -> str:
    """The heatmap as HTML: its row labels beside a region that scrolls the grid sideways."""
    grid = _grid(cells, rows, columns)
    labels = _svg(
        LABEL_W, grid.height, rows_label, grid.labels(LABEL_W - 10, 0), class_="chart heatmap-labels"
    )
    body = _svg(grid.width, grid.height, label, grid.body(0, 0), class_="chart heatmap")
    region = {
        "class": "scroll heatmap-scroll",
        "tabindex": 0,
        "role": "region",
        "aria-label": "Verdicts (scrolls sideways when the experiments do not fit)",
    }
    return _el("div", {"class": "heatmap-frame"}, labels, _el("div", region, body))


def sweep_cells(doc: SweepDocument, href: Callable[[SweepCell], str | None] | None = None) -> list[HeatCell]:
    """The cells of a sweep (rows: target, then database); `href` links a cell.

    Without `href` a cell links its incident file, relative to the sweep's directory.
    """
    return [
        HeatCell(
            row=f"{c.target}\n{c.database}",
            column=c.experiment,
            verdict=c.verdict,
            trials=c.trials,
            passed=c.passed,
            failed=c.failed,
            errors=c.errors,
            violations=c.violations,
            note=c.reason or "",
            href=href(c) if href is not None else c.incident,
        )
        for c in doc.cells
    ]


def sweep_heatmap(
    doc: SweepDocument,
    *,
    href: Callable[[SweepCell], str | None] | None = None,
    declaration: bool = True,
) -> str:
    """The heatmap of a sweep (what ``acklab sweep`` writes as heatmap.svg)."""
    trials = doc.trials_per_experiment
    title = (
        f"acklab sweep {doc.sweep_id}: {doc.verdict} ({trials} trial{'s' if trials != 1 else ''} per cell)"
    )
    return render_heatmap(
        sweep_cells(doc, href), title=title, columns=doc.experiments, declaration=declaration
    )
