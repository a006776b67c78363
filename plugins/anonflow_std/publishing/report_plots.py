"""The report page's pictures: class sizes, attribute loss, the parameter sweep, the risk
histogram and the lineage graph, each an inline SVG drawn by matplotlib (Agg canvas, fixed
hash salt and fonts, so the same run draws the same bytes)."""

from __future__ import annotations

import html
import io
import math
from typing import Any, Mapping

import networkx as nx
import numpy as np

from anonflow.api import RunInfo, canonical_json


SVG_RC = {"svg.hashsalt": "anonflow", "svg.fonttype": "none", "font.family": ["DejaVu Sans"], "font.size": 9.0,
          "axes.titlesize": 10.0, "axes.labelsize": 9.0}


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=72)
    FigureCanvasAgg(fig)
    return fig


def _svg(fig) -> str:
    """The figure as inline SVG markup, byte-identical for the same figure."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    text = buf.getvalue()
    return text[text.index("<svg"):].strip()


def _plot(draw, width: float, height: float, label: str) -> str:
    import matplotlib

    with matplotlib.rc_context(SVG_RC):
        fig = _figure(width, height)
        draw(fig)
        svg = _svg(fig)
    return f'<div class="plot" role="img" aria-label="{html.escape(str(label), quote=True)}">{svg}</div>'


def class_size_plot(sizes: np.ndarray) -> str:
    def draw(fig):
        ax = fig.add_axes((0.11, 0.17, 0.86, 0.72))
        values, counts = np.unique(sizes, return_counts=True)
        if len(values) <= 40:
            ax.bar(values, counts, width=0.8, color="#3b6ea8")
            ax.set_xticks(values if len(values) <= 20 else values[:: max(1, len(values) // 20)])
        else:
            hist, edges = np.histogram(sizes, bins=30)
            ax.bar(edges[:-1], hist, width=np.diff(edges), align="edge", color="#3b6ea8")
        ax.set_xlabel("class size (records)")
        ax.set_ylabel("classes")
        ax.set_title("Class-size distribution")
    return _plot(draw, 6.5, 3.2, "class-size distribution")


def loss_plot(rows: list[dict[str, Any]]) -> str:
    """Bars per attribute; margins are computed from the labels (no tight_layout: it draws twice)."""
    numeric = [r for r in rows if r.get("sse_share") is not None]
    pad = 0.3 + 0.068 * max(len(str(r["attribute"])) for r in rows)      # inches for the y labels
    panel = 3.2                                                              # inches per panel
    width = (pad + panel + 0.3) * (2 if numeric else 1)
    height = max(2.2, 0.3 * len(rows) + 1.2)

    def draw(fig):
        def panel_axes(i: int):
            x0 = (i * (pad + panel + 0.3) + pad) / width
            return fig.add_axes((x0, 0.75 / height, panel / width, 1 - 1.15 / height))
        ax = panel_axes(0)
        names = [r["attribute"] for r in rows][::-1]
        ax.barh(names, [r["ambiguity"] or 0.0 for r in rows][::-1], color="#a8553b")  # None: not shown, 0-length
        ax.set_xlim(0, 1)
        ax.set_xlabel("ambiguity loss (0 = exact, 1 = all merged)")
        ax.set_title("Per-attribute loss")
        if numeric:
            ax2 = panel_axes(1)
            ax2.barh([r["attribute"] for r in numeric][::-1], [r["sse_share"] for r in numeric][::-1], color="#3b6ea8")
            ax2.set_xlim(0, 1)
            ax2.set_xlabel("share of total SSE")
            ax2.set_title("Numeric attributes: SSE share")
    return _plot(draw, width, height, "per-attribute information loss")


def sweep_plot(sw: Mapping[str, Any]) -> str:
    pairs = sweep_pairs(sw)
    if not pairs:  # e.g. one metric only: nothing to plot against it
        return '<p class="note">No plot: the sweep has no pair of metrics (utility vs risk) to plot.</p>'
    cols = min(2, len(pairs))
    rows_n = math.ceil(len(pairs) / cols)

    def label(p: Mapping[str, Any]) -> str:
        return ", ".join(f"{k.split('.', 1)[-1]}={canonical_json(v)}" for k, v in p["params"].items())

    def draw(fig):
        fig.subplots_adjust(left=0.6 / (5.0 * cols), right=0.97, bottom=0.55 / (3.6 * rows_n) + 0.02,
                            top=1 - 0.2 / (3.6 * rows_n), wspace=0.3, hspace=0.35)
        for i, (x, y) in enumerate(pairs, start=1):
            ax = fig.add_subplot(rows_n, cols, i)
            xs = [p["metrics"][x] for p in sw["points"]]
            ys = [p["metrics"][y] for p in sw["points"]]
            ax.plot(xs, ys, "-o", color="#3b6ea8", markersize=4, linewidth=1)
            for p, xv, yv in zip(sw["points"], xs, ys):
                if xv is not None and yv is not None:
                    ax.annotate(label(p), (xv, yv), textcoords="offset points", xytext=(4, 4), fontsize=7)
            ax.set_xlabel(f"{x} ({sw['metrics'][x]})")
            ax.set_ylabel(f"{y} ({sw['metrics'][y]})")
    return _plot(draw, 5.0 * cols, 3.6 * rows_n, "utility vs risk across the sweep")


def pareto_front(xs: list[float], ys: list[float], x_higher: bool, y_higher: bool) -> list[bool]:
    """Which points no other point dominates: another point dominates one when it is at least as
    good on both axes and better on one (better: larger where ``*_higher``, else smaller)."""
    sx = np.asarray(xs, dtype=float) * (-1.0 if x_higher else 1.0)  # now smaller is better on both
    sy = np.asarray(ys, dtype=float) * (-1.0 if y_higher else 1.0)
    le = (sx[None, :] <= sx[:, None]) & (sy[None, :] <= sy[:, None])  # [i, j]: j at least as good as i
    lt = (sx[None, :] < sx[:, None]) | (sy[None, :] < sy[:, None])
    return [not bool(row.any()) for row in (le & lt)]


def tradeoff_plot(sw: Mapping[str, Any], x: str, y: str) -> str:
    """One panel: each run of the sweep at its risk (``x``) and utility (``y``), labelled by the
    parameters that vary, the Pareto frontier (:func:`pareto_front`) joined and filled."""
    pts = sw["points"]
    xs = [float(p["metrics"][x]) for p in pts]
    ys = [float(p["metrics"][y]) for p in pts]
    xh, yh = sw["better"][x] == "higher", sw["better"][y] == "higher"
    front = pareto_front(xs, ys, xh, yh)

    def label(p: Mapping[str, Any]) -> str:
        return ", ".join(f"{k.split('.', 1)[-1]}={canonical_json(v)}" for k, v in p["params"].items())

    def draw(fig):
        fig.subplots_adjust(left=0.12, right=0.97, bottom=0.13, top=0.93)
        ax = fig.add_subplot(1, 1, 1)
        on = sorted((xv, yv) for xv, yv, f in zip(xs, ys, front) if f)
        ax.plot([a for a, _ in on], [b for _, b in on], "-", color="#3b6ea8", linewidth=1.2, label="Pareto frontier")
        ax.scatter([a for a, f in zip(xs, front) if f], [b for b, f in zip(ys, front) if f], s=28, color="#3b6ea8",
                   zorder=3)
        if not all(front):
            ax.scatter([a for a, f in zip(xs, front) if not f], [b for b, f in zip(ys, front) if not f], s=28,
                       facecolors="none", edgecolors="#8a8a8a", zorder=3, label="dominated")
        lo, hi = min(xs), max(xs)
        for p, xv, yv in zip(pts, xs, ys):
            right = hi > lo and xv > lo + 0.75 * (hi - lo)  # labels of the rightmost points go to their left
            ax.annotate(label(p), (xv, yv), textcoords="offset points", xytext=(-4 if right else 4, 4), fontsize=7,
                        ha="right" if right else "left")
        ax.set_xlabel(f"{x} ({sw['metrics'][x]}; {'higher' if xh else 'lower'} is better)")
        ax.set_ylabel(f"{y} ({sw['metrics'][y]}; {'higher' if yh else 'lower'} is better)")
        ax.legend(loc="best", fontsize=7, frameon=False)
    return _plot(draw, 7.0, 4.6, f"{y} against {x} for each run of the sweep")


def lineage_graph(info: RunInfo) -> nx.DiGraph:
    """Sources, steps and published files of the run (up to the step being run) as a graph."""
    g = nx.DiGraph()
    steps = list(info.steps) + ([info.current] if info.current is not None else [])
    for s in steps:
        name = s["step"]
        if s["kind"] == "source":
            src = next((x for x in info.sources if x["name"] == name), None)
            file = (src or {}).get("path") or (src or {}).get("table") or ""
            g.add_node(name, kind="source", label=f"{name}\n{str(file).replace(chr(92), '/').rsplit('/', 1)[-1]}")
            continue
        g.add_node(name, kind=s["kind"], label=f"{name}\n{s['uses']}")
        for i in s.get("inputs") or []:
            if i.get("name") in g:
                g.add_edge(i["name"], name)
    for o in info.outputs:
        fname = str(o["path"]).replace("\\", "/").rsplit("/", 1)[-1]
        node = f"file:{o['step']}:{fname}"
        g.add_node(node, kind="file", label=fname)
        g.add_edge(o["step"], node)
    if info.current is not None:
        params = info.current.get("params") or {}
        if params.get("publisher") == "release":
            node = "file:release"
            g.add_node(node, kind="file", label=f"release\n{str(params.get('path', '')).rsplit('/', 1)[-1]}/")
            g.add_edge(info.current["step"], node)
    return g


COLORS = {"source": "#e3ecf7", "file": "#f6eee0", "evaluate": "#eaf4e4", "publish": "#f3e6f2"}


def lineage_plot(g: nx.DiGraph) -> str:
    order = {n: i for i, n in enumerate(g.nodes)}
    layers = [sorted(layer, key=order.__getitem__) for layer in nx.topological_generations(g)]
    pos = {}
    for x, layer in enumerate(layers):
        for y, n in enumerate(layer):
            pos[n] = (x, -(y - (len(layer) - 1) / 2.0))
    width = max(4.0, 2.0 * len(layers) + 0.5)
    height = max(2.0, 0.9 * max((len(layer) for layer in layers), default=1) + 0.6)

    def draw(fig):
        ax = fig.add_axes((0, 0, 1, 1))
        ax.set_axis_off()
        for u, v in g.edges:
            ax.annotate("", xy=pos[v], xytext=pos[u],
                        arrowprops=dict(arrowstyle="-|>", color="#68737d", shrinkA=30, shrinkB=30, linewidth=0.8))
        for n in g.nodes:
            data = g.nodes[n]
            ax.text(*pos[n], data["label"], ha="center", va="center", fontsize=7.5,
                    bbox=dict(boxstyle="round,pad=0.35", fc=COLORS.get(data["kind"], "#ffffff"), ec="#68737d",
                              lw=0.7))
        xs = [p[0] for p in pos.values()] or [0]
        ys = [p[1] for p in pos.values()] or [0]
        ax.set_xlim(min(xs) - 0.6, max(xs) + 0.6)
        ax.set_ylim(min(ys) - 0.6, max(ys) + 0.6)
    return _plot(draw, width, height, "lineage graph of the run")


def risk_plot(labels: list[str], series: list[tuple[str, list[int], str]]) -> str:
    """Grouped bars: records per risk bin, one bar per table (original, published)."""
    def draw(fig):
        ax = fig.add_axes((0.11, 0.2, 0.86, 0.69))
        x = np.arange(len(labels), dtype=np.float64)
        width = 0.8 / max(1, len(series))
        for i, (name, counts, color) in enumerate(series):
            pos = x - 0.4 + width * (i + 0.5)
            ax.bar(pos, counts, width=width * 0.95, color=color, label=name)
            for px, c in zip(pos, counts):
                ax.annotate(str(c), (px, c), textcoords="offset points", xytext=(0, 2), ha="center", fontsize=7)
        ax.set_xticks(x)
        ax.set_xticklabels(labels)
        ax.set_xlabel("record-level prosecutor risk 1 / (class size over the quasi-identifiers)")
        ax.set_ylabel("records")
        ax.set_title("Record-level re-identification risk")
        ax.legend(loc="upper left", fontsize=8, frameon=False)
    return _plot(draw, 6.5, 3.4, "histogram of record-level re-identification risk, before and after")


def sweep_pairs(sw: Mapping[str, Any], limit: int = 8) -> list[tuple[str, str]]:
    metrics = sw["metrics"]
    util = [k for k, c in metrics.items() if c == "utility"]
    risk = [k for k, c in metrics.items() if c in ("privacy", "risk")]
    pairs = [(u, r) for u in util for r in risk]
    if not pairs:
        keys = list(metrics)
        pairs = [(a, b) for i, a in enumerate(keys) for b in keys[i + 1:]]
    return pairs[:limit]
