"""A small SVG line chart, rendered on the server: inlined in pages (the data travels in the page, no chart
library or CDN) and served as an image export (.svg); the same chart as .png through matplotlib."""

from __future__ import annotations

import datetime as dt
import io
from dataclasses import dataclass
from html import escape

WIDTH, HEIGHT = 720, 220
LEFT, RIGHT, TOP, BOTTOM = 64, 12, 24, 28
COLOURS = ("#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed", "#0891b2", "#be185d", "#4b5563")


def _label(value: float) -> str:
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= limit:
            return f"{value / limit:.1f}{suffix}"
    return f"{value:g}" if value == int(value) else f"{value:.1f}"


def line_chart(
    series: dict[str, list[tuple[int, float]]], *, title: str, unit: str = "", chart_id: str = ""
) -> str:
    """An <svg> of one line per series; points are (time in ms, value)."""
    points = [p for values in series.values() for p in values]
    attrs = f'id="{escape(chart_id)}" ' if chart_id else ""
    head = (
        f'<svg {attrs}class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'width="{WIDTH}" height="{HEIGHT}" role="img" aria-label="{escape(title)}">'
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="#fff"/>'
        f'<text x="{LEFT}" y="16" font-size="13" font-family="sans-serif">{escape(title)}</text>'
    )
    if not points:
        return (
            head
            + f'<text x="{LEFT}" y="{HEIGHT // 2}" font-size="12" fill="#888">no samples yet</text></svg>'
        )
    t_min, t_max = min(t for t, _ in points), max(t for t, _ in points)
    v_max = max(max(v for _, v in points), 1)
    span = max(t_max - t_min, 1)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(t: int) -> float:
        return LEFT + (t - t_min) / span * plot_w

    def y(v: float) -> float:
        return TOP + plot_h - v / v_max * plot_h

    parts = [head]
    for i in range(5):
        v = v_max * i / 4
        parts.append(
            f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#e5e7eb"/>'
            f'<text x="{LEFT - 6}" y="{y(v) + 4:.1f}" font-size="10" text-anchor="end" '
            f'font-family="sans-serif">{_label(v)}{escape(unit)}</text>'
        )
    for t in (t_min, t_max):
        stamp = dt.datetime.fromtimestamp(t / 1000, tz=dt.UTC).strftime("%H:%M:%S")
        anchor = "start" if t == t_min else "end"
        parts.append(
            f'<text x="{x(t):.1f}" y="{HEIGHT - 8}" font-size="10" text-anchor="{anchor}" '
            f'font-family="sans-serif">{stamp}</text>'
        )
    for n, (name, values) in enumerate(series.items()):
        colour = COLOURS[n % len(COLOURS)]
        path = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in values)
        parts.append(
            f'<polyline class="series" data-series="{escape(name)}" fill="none" stroke="{colour}" '
            f'stroke-width="1.5" points="{path}"><title>{escape(name)}</title></polyline>'
        )
        if len(series) > 1:
            parts.append(
                f'<text x="{WIDTH - RIGHT}" y="{TOP + 12 * n}" font-size="10" text-anchor="end" fill="{colour}" '
                f'font-family="sans-serif">{escape(name)}</text>'
            )
    parts.append("</svg>")
    return "".join(parts)


@dataclass
class Chart:
    series: dict[str, list[tuple[int, float]]]
    title: str
    unit: str = ""
    chart_id: str = ""

    def svg(self) -> str:
        return line_chart(self.series, title=self.title, unit=self.unit, chart_id=self.chart_id)

    def png(self) -> bytes:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib.figure import Figure

        figure = Figure(figsize=(WIDTH / 100, HEIGHT / 100), dpi=100)
        axes = figure.subplots()
        axes.set_title(self.title, fontsize=10, loc="left")
        for n, (name, values) in enumerate(self.series.items()):
            times = [dt.datetime.fromtimestamp(t / 1000, tz=dt.UTC) for t, _ in values]
            axes.plot(
                times, [v for _, v in values], label=name, color=COLOURS[n % len(COLOURS)], linewidth=1.2
            )
        if len(self.series) > 1:
            axes.legend(fontsize=7)
        axes.tick_params(labelsize=7)
        figure.tight_layout()
        out = io.BytesIO()
        figure.savefig(out, format="png")
        return out.getvalue()
