"""Server-side SVG charts: the verdict heatmap, latency under fault, checkpoint durations.

Plain SVG, no chart library and nothing loaded from outside. Every element is built by `el`,
which escapes every attribute value and every text child, so a target or experiment name
recorded from a hostile handler can never become markup. Only presentation attributes are
used (no `style` attribute, which the CSP forbids), and every mark carries a text label or a
<title>, so colour is never the only carrier of a verdict.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping

from markupsafe import Markup

from .overview import ROW_SEPARATOR, Heatmap, LatencyRow
from .scan import IncidentSummary, Latency
from .timeline import TrialView

VERDICT_COLORS = {
    "pass": ("#dafbe1", "#1a7f37"),
    "fail": ("#ffebe9", "#cf222e"),
    "error": ("#fff8c5", "#9a6700"),
}
UNKNOWN_COLORS = ("#eaeef2", "#57606a")
FAULTED, CLEAN, MUTED, INK = "#bc4c00", "#0969da", "#57606a", "#1f2328"
FONT = "system-ui, -apple-system, Segoe UI, Roboto, sans-serif"
Attrs = Mapping[str, object]


_LT, _LT_SLASH, _GT, _EQ, _QUOTE = Markup("<"), Markup("</"), Markup(">"), Markup('="'), Markup('"')


def _attr(value: object) -> str:
    return f"{value:.1f}" if isinstance(value, float) else str(value)


@functools.cache
def _attr_name(name: str) -> Markup:
    return Markup(" ") + name.rstrip("_").replace("_", "-")


def el(tag: str, attrs: Attrs | None = None, *children: Markup | str) -> Markup:
    """An SVG element; attribute names use `_` for `-`, values and text children are escaped.

    Markup.join escapes every piece that is not already Markup, so nothing recorded in a
    bundle can open a tag or leave an attribute value.
    """
    parts: list[Markup | str] = [_LT, tag]
    for name, value in (attrs or {}).items():
        if value is not None:
            parts += [_attr_name(name), _EQ, _attr(value), _QUOTE]
    parts.append(_GT)
    parts.extend(children)
    parts += [_LT_SLASH, tag, _GT]
    return Markup("").join(parts)


def text(
    x: float,
    y: float,
    label: str,
    *,
    size: int = 12,
    anchor: str = "start",
    weight: str = "normal",
    fill: str = INK,
) -> Markup:
    return el(
        "text",
        {"x": x, "y": y, "font_size": size, "text_anchor": anchor, "font_weight": weight, "fill": fill},
        label,
    )


def svg(css_class: str, width: float, height: float, label: str, parts: Iterable[Markup]) -> Markup:
    attrs = {
        "xmlns": "http://www.w3.org/2000/svg",
        "class_": f"chart {css_class}",
        "viewBox": f"0 0 {width:.0f} {height:.0f}",
        "width": f"{width:.0f}",
        "height": f"{height:.0f}",
        "role": "img",
        "font_family": FONT,
        "aria_label": label,
    }
    return el("svg", attrs, *parts)


def clip(label: str, limit: int) -> str:
    return label if len(label) <= limit else label[: limit - 1] + "…"


def ms(value: float) -> str:
    """A latency for people: 35 ms, 2.4 s."""
    if value >= 1000:
        return f"{value / 1000:.1f} s"
    if value >= 10:
        return f"{value:.0f} ms"
    return f"{value:.1f}".removesuffix(".0") + " ms"


HEAT_LABEL_W, HEAT_CELL_W, HEAT_CELL_H, HEAT_HEAD_H, HEAT_GAP = 160, 92, 84, 44, 4
HEAD_LIMIT, ROW_LIMIT = 12, 21  # characters that fit a column header line and a row label line


def wrap_name(name: str, limit: int) -> list[str]:
    """A column name on at most two lines, broken after a hyphen (the second line clipped)."""
    if len(name) <= limit:
        return [name]
    hyphens = [n + 1 for n, c in enumerate(name[:limit]) if c == "-"]
    cut = max(hyphens) if hyphens else limit - 1
    return [name[:cut] if hyphens else name[:cut] + "-", clip(name[cut:], limit)]


def plural(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def heatmap_svg(
    grid: Heatmap,
    href: Callable[[IncidentSummary], str | None],
    warned: set[str],
    *,
    label: str = "Latest verdict per target and experiment",
) -> Markup:
    """Rows are targets (on a database), columns experiments; a cell shows verdict, pass rate, trials, violations.

    Two SVGs side by side: the row labels stay in place while the grid scrolls sideways in
    its own region, so eleven experiments fit 1300 px and a narrow window still reads
    which row is which.
    """
    label_w, cell_w, cell_h, gap = HEAT_LABEL_W, HEAT_CELL_W, HEAT_CELL_H, HEAT_GAP
    headers = [wrap_name(name, HEAD_LIMIT) for name in grid.experiments]
    head_h = HEAT_HEAD_H if any(len(lines) > 1 for lines in headers) else HEAT_HEAD_H - 15
    width = len(grid.experiments) * (cell_w + gap)
    height = head_h + len(grid.rows) * (cell_h + gap)
    labels: list[Markup] = []
    parts: list[Markup] = []
    for col, (name, lines) in enumerate(zip(grid.experiments, headers, strict=True)):
        x = col * (cell_w + gap) + cell_w / 2
        first = head_h - 10 - 15 * (len(lines) - 1)  # the baseline of the header's first line
        header = [
            text(x, first + 15 * n, line, anchor="middle", weight="600") for n, line in enumerate(lines)
        ]
        parts.append(el("g", None, el("title", None, name), *header))
    for n, row in enumerate(grid.rows):
        y = head_h + n * (cell_h + gap)
        lines = row.lines
        baseline = y + cell_h / 2 + 4 - 8 * (len(lines) - 1)
        row_label = [
            text(
                label_w - 10,
                baseline + 16 * k,
                clip(line, ROW_LIMIT),
                anchor="end",
                weight="600" if k == 0 else "normal",
                fill=INK if k == 0 else MUTED,
            )
            for k, line in enumerate(lines)
        ]
        labels.append(el("g", None, el("title", None, row.title), *row_label))
        for col, experiment in enumerate(grid.experiments):
            x = col * (cell_w + gap)
            incident = grid.by_row.get((row, experiment))
            if incident is None:
                box = {"x": x, "y": y, "width": cell_w, "height": cell_h, "rx": 6}
                parts += [
                    el("rect", {**box, "fill": "#f6f8fa", "stroke": "#d0d7de"}),
                    text(x + cell_w / 2, y + cell_h / 2 + 4, "not run", anchor="middle", fill=MUTED),
                ]
                continue
            parts.append(
                _cell(
                    (x, y, cell_w, cell_h),
                    incident,
                    row=row.title,
                    link=href(incident),
                    warned=incident.bundle in warned,
                )
            )
    region = {
        "class_": "scroll heatmap-scroll",
        "tabindex": 0,
        "role": "region",
        "aria_label": "Verdicts (scrolls sideways when the experiments do not fit)",
    }
    return el(
        "div",
        {"class_": "heatmap-frame"},
        svg("heatmap-labels", label_w, height, "Targets and databases", labels),
        el("div", region, svg("heatmap", width, height, label, parts)),
    )


def _cell(
    box: tuple[float, float, float, float],
    incident: IncidentSummary,
    *,
    row: str,
    link: str | None,
    warned: bool,
) -> Markup:
    x, y, w, h = box
    fill, stroke = VERDICT_COLORS.get(incident.verdict, UNKNOWN_COLORS)
    rate = incident.passed / incident.trials if incident.trials else 0.0
    title = (
        f"{row} \u00d7 {incident.experiment}: {incident.verdict}, {incident.passed}/{incident.trials} "
        f"trials passed, {incident.violations} violation(s), run {incident.run_id}"
        + (" — bundle failed verification" if warned else "")
    )
    bar = {"x": x + 8, "y": y + h - 12, "height": 5, "rx": 2.5}
    body = [
        el("title", None, title),
        el(
            "rect",
            {
                "x": x,
                "y": y,
                "width": w,
                "height": h,
                "rx": 6,
                "fill": fill,
                "stroke": stroke,
                "stroke_width": 1.5,
            },
        ),
        text(
            x + 8,
            y + 18,
            incident.verdict.upper() + (" ⚠" if warned else ""),
            size=13,
            weight="700",
            fill=stroke,
        ),
        text(x + 8, y + 35, f"{rate:.0%} pass"),
        text(x + 8, y + 51, plural(incident.trials, "trial"), size=11),
        text(x + 8, y + 66, plural(incident.violations, "violation"), size=11),
        el("rect", {**bar, "width": w - 16, "fill": "#ffffff", "stroke": stroke, "stroke_width": 0.5}),
        el("rect", {**bar, "width": (w - 16) * rate, "fill": stroke}),
    ]
    if link:
        return el("a", {"href": link, "class_": "cell-link"}, *body)
    return el("g", None, *body)


def _decades(values: Iterable[float]) -> tuple[float, float]:
    positive = [v for v in values if v > 0] or [1.0]
    lo = 10 ** math.floor(math.log10(min(positive)))
    hi = 10 ** math.ceil(math.log10(max(positive)))
    return lo, hi if hi > lo else lo * 10


def _log_position(lo: float, hi: float, start: float, end: float) -> Callable[[float], float]:
    a, b = math.log10(lo), math.log10(hi)
    return lambda v: start + (math.log10(max(v, lo)) - a) / (b - a) * (end - start)


def _ticks(lo: float, hi: float) -> list[float]:
    out, tick = [], lo
    while tick <= hi * 1.0001:
        out.append(tick)
        tick *= 10
    return out


def latency_svg(experiment: str, rows: list[LatencyRow]) -> Markup:
    """p50-to-max ranges of faulted and clean deliveries per target, on a log scale."""
    label_w, plot_w, row_h, top = 130, 260, 46, 26
    width, height = label_w + plot_w + 175, top + len(rows) * row_h + 24
    stats = [s for r in rows for s in (r.faulted, r.clean) if s]
    lo, hi = _decades([s.p50 for s in stats] + [s.max for s in stats])
    x_of = _log_position(lo, hi, label_w, label_w + plot_w)
    bottom = top + len(rows) * row_h
    parts = [
        text(label_w, 14, "● faulted deliveries", size=11, fill=FAULTED),
        text(label_w + 130, 14, "● no fault", size=11, fill=CLEAN),
    ]
    for tick in _ticks(lo, hi):
        parts.append(
            el("line", {"x1": x_of(tick), "y1": top, "x2": x_of(tick), "y2": bottom, "stroke": "#d0d7de"})
        )
        parts.append(text(x_of(tick), bottom + 14, ms(tick), size=11, anchor="middle", fill=MUTED))
    for n, row in enumerate(rows):
        y = top + n * row_h
        lines = row.target.split(ROW_SEPARATOR, 1)  # a target, then its database where the label names one
        for k, line in enumerate(lines):
            baseline = y + row_h / 2 + 4 - 8 * (len(lines) - 1) + 16 * k
            weight, fill = ("600", INK) if k == 0 else ("normal", MUTED)
            parts.append(text(label_w - 10, baseline, clip(line, 18), anchor="end", weight=weight, fill=fill))
        for offset, stat, color, name in (
            (14, row.faulted, FAULTED, "faulted"),
            (32, row.clean, CLEAN, "no fault"),
        ):
            if stat is not None:
                parts.append(
                    _range(
                        x_of,
                        y + offset,
                        stat,
                        color=color,
                        what=f"{row.target}, {name}",
                        text_x=label_w + plot_w + 8,
                    )
                )
    return svg("latency", width, height, f"Delivery latency under fault for {experiment}", parts)


def _range(
    x_of: Callable[[float], float], y: float, stat: Latency, *, color: str, what: str, text_x: float
) -> Markup:
    x50, x95, xmax = x_of(stat.p50), x_of(stat.p95), x_of(stat.max)
    title = f"{what}: {stat.count} deliveries, p50 {ms(stat.p50)}, p95 {ms(stat.p95)}, max {ms(stat.max)}"
    return el(
        "g",
        None,
        el("title", None, title),
        el(
            "line",
            {
                "x1": x50,
                "y1": y,
                "x2": xmax,
                "y2": y,
                "stroke": color,
                "stroke_width": 3,
                "stroke_linecap": "round",
            },
        ),
        el("line", {"x1": x95, "y1": y - 5, "x2": x95, "y2": y + 5, "stroke": color, "stroke_width": 2}),
        el("circle", {"cx": x50, "cy": y, "r": 5, "fill": color}),
        text(text_x, y + 4, f"p50 {ms(stat.p50)} · max {ms(stat.max)}", size=11, fill=color),
    )


def delivery_latency_svg(trials: list[TrialView]) -> Markup:
    """One bar per delivery (log scale), grouped by trial; faulted deliveries in the fault colour."""
    rows = [(t, r) for t in trials for r in t.rows if r.latency_ms is not None]
    if not rows:
        return Markup("")
    bar_w, gap, left, top, plot_h = 14, 4, 56, 20, 150
    groups = len({t.trial_id for t, _ in rows})
    width = max(360, left + len(rows) * (bar_w + gap) + groups * 10 + 20)
    height = top + plot_h + 40
    lo, hi = _decades([r.latency_ms or 1.0 for _, r in rows])
    height_of = _log_position(lo, hi, 0, plot_h)
    parts = []
    for tick in _ticks(lo, hi):
        y = top + plot_h - height_of(tick)
        parts.append(el("line", {"x1": left, "y1": y, "x2": width - 10, "y2": y, "stroke": "#d0d7de"}))
        parts.append(text(left - 6, y + 4, ms(tick), size=11, anchor="end", fill=MUTED))
    x = left + 6.0
    spans: dict[str, list[float]] = {}
    for n, (trial, row) in enumerate(rows):
        if n and trial.trial_id != rows[n - 1][0].trial_id:
            x += 10
        value = row.latency_ms or 0.0
        bar = height_of(value)
        title = (
            f"{trial.trial_id} seq {row.seq} ({row.kind}, fault {row.fault}): {ms(value)}, handler "
            f"{row.status if row.status is not None else 'no answer'}, sender saw "
            f"{row.sender_status if row.sender_status is not None else 'no answer'}"
        )
        fill = FAULTED if row.faulted else CLEAN
        box = {"x": x, "y": top + plot_h - bar, "width": bar_w, "height": bar, "fill": fill, "rx": 2}
        parts.append(el("rect", box, el("title", None, title)))
        span = spans.setdefault(str(trial.index), [x, x])
        span[1] = x + bar_w
        x += bar_w + gap
    for index, (start, end) in spans.items():
        label = f"trial {index}" if end - start >= 40 else f"t{index}"
        parts.append(text((start + end) / 2, top + plot_h + 14, label, size=10, anchor="middle", fill=MUTED))
    parts.append(text(left, height - 8, "● faulted", size=11, fill=FAULTED))
    parts.append(text(left + 80, height - 8, "● no fault", size=11, fill=CLEAN))
    return svg("deliveries", width, height, "Latency of every delivery, faulted ones highlighted", parts)


def durations_svg(items: list[tuple[str, object, str]]) -> Markup:
    """Horizontal bars of checkpoint durations (the repair trail's timings), labelled in text."""
    values = [(name, float(v), status) for name, v, status in items if isinstance(v, int | float)]
    if not values:
        return Markup("")
    label_w, plot_w, row_h = 150, 380, 24
    width, height = label_w + plot_w + 110, len(values) * row_h + 8
    longest = max(v for _, v, _ in values) or 1.0
    parts = []
    for n, (name, value, status) in enumerate(values):
        y = 4 + n * row_h
        verdict = {"ok": "pass", "failed": "fail", "refused": "fail"}.get(status, "")
        color = VERDICT_COLORS.get(verdict, UNKNOWN_COLORS)[1]
        bar = max(2.0, value / longest * plot_w)
        box = {"x": label_w, "y": y + 4, "width": bar, "height": row_h - 8, "rx": 3, "fill": color}
        parts.append(text(label_w - 8, y + 15, clip(name, 20), anchor="end", weight="600"))
        parts.append(el("rect", box, el("title", None, f"{name}: {ms(value)} ({status})")))
        parts.append(text(label_w + bar + 6, y + 15, f"{ms(value)} · {status}", size=11, fill=MUTED))
    return svg("durations", width, height, "Checkpoint durations", parts)
