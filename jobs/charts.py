"""Charts of the reports, drawn with matplotlib's headless Agg backend, each saved as PNG and SVG."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display: a report runs in a worker or a subprocess

import matplotlib.pyplot as plt

FIGSIZE = (9, 4.5)


def render(draw: Callable[[Any], None], stem: Path) -> None:
    """Draw on a new figure and save ``stem.png`` and ``stem.svg``."""
    fig = plt.figure(figsize=FIGSIZE, layout="constrained")
    try:
        draw(fig)
        fig.savefig(stem.with_suffix(".png"), dpi=110)
        fig.savefig(stem.with_suffix(".svg"))
    finally:
        plt.close(fig)


def bar_chart(title: str, labels: list[str], values: list[float], unit: str) -> Callable[[Any], None]:
    def draw(fig: Any) -> None:
        ax = fig.add_subplot()
        ax.barh(labels[::-1], values[::-1], color="#3b6ea8")
        ax.set_title(title)
        ax.set_xlabel(unit)
        if not labels:
            ax.text(0.5, 0.5, "no data in the window", ha="center", va="center", transform=ax.transAxes)

    return draw


def line_chart(
    title: str, series: dict[str, tuple[list, list]], unit: str, hlines: dict[str, float] | None = None
) -> Callable[[Any], None]:
    """``series``: label -> (x values (datetimes), y values); ``hlines``: label -> y of a dashed line."""

    def draw(fig: Any) -> None:
        ax = fig.add_subplot()
        for label, (xs, ys) in series.items():
            ax.plot(xs, ys, marker="o", markersize=3, label=label)
        for label, y in (hlines or {}).items():
            ax.axhline(y, linestyle="--", linewidth=1, color="#b33", label=label)
        ax.set_title(title)
        ax.set_ylabel(unit)
        ax.set_xlabel("UTC")
        if series or hlines:
            ax.legend(loc="upper left", fontsize="small")
        else:
            ax.text(0.5, 0.5, "no data in the window", ha="center", va="center", transform=ax.transAxes)
        fig.autofmt_xdate()

    return draw
