"""What every figure shares: matplotlib set up for reproducible files, the footnote, the
empty panel, the colours and markers, and the plotly spec's axes, hovers and layout.

matplotlib is imported here (inside :func:`_plt`) and nowhere outside ``memwall.figures``.
"""

from __future__ import annotations

import html
import math
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..model_version import MODEL_VERSION

Row = Mapping[str, Any]

KIND_MARKERS = {"vector": "s", "scalar": "o", "superscalar": "D", "gpu": "^", "tpu": "v", "wafer": "*",
                "array": "P"}
STALL_COLOURS = ["#c44e52", "#dd8452", "#937860", "#8172b3", "#da8bc3", "#8c8c8c", "#ccb974"]
COMPUTE_COLOUR = "#55a868"
OVERHEAD_COLOUR = "#4c72b0"
# plotly's series colours (matplotlib's tab10), for the interactive figures.
COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf"]


def _plt():
    import matplotlib

    # Deterministic SVG ids, so the same data gives the same file.
    matplotlib.rcParams["svg.hashsalt"] = "memwall"
    import matplotlib.pyplot as plt

    return plt


def sources(extra: str = "") -> str:
    """The footnote naming the model and data versions the figure's numbers came from."""
    from ..data import data_version

    text = (f"Simulated by memwall {MODEL_VERSION} (era_data {data_version()}); machine figures from "
            "era_data/machines, each with its provenance.")
    return f"{text} {extra}".strip()


def _wrap_to(fig, text: str, fontsize: float, width_px: float) -> str:
    """``text`` broken into lines no wider than ``width_px`` at ``fontsize``, as the
    figure's renderer measures them (matplotlib's own ``wrap`` ignores reserved space)."""
    import textwrap

    from matplotlib.text import Text

    renderer = fig.canvas.get_renderer()
    probe = Text(0, 0, "", fontsize=fontsize, figure=fig)

    def width(s: str) -> float:
        probe.set_text(s)
        return probe.get_window_extent(renderer).width

    chars = max(20, int(len(text) * width_px / max(width(text), 1.0)))
    while chars > 20:
        lines = textwrap.wrap(text, chars, break_on_hyphens=False)
        if all(width(line) <= width_px for line in lines):
            return "\n".join(lines)
        chars -= 4
    return "\n".join(textwrap.wrap(text, chars, break_on_hyphens=False))


def _finish(fig, note: str, then: Callable[[], Any] | None = None) -> None:
    """The footnote along the bottom edge, wrapped to the figure's width, with the axes laid
    out above the height it measures (so it never runs over an axis's labels); ``then`` runs
    once the layout is final (:func:`place_labels` needs it)."""
    fontsize = 6.5
    margin = 0.01 * fig.bbox.width
    text = fig.text(0.01, 0.005, _wrap_to(fig, note, fontsize, fig.bbox.width - 2 * margin), fontsize=fontsize,
                    color="#555555", ha="left", va="bottom", linespacing=1.25)
    height = text.get_window_extent(fig.canvas.get_renderer()).height
    bottom = min(0.45, (height + 0.012 * fig.bbox.height) / fig.bbox.height + 0.005)
    fig.tight_layout(rect=(0, bottom, 1, 1))
    if then is not None:  # what must be placed in the final layout (labels beside points)
        then()


def _log_log(ax, xlabel: str, ylabel: str, title: str, legend: str = "best") -> None:
    """Log-log axes with their labels, title, grid and a small legend."""
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7, loc=legend)


def _empty(heading: str, needs: str):
    """The panel drawn where a sweep holds no data for a figure: its heading and what it needs."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 3))
    ax.set_axis_off()
    ax.text(0.5, 0.6, heading, ha="center", fontsize=11, weight="bold")
    ax.text(0.5, 0.35, f"No data for this figure in this sweep.\nIt needs: {needs}", ha="center", fontsize=9)
    return fig


def save(fig, folder: str | os.PathLike[str], name: str) -> list[Path]:
    """Write ``name.png`` and ``name.svg`` and close the figure."""
    plt = _plt()
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"{name}.png", folder / f"{name}.svg"]
    fig.savefig(paths[0], dpi=150, metadata={"Software": None})
    fig.savefig(paths[1], metadata={"Date": None})
    plt.close(fig)
    return paths


def label(row: Row) -> str:
    """A machine as the figures name it: its name (or id) and year."""
    return f"{row.get('name') or row['machine']} ({row['year']})"


def spaced(rows: Sequence[Row], at: Callable[[Row], tuple[float, float]], gap: tuple[float, float]) -> list[Row]:
    """The rows whose labels can be drawn without overprinting: greedily, each label kept
    only if no kept label lies within ``gap`` (in the axes' own units, log10 where log)."""
    kept: list[tuple[float, float]] = []
    out = []
    for r in rows:
        x, y = at(r)
        if all(abs(x - kx) >= gap[0] or abs(y - ky) >= gap[1] for kx, ky in kept):
            kept.append((x, y))
            out.append(r)
    return out


def place_labels(ax, items: Sequence[tuple[Any, ...]], *, avoid: Sequence[tuple[float, float]] = (),
                 fontsize: float = 6, colour: str = "#333333", **text: Any) -> list[Any]:
    """Label points without overprinting: each ``(x, y, text)`` or ``(x, y, text, reach)``
    (data coordinates, in order of priority; ``reach``: the farthest offset in points, 50
    unless given) is tried at offsets around its point, nearest first, and kept at
    the first where its box stays inside the axes and clear of the labels already placed,
    of the legend and of the points in ``avoid``; a label with no such place is left out.
    Call it once the layout is final (``_finish(fig, note, then=...)``). Returns the
    labels drawn."""
    from matplotlib.text import Text
    from matplotlib.transforms import Bbox

    fig = ax.figure
    renderer = fig.canvas.get_renderer()
    inside = ax.get_window_extent(renderer).padded(-2)
    taken = [leg.get_window_extent(renderer) for leg in [ax.get_legend()] if leg is not None]
    taken += [t.get_window_extent(renderer) for t in ax.texts if t.get_visible() and t.get_text().strip()]
    dots = [ax.transData.transform((x, y)) for x, y in avoid]
    directions = [(1, 1), (1, -1), (-1, 1), (-1, -1), (1, 0), (-1, 0), (0, 1), (0, -1)]
    drawn = []
    probe = Text(0, 0, "", fontsize=fontsize, figure=fig, **text)
    px_per_pt = fig.dpi / 72.0
    for x, y, label_text, *rest in items:
        reach = rest[0] if rest else 50
        point = ax.transData.transform((x, y))
        probe.set_text(label_text)
        size = probe.get_window_extent(renderer)  # its box, measured once; placed by arithmetic
        w, h = size.width + 2, size.height + 2
        spot = None
        for distance in (d for d in (3, 10, 20, 34, 50) if d <= reach):
            for dx, dy in directions:
                ox, oy = point[0] + dx * distance * px_per_pt, point[1] + dy * distance * px_per_pt
                x0 = ox if dx > 0 else ox - w if dx < 0 else ox - w / 2
                y0 = oy if dy > 0 else oy - h if dy < 0 else oy - h / 2
                box = Bbox.from_bounds(x0, y0, w, h)
                if (inside.contains(box.x0, box.y0) and inside.contains(box.x1, box.y1)
                        and not any(box.overlaps(t) for t in taken)
                        and not any(box.x0 - 2 < px < box.x1 + 2 and box.y0 - 2 < py < box.y1 + 2
                                    for px, py in dots if abs(px - point[0]) + abs(py - point[1]) > 0.5)):
                    spot = (dx, dy, distance, box)
                    break
            if spot:
                break
        if spot is None:
            continue
        dx, dy, distance, box = spot
        arrow = {"arrowstyle": "-", "color": "#999999", "lw": 0.5} if distance > 10 else None
        drawn.append(ax.annotate(label_text, (x, y), xytext=(dx * distance, dy * distance), textcoords="offset points",
                                 ha="left" if dx > 0 else "right" if dx < 0 else "center",
                                 va="bottom" if dy > 0 else "top" if dy < 0 else "center",
                                 fontsize=fontsize, color=colour, arrowprops=arrow, **text))
        taken.append(box)
    return drawn


# --------------------------------------------------------------------------------------
# The interactive figure: a plotly spec {"data": [traces], "layout": {...}}, drawn by the
# report's page with the embedded plotly.js.


def _band(xs: Sequence[float], values: Sequence[float], rows: Sequence[Row]) -> list[tuple[float, float, float]]:
    """(x, low, high) of each plotted rate whose row has an interval: a row's
    ``interval_low`` and ``interval_high`` bound its ``seconds``, so the rate drawn at
    ``value`` spans value x seconds / interval_high to value x seconds / interval_low
    (docs/intervals.md); empty unless at least two points have one."""
    points = [(x, v * r["seconds"] / r["interval_high"], v * r["seconds"] / r["interval_low"])
              for x, v, r in zip(xs, values, rows, strict=True)
              if r.get("interval_low") and r.get("interval_high") and r.get("seconds")]
    return points if len(points) >= 2 else []


def interval_band(ax, xs: Sequence[float], values: Sequence[float], rows: Sequence[Row], colour: Any) -> bool:
    """Shade the interval of each plotted prediction of a rate (:func:`_band`); returns
    whether it drew."""
    points = _band(xs, values, rows)
    if points:
        ax.fill_between([p[0] for p in points], [p[1] for p in points], [p[2] for p in points], color=colour,
                        alpha=0.15, lw=0, zorder=0)
    return bool(points)


def band_traces(xs: Sequence[float], values: Sequence[float], rows: Sequence[Row], colour: str,
                name: str) -> list[dict[str, Any]]:
    """:func:`interval_band` for the interactive report: the interval's high end and its low
    end filled up to it, kept out of the legend."""
    points = _band(xs, values, rows)
    if not points:
        return []
    line = {"width": 0, "color": colour}
    return [{"type": "scatter", "mode": "lines", "x": [p[0] for p in points], "y": [p[2] for p in points],
             "line": line, "showlegend": False, "hoverinfo": "skip", "name": f"{name}: interval"},
            {"type": "scatter", "mode": "lines", "x": [p[0] for p in points], "y": [p[1] for p in points],
             "line": line, "fill": "tonexty", "opacity": 0.2, "showlegend": False, "hoverinfo": "skip",
             "name": f"{name}: interval"}]


def e(value: Any) -> str:
    """``value`` as HTML text (for the prose)."""
    return html.escape("" if value is None else str(value))


def fmt(value: Any) -> str:
    """A number in a hover: four significant digits."""
    if value is None:
        return ""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    return f"{value:.4g}" if number and math.isfinite(value) else str(value)


def bound_label(row: Row) -> str:
    """What binds a case, for a hover: its class, then the figure (``memory (memory.bandwidth)``)."""
    cls, figure = row.get("bound_class"), row.get("bound")
    return f"{cls} ({figure})" if cls and figure and figure != cls else str(cls or figure or "")


def axis(title: str, log: bool = False, **extra: Any) -> dict[str, Any]:
    return {"title": {"text": title}, "type": "log" if log else "linear", "exponentformat": "power", **extra}


def hover(fields: Sequence[str]) -> str:
    """A hover template naming each of a trace's ``customdata`` columns, in order."""
    return "<br>".join(f"{name}: %{{customdata[{k}]}}" for k, name in enumerate(fields)) + "<extra></extra>"


def custom(rows: Sequence[Row], columns: Sequence[Callable[[Row], Any] | str]) -> list[list[Any]]:
    """Each row's hover values: a column is a key (numbers shown by :func:`fmt`) or a function."""
    return [[col(r) if callable(col) else fmt(r.get(col)) for col in columns] for r in rows]


def spec(traces: Sequence[Mapping[str, Any]], **layout: Any) -> dict[str, Any]:
    """A plotly figure: the traces, and the layout every figure shares updated by ``layout``."""
    base = {"margin": {"t": 40, "r": 20, "b": 55, "l": 70}, "hovermode": "closest",
            "legend": {"font": {"size": 10}}, "height": 460}
    return {"data": list(traces), "layout": {**base, **layout}}


def empty_spec(heading: str, needs: str) -> dict[str, Any]:
    """The interactive twin of :func:`_empty`: no traces, a note of what the figure needs."""
    note = {"text": f"No data for this figure in this sweep.<br>It needs: {e(needs)}", "showarrow": False,
            "xref": "paper", "yref": "paper", "x": 0.5, "y": 0.5}
    return spec([], height=240, annotations=[note], xaxis={"visible": False}, yaxis={"visible": False},
                title={"text": e(heading)})
