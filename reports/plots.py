"""The report's plots: matplotlib figures (the object API, no pyplot state) saved as PNG and
returned as `data:image/png;base64,...` URIs to embed in the page.

    src = bars("Case mix", {"synthesized": {"clean": 30, "wrong_args": 8}})
"""

from __future__ import annotations

import base64
import io

from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

WIDTH = 7.0  # inches; 100 dpi keeps a page of ten plots under a megabyte or so


def png_uri(fig: Figure) -> str:
    """The figure as a PNG data URI."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def bars(title: str, series: dict[str, dict], xlabel: str = "", ylabel: str = "rows",
         horizontal: bool = False) -> str:
    """Grouped bars: one group per category (the union of the series' keys, in first-seen
    order), one bar per series."""
    cats = list(dict.fromkeys(k for values in series.values() for k in values))
    fig = Figure(figsize=(WIDTH, max(2.5, 0.35 * len(cats) + 1) if horizontal else 3.2))
    ax = fig.subplots()
    width = 0.8 / max(1, len(series))
    for i, (name, values) in enumerate(series.items()):
        pos = [j + i * width - 0.4 + width / 2 for j in range(len(cats))]
        heights = [values.get(c, 0) or 0 for c in cats]
        (ax.barh if horizontal else ax.bar)(pos, heights, width, label=name)
    (ax.set_yticks if horizontal else ax.set_xticks)(range(len(cats)), [str(c) for c in cats])
    if horizontal:
        ax.invert_yaxis()
        ax.set_xlabel(ylabel)
    else:
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
    if len(series) > 1:
        ax.legend()
    ax.set_title(title)
    return png_uri(fig)


def histogram(title: str, groups: dict[str, list[float]], xlabel: str, bins: int = 30) -> str:
    """Stacked histograms of the values of each group."""
    fig = Figure(figsize=(WIDTH, 3.2))
    ax = fig.subplots()
    ax.hist(list(groups.values()), bins=bins, stacked=True, label=list(groups))
    ax.set_xlabel(xlabel)
    ax.set_ylabel("rows")
    if len(groups) > 1:
        ax.legend()
    ax.set_title(title)
    return png_uri(fig)


def curves(title: str, panels: dict[str, dict[str, list[tuple[float, float]]]], xlabel: str = "step") -> str:
    """One panel per metric, one line per series of (x, y) points."""
    fig = Figure(figsize=(WIDTH, 2.8 * len(panels)))
    axes = fig.subplots(len(panels), 1, squeeze=False)[:, 0]
    for ax, (metric, lines) in zip(axes, panels.items()):
        for name, points in lines.items():
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="." if len(points) < 30 else None,
                    label=name)
        ax.set_ylabel(metric)
        ax.set_xlabel(xlabel)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps and iterations
        if len(lines) > 1:
            ax.legend()
    axes[0].set_title(title)
    return png_uri(fig)
