"""Server-side SVG charts: the verdict heatmap (drawn by `acklab.evidence.heatmap`), latency under
fault, each delivery's latency, checkpoint durations.

Plain SVG, no chart library and nothing loaded from outside. Every element is built by `el`,
which escapes every attribute value and every text child, so a target or experiment name
recorded from a hostile handler can never become markup. Only presentation attributes are
used (no `style` attribute, which the CSP forbids), and every mark carries a text label or a
<title>, so colour is never the only carrier of a verdict.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence

from markupsafe import Markup

from acklab.evidence.documents.latency import Latency
from acklab.evidence.heatmap import MUTED_COLORS, VERDICT_COLORS, HeatCell, HeatRow, clip, heatmap_frame

from .overview import ROW_SEPARATOR, Heatmap, LatencyRow
from .scan import IncidentSummary
from .timeline import TrialView

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


def ms(value: float) -> str:
    """A latency for people: 35 ms, 2.4 s."""
    if value >= 1000:
        return f"{value / 1000:.1f} s"
    if value >= 10:
        return f"{value:.0f} ms"
    return f"{value:.1f}".removesuffix(".0") + " ms"


def heatmap_svg(
    grid: Heatmap,
    href: Callable[[IncidentSummary], str | None],
    warned: set[str],
    *,
    label: str = "Latest verdict per target and experiment",
) -> Markup:
    """Rows are handlers (on a database), columns experiments; each cell the verdict its incident
    records, with its pass rate, trials and violations (`acklab.evidence.heatmap`, the one renderer)."""
    rows = [HeatRow(str(n), tuple(row.lines), row.title) for n, row in enumerate(grid.rows)]
    keys = {row: heat.key for row, heat in zip(grid.rows, rows, strict=True)}
    cells = [
        HeatCell(
            row=keys[row],
            column=experiment,
            verdict=incident.verdict,
            trials=incident.trials,
            passed=incident.passed,
            failed=incident.failed,
            errors=incident.errors,
            violations=incident.violations,
            note=f"run {incident.run_id}",
            href=href(incident),
            warning="bundle failed verification" if incident.bundle in warned else "",
        )
        for (row, experiment), incident in grid.by_row.items()
    ]
    # evidence.heatmap escapes every attribute value and text node, and uses presentation
    # attributes only (no style=, which the CSP refuses); its tests plant markup in names.
    frame = heatmap_frame(cells, rows=rows, columns=grid.experiments, label=label)
    return Markup(frame)  # noqa: S704  # nosec B704


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


def durations_svg(items: Sequence[tuple[str, object, str]]) -> Markup:
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
        color = VERDICT_COLORS.get(verdict, MUTED_COLORS)[1]
        bar = max(2.0, value / longest * plot_w)
        box = {"x": label_w, "y": y + 4, "width": bar, "height": row_h - 8, "rx": 3, "fill": color}
        parts.append(text(label_w - 8, y + 15, clip(name, 20), anchor="end", weight="600"))
        parts.append(el("rect", box, el("title", None, f"{name}: {ms(value)} ({status})")))
        parts.append(text(label_w + bar + 6, y + 15, f"{ms(value)} · {status}", size=11, fill=MUTED))
    return svg("durations", width, height, "Checkpoint durations", parts)
