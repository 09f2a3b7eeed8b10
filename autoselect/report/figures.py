"""The figures: latency, dispatch and combine, bandwidth, and the per-node fleet view.

Each ``*_figure(data)`` returns a matplotlib Figure of :data:`FIGSIZE_IN` at :data:`DPI`.
matplotlib (Agg backend: no display needed) is imported on first use, inside the functions that
draw, so importing this module stays cheap.
"""

from __future__ import annotations

import math
from typing import Sequence

from autoselect.payload import all2all_bytes_per_token
from autoselect.report.data import ReportData
from autoselect.report.reference_curves import ReferenceCurve
from autoselect.report.errors import ReportPackagesMissing
from autoselect.report.series import BackendSeries, bandwidth_gbps, crossovers
from autoselect.report.style import (
    BANDWIDTH_FORMULA,
    DPI,
    FAILED_MARKER,
    FIGSIZE_IN,
    MEASURED_LINE,
    NOT_CANDIDATE_LINE,
    REFERENCE_LINE,
    backend_style,
    short_name,
)


def pyplot():
    """matplotlib's pyplot on the Agg backend (no display needed), imported on first use."""
    try:
        import matplotlib
    except ImportError:  # pragma: no cover - the report extra is a test dependency
        raise ReportPackagesMissing(
            "matplotlib is not installed; run: pip install 'autoselect[report]'"
        ) from None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


#: the bottom of the figure (a fraction of its height) each figure's caption takes: the legend goes
#: above it, the axes above both
_CAPTION_HEIGHT: dict[int, float] = {}


def _new_figure(ncols: int = 1, *, caption: str | None = None, sharey: bool = False):
    plt = pyplot()
    fig, axes = plt.subplots(1, ncols, figsize=FIGSIZE_IN, dpi=DPI, sharey=sharey, layout="constrained")
    bottom = 0.0
    if caption:
        lines = 1 + len(caption) // 170  # about 170 characters of 8.5 pt text per line at this width
        bottom = 0.03 + 0.025 * lines
        fig.get_layout_engine().set(rect=(0.0, bottom, 1.0, 1.0 - bottom))
        fig.text(0.5, 0.012, caption, ha="center", va="bottom", fontsize=8.5, wrap=True, color="#333333")
    _CAPTION_HEIGHT[id(fig)] = bottom
    return fig, axes


def message_figure(title: str, lines: Sequence[str]):
    """A figure that says, in words, why there is no plot (empty data, nothing timed ...)."""
    plt = pyplot()
    fig = plt.figure(figsize=FIGSIZE_IN, dpi=DPI)
    ax = fig.add_axes((0.0, 0.0, 1.0, 1.0))
    ax.set_axis_off()
    ax.text(0.5, 0.78, title, ha="center", va="center", fontsize=17, weight="bold", transform=ax.transAxes)
    ax.text(
        0.5, 0.62, "\n".join(lines), ha="center", va="top", fontsize=12, transform=ax.transAxes,
        linespacing=1.6, wrap=True,
    )
    return fig


def _log_axes(ax, xs: Sequence[float], ys: Sequence[float]):
    """Log-log axes with plain-number ticks (1-2-5 on y) that also make sense for one point.

    The x range spans at least 4x and the y range at least 4x around the data, so a single
    point or a flat curve still gets labelled ticks.
    """
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    if xs and max(xs) / min(xs) < 4:
        mid = math.sqrt(min(xs) * max(xs))
        ax.set_xlim(mid / 2, mid * 2)
    if ys and max(ys) / min(ys) < 4:
        mid = math.sqrt(min(ys) * max(ys))
        ax.set_ylim(mid / 2, mid * 2)
    plain = FuncFormatter(lambda v, _pos: f"{v:g}")
    ax.xaxis.set_major_locator(LogLocator(base=2))
    ax.xaxis.set_major_formatter(plain)
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(plain)
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.grid(True, which="major", alpha=0.35)
    ax.grid(True, which="minor", alpha=0.12)


def _draw_failed(ax, series: BackendSeries, colour: str):
    """Mark untimed points along the bottom edge of the axes, at their token counts."""
    if not series.failed:
        return
    from matplotlib.transforms import blended_transform_factory

    trans = blended_transform_factory(ax.transData, ax.transAxes)
    for r in series.failed:
        ax.plot(
            [r.tokens_per_rank], [0.03], transform=trans, linestyle="none", color=colour,
            marker=FAILED_MARKER.get(r.status, "x"), markersize=10, markeredgewidth=2, clip_on=False,
        )


def latency_figure(data: ReportData):
    """Round-trip latency vs tokens per rank, one line per backend (the main figure), NVIDIA's
    published reference of the same shape dashed beside the local lines."""
    if not data.timed_series and not (data.reference_only and data.reference_curves):
        title = "No backend was timed" if data.series else "No measurements"
        return message_figure(title, data.not_timed_lines())
    parts = []
    if data.series:
        parts.append(
            "Line: median (p50) round-trip latency, dispatch + combine, maximum over ranks. Band: p10–p90 of the "
            "samples. Markers on the bottom edge: token counts where a backend was not timed "
            "(x incorrect, | unavailable, X error, Y timeout). Circles: crossovers (labelled where the fastest "
            "backend changes).")
    if any(b.backend for b in data.buckets):
        parts.append("Stars: fastest legal backend of each workload bucket.")
    if data.reference_curves:
        parts.append(reference_caption(data))
    if any(s.timed and not s.is_candidate for s in data.series):
        parts.append("Dotted: measured here but never a candidate (illegal, disqualified or a baseline).")
    caption = " ".join(parts)
    fig, ax = _new_figure(caption=caption)
    names = [s.backend for s in data.series] + [c.backend for c in data.reference_curves]
    xs, ys = [], []
    for s in data.series:
        colour, marker = backend_style(s.backend, names)
        if s.timed:
            _draw_timed(ax, s, colour, marker, xs, ys)
        else:
            ax.plot([], [], color=colour, marker=FAILED_MARKER.get(s.state, "x"), linestyle="none",
                    markersize=9, markeredgewidth=2, label=s.label())
        _draw_failed(ax, s, colour)
    for c in data.reference_curves:
        colour, marker = backend_style(c.backend, names)
        values = [p.latency_us for p in c.points]
        xs += c.tokens
        ys += values
        _plot_reference(ax, c, c.tokens, values, colour, marker, label=c.label())
    _log_axes(ax, xs, ys)
    _draw_crossovers(ax, data)
    _draw_buckets(ax, data)
    ax.set_xlabel("tokens per rank")
    ax.set_ylabel("round-trip latency (µs, log scale)")
    ax.set_title(_title("All2all latency", data), fontsize=12)
    legend_below(fig, ax)
    return fig


def legend_below(fig, ax) -> None:
    """The legend of ``ax`` under the axes and above the caption, never over the curves: a label
    names a backend and what is wrong with it, and a box inside the axes covered the data it
    explains. Two columns when the labels are short enough to stand side by side; the axes are
    laid out in what the caption and the legend leave."""
    handles, labels = ax.get_legend_handles_labels()
    if not handles:
        return
    ncols = 2 if len(labels) > 3 and max(len(line) for label in labels for line in label.split("\n")) <= 70 else 1
    bottom = _CAPTION_HEIGHT.pop(id(fig), 0.0)
    legend = fig.legend(handles, labels, loc="lower center", bbox_to_anchor=(0.5, bottom), ncols=ncols,
                        fontsize=8.5, frameon=False, borderaxespad=0.2)
    height = legend.get_window_extent(fig.canvas.get_renderer()).height / fig.bbox.height
    top = bottom + height + 0.01
    fig.get_layout_engine().set(rect=(0.0, top, 1.0, 1.0 - top))


def reference_caption(data: ReportData) -> str:
    """The caption's sentence on the dashed curves: not measured here, and whose tables."""
    view = data.reference
    sources = "; ".join(dict.fromkeys(c.source_line for c in view.curves))
    return (f"Dashed, open markers: not measured here: NVIDIA's published reference for {view.ref_class.name} "
            f"at this shape ({sources}).")


def _draw_timed(ax, s: BackendSeries, colour: str, marker: str, xs: list, ys: list) -> None:
    """One local series: its median line and its p10–p90 band (an error bar for one point)."""
    t = s.tokens
    p50 = [r.latency_us_p50 for r in s.timed]
    xs += t
    ys += p50
    ax.plot(t, p50, color=colour, marker=marker, markersize=5, linewidth=1.8, linestyle=_local_line(s),
            alpha=1.0 if s.is_candidate else 0.55, label=s.label())
    band = [(r.tokens_per_rank, r.latency_us_p50, r.latency_us_p10, r.latency_us_p90) for r in s.timed]
    band = [b for b in band if b[2] is not None and b[3] is not None]
    if len(band) == 1:
        (bt, mid, lo, hi), = band
        ys += [lo, hi]
        ax.errorbar([bt], [mid], yerr=[[mid - lo], [hi - mid]], color=colour, capsize=5, linewidth=1.2)
    elif band:
        bt, _, lo, hi = zip(*band)
        ys += list(lo) + list(hi)
        ax.fill_between(bt, lo, hi, color=colour, alpha=0.15, linewidth=0)


def _local_line(s: BackendSeries) -> str:
    return MEASURED_LINE if s.is_candidate else NOT_CANDIDATE_LINE


def _plot_reference(ax, curve: ReferenceCurve, xs, ys, colour: str, marker: str, label: str | None) -> None:
    """A reference curve: the backend's colour, dashed, open markers (fainter when illegal here)."""
    ax.plot(xs, ys, color=colour, marker=marker, markersize=5, markerfacecolor="none", linewidth=1.4,
            linestyle=REFERENCE_LINE, alpha=0.45 if curve.illegal_reasons else 0.9, label=label)


def _draw_crossovers(ax, data: ReportData) -> None:
    """Circle where two local candidates cross; label the crossings where the fastest one changes."""
    labelled = 0
    for c in crossovers(data.series):
        ax.plot([c.tokens_per_rank], [c.latency_us], marker="o", markersize=11 if c.on_envelope else 7,
                markerfacecolor="none", markeredgecolor="black" if c.on_envelope else "#888888",
                markeredgewidth=1.2, linestyle="none")
        if not c.on_envelope:
            continue  # two slower curves crossing: circled, not labelled
        labelled += 1
        ax.annotate(
            f"crossover ≈ {c.tokens_per_rank:.0f} tokens\n{short_name(c.faster_below)} faster below,\n"
            f"{short_name(c.faster_above)} above",
            xy=(c.tokens_per_rank, c.latency_us), xytext=(-150, 18 + 46 * ((labelled - 1) % 3)),
            textcoords="offset points", fontsize=8,
            arrowprops={"arrowstyle": "-", "color": "#444444", "linewidth": 0.8},
            bbox={"boxstyle": "round,pad=0.25", "fc": "white", "ec": "#999999", "alpha": 0.9},
        )


def _draw_buckets(ax, data: ReportData):
    """Star the fastest legal backend at each workload bucket; name the recommendation."""
    marks = [b for b in data.buckets if b.backend and b.latency_us]
    names = [s.backend for s in data.series]
    for b in marks:
        colour, _ = backend_style(b.backend, names)
        ax.plot([b.tokens_per_rank], [b.latency_us], marker="*", markersize=17, color=colour,
                markeredgecolor="black", markeredgewidth=0.8, linestyle="none", zorder=5)
    if marks:
        kind = f"{data.workload_kind} " if data.workload_kind and data.workload_kind != "explicit" else ""
        label = f"★ fastest legal backend per {kind}workload bucket"
        if data.recommended:
            label += f"\nrecommended overall (weighted): {data.recommended}"
        ax.plot([], [], marker="*", markersize=13, color="#cccccc", markeredgecolor="black",
                linestyle="none", label=label)


def _title(what: str, data: ReportData) -> str:
    return f"{what} — {data.model}\n{data.shape_text} — {data.host_text}"


def phases_figure(data: ReportData):
    """Dispatch and combine latency, one panel each, one line per backend (reference dashed)."""
    with_phases = [
        s for s in data.timed_series
        if any(r.dispatch_us_p50 is not None or r.combine_us_p50 is not None for r in s.timed)
    ]
    if not with_phases and not (data.reference_only and data.reference_curves):
        lines = data.not_timed_lines() if not data.timed_series else [
            f"{data.model}: {data.shape_text}",
            "The stored measurements carry no separate dispatch / combine times.",
        ]
        return message_figure("No dispatch / combine times", lines)
    caption = ("Median (p50) of each phase timed on its own, maximum over ranks. Dotted: measured here but "
               "never a candidate (illegal here or a benchmark-only baseline).")
    if data.reference_curves:
        caption += (" " + reference_caption(data) + " Reference phases: DeepEP dispatch / combine as published; "
                    "derived allgather_reducescatter: its all_gather / reduce_scatter; TensorRT-LLM two-sided's "
                    "prepare step is in neither panel.")
    fig, axes = _new_figure(2, sharey=True, caption=caption)
    names = [s.backend for s in data.series] + [c.backend for c in data.reference_curves]
    xs, ys = [], []
    for ax, field_name, phase in zip(axes, ("dispatch", "combine"), ("Dispatch", "Combine")):
        for s in with_phases:
            colour, marker = backend_style(s.backend, names)
            pts = [(r.tokens_per_rank, getattr(r, f"{field_name}_us_p50")) for r in s.timed
                   if getattr(r, f"{field_name}_us_p50")]
            if not pts:
                continue
            t, v = zip(*pts)
            xs += t
            ys += v
            ax.plot(t, v, color=colour, marker=marker, markersize=5, linewidth=1.6, linestyle=_local_line(s),
                    label=s.backend)
        for c in data.reference_curves:
            colour, marker = backend_style(c.backend, names)
            v = [getattr(p, f"{field_name}_us") for p in c.points]
            xs += c.tokens
            ys += v
            _plot_reference(ax, c, c.tokens, v, colour, marker, label=f"{c.backend} — {c.evidence}")
        ax.set_title(f"{phase}", fontsize=12)
        ax.set_xlabel("tokens per rank")
    for ax in axes:
        _log_axes(ax, xs, ys)
    axes[0].set_ylabel("latency (µs, log scale)")
    legend_below(fig, axes[0])
    fig.suptitle(_title("Dispatch and combine", data), fontsize=12)
    return fig


def reference_bandwidth_gbps(data: ReportData, point) -> float:
    """Logical bandwidth of a reference point, by :data:`BANDWIDTH_FORMULA` at the report's shape."""
    per_token = all2all_bytes_per_token(data.activation_dtype, data.hidden, data.top_k)
    return point.tokens_per_rank * per_token / (point.latency_us * 1e-6) / 1e9


def _bandwidth_lines(data: ReportData) -> list[tuple]:
    """(label, backend, linestyle, reference curve or None, [(tokens, GB/s)]) of every line to draw."""
    lines = []
    for s in data.timed_series:
        pts = [(r.tokens_per_rank, bandwidth_gbps(r)) for r in s.timed]
        pts = [p for p in pts if p[1] is not None]
        if pts:
            lines.append((s.backend, s.backend, _local_line(s), None, pts))
    for c in data.reference_curves:
        pts = [(p.tokens_per_rank, reference_bandwidth_gbps(data, p)) for p in c.points]
        lines.append((f"{c.backend} — {c.evidence}", c.backend, REFERENCE_LINE, c, pts))
    return lines


def bandwidth_figure(data: ReportData):
    """Achieved logical bandwidth: fraction of the NVLink peak, or GB/s on a host without one."""
    lines = _bandwidth_lines(data)
    if not any(curve is None for *_, curve, _ in lines) and not data.reference_only:
        text = data.not_timed_lines() if not data.timed_series else [
            f"{data.model}: {data.shape_text}", "The stored measurements carry no byte counts.",
        ]
        return message_figure("No bandwidth to show", text)
    peak = data.nvlink_peak_gbps
    whose = "of the reference system" if data.reference_only else "from the host fingerprint"
    if peak:
        caption = (f"fraction of peak = logical bandwidth / NVLink peak ({peak:g} GB/s per GPU per direction, "
                   f"{whose}); {BANDWIDTH_FORMULA}. Above 100% means local traffic counted.")
    else:
        caption = (f"No NVLink peak on this host ({data.device or 'unknown'} device): absolute GB/s shown, "
                   f"not a fraction. {BANDWIDTH_FORMULA}.")
    if data.reference_curves:
        caption += " " + reference_caption(data)
    fig, ax = _new_figure(caption=caption)
    names = [s.backend for s in data.series] + [c.backend for c in data.reference_curves]
    for label, backend, style, curve, pts in lines:
        colour, marker = backend_style(backend, names)
        t, gbps = zip(*pts)
        y = [g / peak for g in gbps] if peak else list(gbps)
        if curve is not None:
            _plot_reference(ax, curve, t, y, colour, marker, label=label)
        else:
            ax.plot(t, y, color=colour, marker=marker, markersize=5, linewidth=1.8, linestyle=style, label=label)
    ax.set_xscale("log", base=2)
    from matplotlib.ticker import PercentFormatter, ScalarFormatter

    ax.xaxis.set_major_formatter(ScalarFormatter())
    all_t = [t for *_, pts in lines for t, _ in pts]
    if min(all_t) == max(all_t):
        ax.set_xlim(min(all_t) / 2, max(all_t) * 2)
    top = max(g / peak if peak else g for *_, pts in lines for _, g in pts)
    if peak:
        ax.yaxis.set_major_formatter(PercentFormatter(1.0))
        if top > 0.25:  # the peak line only when the curves come near it; else it flattens them
            ax.axhline(1.0, color="black", linewidth=1, linestyle=":")
            ax.annotate("NVLink peak", xy=(0.005, 1.0), xycoords=("axes fraction", "data"), va="bottom",
                        fontsize=8)
            top = max(top, 1.0)
    ax.set_ylim(0, top * 1.12 if top > 0 else 1.0)
    if peak:
        ax.set_ylabel("logical bandwidth / NVLink peak")
        ax.set_title(_title("Bandwidth as a fraction of the NVLink peak", data), fontsize=12)
    else:
        ax.set_ylabel("logical bandwidth (GB/s) — no NVLink peak on this host")
        ax.set_title(_title("Logical bandwidth in GB/s (CPU host: no NVLink peak)", data), fontsize=12)
    ax.set_xlabel("tokens per rank")
    ax.grid(True, alpha=0.35)
    legend_below(fig, ax)
    return fig


def fleet_figure(data: ReportData):
    """Per-node latency of one shape and backend; nodes the drift check flags in red."""
    view = data.fleet
    if view is None or not view.nodes:
        return message_figure("No fleet measurements", [
            f"{data.model}: {data.shape_text}",
            "Only one machine of this host class measured this shape.",
            "Run `autoselect fleet bench` to measure every node.",
        ])
    caption = ("Bar: median (p50) round-trip latency of the node's newest measurement; whisker: p10–p90. "
               "Red: flagged by the drift check (autoselect.fleet.drift). Dotted line: the fleet median.")
    fig, ax = _new_figure(caption=caption)
    nodes = sorted(view.nodes, key=lambda n: n.hostname)
    x = range(len(nodes))
    colours = ["#d62728" if n.drifted else "#1f77b4" for n in nodes]
    p50 = [n.latency_us_p50 for n in nodes]
    lo = [max(0.0, n.latency_us_p50 - (n.latency_us_p10 if n.latency_us_p10 is not None else n.latency_us_p50))
          for n in nodes]
    hi = [max(0.0, (n.latency_us_p90 if n.latency_us_p90 is not None else n.latency_us_p50) - n.latency_us_p50)
          for n in nodes]
    ax.bar(x, p50, color=colours, yerr=[lo, hi], capsize=4, ecolor="#333333")
    if view.reference_us:
        ax.axhline(view.reference_us, color="black", linestyle=":", linewidth=1)
    for i, (n, h) in enumerate(zip(nodes, hi)):
        if n.drift_note:
            ax.annotate(n.drift_note, (i, n.latency_us_p50 + h), xytext=(0, 6), textcoords="offset points",
                        ha="center", fontsize=8, color="#d62728" if n.drifted else "#666666",
                        weight="bold" if n.drifted else "normal")
    ax.set_xticks(list(x), [n.hostname for n in nodes], rotation=30 if len(nodes) > 6 else 0, ha="right"
                  if len(nodes) > 6 else "center", fontsize=9)
    ax.set_ylabel("round-trip latency (µs)")
    ax.set_xlabel("node")
    ax.set_ylim(0, max(n.latency_us_p50 + h for n, h in zip(nodes, hi)) * 1.2)
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(color="#1f77b4", label="in line with the fleet"),
                       Patch(color="#d62728", label="drift flagged")], loc="upper right", fontsize=9)
    ax.set_title(_title(f"Fleet: {view.backend} at {view.tokens_per_rank} tokens per rank", data), fontsize=12)
    ax.grid(True, axis="y", alpha=0.35)
    return fig


#: Figure name -> function drawing it; ``fleet`` only when the report has a fleet view.
FIGURES = {
    "latency": latency_figure,
    "phases": phases_figure,
    "bandwidth": bandwidth_figure,
    "fleet": fleet_figure,
}

