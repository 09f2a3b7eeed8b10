"""Figures of the measurements and the decision, and one self-contained HTML page.

``autoselect report`` reads the store (stdlib ``sqlite3`` through :mod:`db.queries`), asks the
selector for its recommendation, and draws:

- ``latency.png``: round-trip latency vs tokens per rank, one line per backend, log-log, the
  p10–p90 band around each median, crossovers annotated, the fastest legal backend of each
  workload bucket starred; illegal / incorrect / unavailable backends named as such in the legend;
- ``phases.png``: dispatch and combine latency, side by side;
- ``bandwidth.png``: logical bandwidth as a fraction of the host's NVLink peak (GB/s on a host
  without one, labelled so);
- ``fleet.png`` (fleet databases only): per-node latency of one shape and backend, nodes the
  drift check flags in red;
- ``report.html``: the recommendation, the ``vllm serve`` command, the candidate table and the
  figures, images embedded as base64 data URIs (one file to mail or attach to a ticket).

matplotlib (Agg backend) and plotext are imported inside the functions that draw, so importing
this module stays cheap. Printers only read: nothing here writes to the database.
"""

from __future__ import annotations

import base64
import html
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from autoselect import drift
from autoselect.errors import GpuArchRequired, UnknownBackend, UnknownHostClass, UserError
from autoselect.model import load_profile, normalize_arch
from autoselect.selector import recommend
from autoselect.workload import BadDeployment, Deployment, UnknownWorkload, workload_from_kind, workload_from_tokens
from db.queries import connect_readonly, host_classes, newest_host, results_for

# --------------------------------------------------------------------------------------------
# Errors


class NothingToReport(UserError):
    "The database holds no measurement of the model's shape, so there is nothing to draw."


class ReportOutputNotWritable(UserError):
    "The --out directory cannot be created or written."


class ReportPackagesMissing(UserError):
    "matplotlib / plotext (the `report` extra) is not installed."


# --------------------------------------------------------------------------------------------
# Tables: how each backend and each outcome is drawn

#: Stable colour and marker per backend, so the same backend looks the same in every figure.
BACKEND_STYLE: dict[str, tuple[str, str]] = {
    "allgather_reducescatter": ("#1f77b4", "o"),
    "flashinfer_nvlink_one_sided": ("#d62728", "s"),
    "flashinfer_nvlink_two_sided": ("#2ca02c", "^"),
    "flashinfer_all2allv": ("#2ca02c", "^"),
    "deepep_high_throughput": ("#9467bd", "D"),
    "deepep_low_latency": ("#ff7f0e", "v"),
    "deepep_v2": ("#8c564b", "P"),
    "nixl_ep": ("#e377c2", "X"),
    "mori_high_throughput": ("#bcbd22", "<"),
    "mori_low_latency": ("#17becf", ">"),
    "moonep": ("#7f7f7f", "h"),
    "reference_all_to_all": ("#555555", "."),
}
#: Colours for backends the table does not name (third-party adapters), in order of appearance.
EXTRA_COLOURS = ("#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd")

#: How a point that was not timed is marked along the bottom of the latency axes.
FAILED_MARKER: dict[str, str] = {"incorrect": "x", "unavailable": "|", "error": "X", "timeout": "1"}

#: Legend wording per backend state; ``{detail}`` is filled in per backend.
STATE_LABEL: dict[str, str] = {
    "ok": "{backend}",
    "partial": "{backend} — not timed at {detail}",
    "disqualified": "{backend} — DISQUALIFIED for this shape ({detail}); never a candidate",
    "illegal": "{backend} — ILLEGAL here ({detail}); measured only, never a candidate",
    "incorrect": "{backend} — INCORRECT: failed the correctness gate ({detail})",
    "unavailable": "{backend} — unavailable: {detail}",
    "error": "{backend} — error: {detail}",
    "timeout": "{backend} — timed out ({detail})",
}

#: Which non-ok status names a backend that has no timed point at all (worst first).
FAILURE_ORDER = ("incorrect", "error", "timeout", "unavailable")

FIGSIZE_IN = (11.0, 6.5)  # every figure: 1100 x 650 px at DPI
DPI = 100
FIGURE_FILES = ("latency", "phases", "bandwidth", "fleet")

BANDWIDTH_FORMULA = (
    "logical bandwidth = bytes_per_rank / t_p50 with bytes_per_rank = T × (dispatch + combine bytes per token): "
    "dispatch = activation row + 8·top_k (int32 ids, fp32 weights), combine = 2·H (bf16); local-rank traffic "
    "included (DeepEP's 'logical' convention)"
)


# --------------------------------------------------------------------------------------------
# The data a report draws


@dataclass
class BackendSeries:
    """Every stored point of one backend for the report's shape, split into timed and not."""

    backend: str
    timed: list[Any] = field(default_factory=list)  # Result rows with status ok, ascending tokens
    failed: list[Any] = field(default_factory=list)  # Result rows that were not timed
    illegal_reasons: tuple[str, ...] = ()
    disqualified_reasons: tuple[str, ...] = ()  # the selector's: an incorrect / error row of this shape

    @property
    def tokens(self) -> list[int]:
        """Token counts per rank of the timed points."""
        return [r.tokens_per_rank for r in self.timed]

    @property
    def state(self) -> str:
        """``ok``, ``partial``, ``illegal``, or the failure that kept every point untimed."""
        if self.illegal_reasons:
            return "illegal"
        if self.disqualified_reasons and self.timed:
            return "disqualified"
        if self.timed:
            return "partial" if self.failed else "ok"
        statuses = {r.status for r in self.failed}
        for status in FAILURE_ORDER:
            if status in statuses:
                return status
        return "error"

    @property
    def is_candidate(self) -> bool:
        """Timed and legal: a line the selector may pick."""
        return (
            bool(self.timed)
            and not self.illegal_reasons
            and not self.disqualified_reasons
            and not self.backend.startswith("reference_")
        )

    def label(self) -> str:
        """The legend text: the backend name, plus what is wrong with it when something is."""
        state = self.state
        if state == "illegal":
            # the first clause of the first reason, without the backend's own name
            detail = self.illegal_reasons[0].split(";")[0].removeprefix(self.backend).strip()
            if len(detail) > 60:
                detail = detail[:57] + "..."
        elif state == "disqualified":
            bad = [r for r in self.failed if r.status in ("incorrect", "error")]
            detail = ", ".join(f"{r.status} at T={r.tokens_per_rank}" for r in bad[:2]) or "an older run failed"
        elif state == "partial":
            detail = ", ".join(f"T={r.tokens_per_rank} ({r.status})" for r in self.failed[:3])
            if len(self.failed) > 3:
                detail += f", +{len(self.failed) - 3} more"
        elif state == "unavailable":
            detail = next((r.error for r in self.failed if r.error), None) or "not installed here"
            detail = detail if len(detail) <= 50 else detail[:47] + "..."
        elif state == "incorrect":
            detail = f"{len(self.failed)} token count{'s' if len(self.failed) != 1 else ''}"
        else:
            detail = f"{len(self.failed)} point{'s' if len(self.failed) != 1 else ''}"
        return STATE_LABEL[state].format(backend=self.backend, detail=detail)


@dataclass
class BucketMark:
    """One workload bucket and the candidate that is fastest there (from the selector)."""

    tokens_per_rank: int
    weight: float
    backend: str | None  # None: no candidate has an estimate for this bucket
    latency_us: float | None


@dataclass
class FleetNode:
    """One machine's measurement of the fleet figure's shape and backend."""

    hostname: str
    machine_id: str
    latency_us_p50: float
    latency_us_p10: float | None
    latency_us_p90: float | None
    measured_at: str | None
    drifted: bool = False
    drift_note: str | None = None


@dataclass
class FleetView:
    """The fleet figure's data: one shape, one backend, one token count, every node."""

    backend: str
    tokens_per_rank: int
    nodes: list[FleetNode]
    reference_us: float | None = None  # the fleet median the drift check compares against


@dataclass
class ReportData:
    """Everything the figures and the page draw, read once from the store and the selector."""

    model: str
    hidden: int
    top_k: int
    experts: int
    dispatch_dtype: str
    world_size: int
    host_class: str | None
    gpu_name: str | None
    device: str | None  # "cuda" or "cpu" (from the newest fingerprint of the host class)
    nvlink_peak_gbps: float | None
    series: list[BackendSeries]
    buckets: list[BucketMark] = field(default_factory=list)
    workload_kind: str | None = None
    recommended: str | None = None
    recommendation: dict | None = None  # Recommendation.to_dict()
    fleet: FleetView | None = None

    @property
    def shape_text(self) -> str:
        """One line naming the shape: hidden, top_k, experts, dispatch dtype, EP size."""
        return (
            f"H={self.hidden}, top_k={self.top_k}, {self.experts} experts, "
            f"{self.dispatch_dtype} dispatch, EP{self.world_size}"
        )

    @property
    def host_text(self) -> str:
        """One line naming the host class the measurements come from."""
        if self.host_class is None:
            return "all hosts"
        gpu = self.gpu_name or ("CPU" if self.device == "cpu" else "unknown GPU")
        return f"{gpu} (host class {self.host_class})"

    @property
    def timed_series(self) -> list[BackendSeries]:
        """The series with at least one timed point, in drawing order."""
        return [s for s in self.series if s.timed]


def newest_per_token(rows: Iterable[Any]) -> list[Any]:
    """Keep one row per token count: untuned (no knobs) before tuned, then the newest.

    Rows without ``created_at`` sort oldest; ``id`` breaks ties when present.
    """
    best: dict[int, Any] = {}
    for row in rows:
        key = (
            not row.knobs,
            row.created_at or "",
            getattr(row, "id", 0) or 0,
        )
        held = best.get(row.tokens_per_rank)
        if held is None or key > held[0]:
            best[row.tokens_per_rank] = (key, row)
    return [best[t][1] for t in sorted(best)]


def build_series(rows: Iterable[Any], illegal: dict[str, tuple[str, ...]] | None = None) -> list[BackendSeries]:
    """Group result rows into one :class:`BackendSeries` per backend.

    ``illegal`` maps a backend to the reasons it is illegal for the report's model; rows
    measured with ``--include-illegal`` (``illegal=True``) are illegal too. At each token count
    the newest row wins, so a timed point that a later run found incorrect is shown as failed.
    """
    illegal = illegal or {}
    by_backend: dict[str, list[Any]] = {}
    for row in rows:
        by_backend.setdefault(row.backend, []).append(row)
    out = []
    for backend in sorted(by_backend, key=_backend_order):
        latest = newest_per_token(by_backend[backend])
        reasons = tuple(illegal.get(backend, ()))
        if not reasons and any(r.illegal for r in latest):
            reasons = ("measured with --include-illegal",)
        out.append(
            BackendSeries(
                backend=backend,
                timed=[r for r in latest if r.status == "ok" and r.latency_us_p50 is not None],
                failed=[r for r in latest if r.status != "ok" or r.latency_us_p50 is None],
                illegal_reasons=reasons,
            )
        )
    return out


def _backend_order(backend: str) -> tuple[int, str]:
    names = list(BACKEND_STYLE)
    return (names.index(backend) if backend in names else len(names), backend)


def backend_style(backend: str, seen: Sequence[str] = ()) -> tuple[str, str]:
    """(colour, marker) of a backend: from :data:`BACKEND_STYLE`, else the next spare colour."""
    if backend in BACKEND_STYLE:
        return BACKEND_STYLE[backend]
    extras = [b for b in seen if b not in BACKEND_STYLE]
    index = extras.index(backend) if backend in extras else len(extras)
    return EXTRA_COLOURS[index % len(EXTRA_COLOURS)], "o"


# --------------------------------------------------------------------------------------------
# Derived numbers


@dataclass(frozen=True)
class Crossover:
    """Where two timed backends' median curves cross (interpolated in log-log space)."""

    faster_below: str  # the backend that is faster at smaller token counts
    faster_above: str
    tokens_per_rank: float
    latency_us: float
    on_envelope: bool = True  # no other candidate is faster there: the fastest backend changes here


def interpolate_latency(series: BackendSeries, tokens: float) -> float | None:
    """The median latency of a timed series at ``tokens``, interpolated in log-log space.

    None outside the measured range (no extrapolation).
    """
    pts = [(r.tokens_per_rank, r.latency_us_p50) for r in series.timed if r.latency_us_p50 and r.latency_us_p50 > 0]
    for (t0, y0), (t1, y1) in zip(pts, pts[1:]):
        if t0 <= tokens <= t1:
            if t0 == t1:
                return y0
            frac = (math.log(tokens) - math.log(t0)) / (math.log(t1) - math.log(t0))
            return math.exp(math.log(y0) + frac * (math.log(y1) - math.log(y0)))
    if len(pts) == 1 and pts[0][0] == tokens:
        return pts[0][1]
    return None


def crossovers(series: Sequence[BackendSeries]) -> list[Crossover]:
    """Every crossing of two candidate curves between consecutive shared token counts.

    The sign of ``log(a/b)`` changes between two shared token counts; the crossing is placed
    by linear interpolation of ``log latency`` against ``log tokens``. Exact ties at a
    measured point count as a crossing only when the order flips across it.
    """
    found = []
    cands = [s for s in series if s.is_candidate]
    for i, a in enumerate(cands):
        for b in cands[i + 1 :]:
            pa = {r.tokens_per_rank: r.latency_us_p50 for r in a.timed}
            pb = {r.tokens_per_rank: r.latency_us_p50 for r in b.timed}
            shared = sorted(set(pa) & set(pb))
            diffs = [(t, math.log(pa[t] / pb[t])) for t in shared if pa[t] > 0 and pb[t] > 0]
            nonzero = [(t, d) for t, d in diffs if d != 0.0]
            for (t0, d0), (t1, d1) in zip(nonzero, nonzero[1:]):
                if (d0 < 0) == (d1 < 0):
                    continue
                frac = d0 / (d0 - d1)
                lt = math.log(t0) + frac * (math.log(t1) - math.log(t0))
                la = math.log(pa[t0]) + frac * (math.log(pa[t1]) - math.log(pa[t0]))
                below, above = (a.backend, b.backend) if d0 < 0 else (b.backend, a.backend)
                t_cross, y_cross = math.exp(lt), math.exp(la)
                others = (interpolate_latency(o, t_cross) for o in cands if o is not a and o is not b)
                on_envelope = all(y is None or y >= y_cross for y in others)
                found.append(Crossover(below, above, t_cross, y_cross, on_envelope))
    return sorted(found, key=lambda c: c.tokens_per_rank)


def bandwidth_gbps(row: Any) -> float | None:
    """Logical bandwidth of a timed row in GB/s: stored ``algbw_gbps``, else bytes / t_p50."""
    if row.algbw_gbps is not None:
        return row.algbw_gbps
    if row.bytes_per_rank and row.latency_us_p50:
        return row.bytes_per_rank / (row.latency_us_p50 * 1e-6) / 1e9
    return None


# --------------------------------------------------------------------------------------------
# Figures


def _pyplot():
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


def _new_figure(ncols: int = 1, *, caption: str | None = None, sharey: bool = False):
    plt = _pyplot()
    fig, axes = plt.subplots(1, ncols, figsize=FIGSIZE_IN, dpi=DPI, sharey=sharey, layout="constrained")
    if caption:
        lines = 1 + len(caption) // 170  # about 170 characters of 8.5 pt text per line at this width
        bottom = 0.03 + 0.025 * lines
        fig.get_layout_engine().set(rect=(0.0, bottom, 1.0, 1.0 - bottom))
        fig.text(0.5, 0.012, caption, ha="center", va="bottom", fontsize=8.5, wrap=True, color="#333333")
    return fig, axes


def message_figure(title: str, lines: Sequence[str]):
    """A figure that says, in words, why there is no plot (empty data, nothing timed ...)."""
    plt = _pyplot()
    fig = plt.figure(figsize=FIGSIZE_IN, dpi=DPI)
    ax = fig.add_axes((0.0, 0.0, 1.0, 1.0))
    ax.set_axis_off()
    ax.text(0.5, 0.78, title, ha="center", va="center", fontsize=17, weight="bold", transform=ax.transAxes)
    ax.text(
        0.5, 0.62, "\n".join(lines), ha="center", va="top", fontsize=12, transform=ax.transAxes,
        linespacing=1.6, wrap=True,
    )
    return fig


def _not_timed_lines(data: ReportData) -> list[str]:
    lines = [f"{data.model}: {data.shape_text}", f"on {data.host_text}", ""]
    if not data.series:
        lines.append("No measurement of this shape is stored.")
    for s in data.series:
        lines.append(s.label())
    lines += ["", f"Run: autoselect bench --model {data.model} --world-size {data.world_size}"]
    return lines


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
    """Round-trip latency vs tokens per rank, one line per backend (the main figure)."""
    timed = data.timed_series
    if not timed:
        title = "No backend was timed" if data.series else "No measurements"
        return message_figure(title, _not_timed_lines(data))
    caption = (
        "Line: median (p50) round-trip latency, dispatch + combine, maximum over ranks. Band: p10–p90 of the "
        "samples. Markers on the bottom edge: token counts where a backend was not timed "
        "(x incorrect, | unavailable, X error, Y timeout). Circles: crossovers (labelled where the fastest "
        "backend changes). Stars: fastest legal backend of each workload bucket."
    )
    fig, ax = _new_figure(caption=caption)
    names = [s.backend for s in data.series]
    xs, ys = [], []
    for s in data.series:
        colour, marker = backend_style(s.backend, names)
        dashed = not s.is_candidate
        if s.timed:
            t = s.tokens
            p50 = [r.latency_us_p50 for r in s.timed]
            xs += t
            ys += p50
            ax.plot(
                t, p50, color=colour, marker=marker, markersize=5, linewidth=1.8,
                linestyle="--" if dashed else "-", alpha=0.55 if dashed else 1.0, label=s.label(),
            )
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
        else:
            ax.plot([], [], color=colour, marker=FAILED_MARKER.get(s.state, "x"), linestyle="none",
                    markersize=9, markeredgewidth=2, label=s.label())
        _draw_failed(ax, s, colour)
    _log_axes(ax, xs, ys)

    labelled = 0
    for c in crossovers(data.series):
        ax.plot([c.tokens_per_rank], [c.latency_us], marker="o", markersize=11 if c.on_envelope else 7,
                markerfacecolor="none", markeredgecolor="black" if c.on_envelope else "#888888",
                markeredgewidth=1.2, linestyle="none")
        if not c.on_envelope:
            continue  # two slower curves crossing: circled, not labelled
        labelled += 1
        ax.annotate(
            f"crossover ≈ {c.tokens_per_rank:.0f} tokens\n{_short(c.faster_below)} faster below,\n"
            f"{_short(c.faster_above)} above",
            xy=(c.tokens_per_rank, c.latency_us), xytext=(-150, 18 + 46 * ((labelled - 1) % 3)),
            textcoords="offset points", fontsize=8,
            arrowprops={"arrowstyle": "-", "color": "#444444", "linewidth": 0.8},
            bbox={"boxstyle": "round,pad=0.25", "fc": "white", "ec": "#999999", "alpha": 0.9},
        )
    _draw_buckets(ax, data)
    ax.set_xlabel("tokens per rank")
    ax.set_ylabel("round-trip latency (µs, log scale)")
    ax.set_title(_title("All2all latency", data), fontsize=12)
    ax.legend(loc="upper left", fontsize=8.5, framealpha=0.92)
    return fig


def _draw_buckets(ax, data: ReportData):
    """Star the fastest legal backend at each workload bucket; name the recommendation."""
    marks = [b for b in data.buckets if b.backend and b.latency_us]
    names = [s.backend for s in data.series]
    for b in marks:
        colour, _ = backend_style(b.backend, names)
        ax.plot([b.tokens_per_rank], [b.latency_us], marker="*", markersize=17, color=colour,
                markeredgecolor="black", markeredgewidth=0.8, linestyle="none", zorder=5)
    if marks:
        kind = f"{data.workload_kind} " if data.workload_kind else ""
        label = f"★ fastest legal backend per {kind}workload bucket"
        if data.recommended:
            label += f"\nrecommended overall (weighted): {data.recommended}"
        ax.plot([], [], marker="*", markersize=13, color="#cccccc", markeredgecolor="black",
                linestyle="none", label=label)


def _short(backend: str) -> str:
    return backend.replace("flashinfer_nvlink_", "flashinfer_").replace("allgather_reducescatter", "allgather_rs")


def _title(what: str, data: ReportData) -> str:
    return f"{what} — {data.model}\n{data.shape_text} — {data.host_text}"


def phases_figure(data: ReportData):
    """Dispatch and combine latency, one panel each, one line per backend."""
    with_phases = [
        s for s in data.timed_series
        if any(r.dispatch_us_p50 is not None or r.combine_us_p50 is not None for r in s.timed)
    ]
    if not with_phases:
        lines = _not_timed_lines(data) if not data.timed_series else [
            f"{data.model}: {data.shape_text}",
            "The stored measurements carry no separate dispatch / combine times.",
        ]
        return message_figure("No dispatch / combine times", lines)
    fig, axes = _new_figure(2, sharey=True, caption=(
        "Median (p50) of each phase timed on its own, maximum over ranks. Dashed: illegal here or a "
        "benchmark-only baseline (never recommended)."))
    names = [s.backend for s in data.series]
    xs, ys = [], []
    for ax, field_name, phase in zip(axes, ("dispatch_us_p50", "combine_us_p50"), ("Dispatch", "Combine")):
        for s in with_phases:
            colour, marker = backend_style(s.backend, names)
            pts = [(r.tokens_per_rank, getattr(r, field_name)) for r in s.timed if getattr(r, field_name)]
            if not pts:
                continue
            t, v = zip(*pts)
            xs += t
            ys += v
            ax.plot(t, v, color=colour, marker=marker, markersize=5, linewidth=1.6,
                    linestyle="-" if s.is_candidate else "--", label=s.backend)
        ax.set_title(f"{phase}", fontsize=12)
        ax.set_xlabel("tokens per rank")
    for ax in axes:
        _log_axes(ax, xs, ys)
    axes[0].set_ylabel("latency (µs, log scale)")
    axes[0].legend(loc="upper left", fontsize=8.5)
    fig.suptitle(_title("Dispatch and combine", data), fontsize=12)
    return fig


def bandwidth_figure(data: ReportData):
    """Achieved logical bandwidth: fraction of the NVLink peak, or GB/s on a host without one."""
    series = [(s, [(r.tokens_per_rank, bandwidth_gbps(r)) for r in s.timed]) for s in data.timed_series]
    series = [(s, [p for p in pts if p[1] is not None]) for s, pts in series]
    series = [(s, pts) for s, pts in series if pts]
    if not series:
        lines = _not_timed_lines(data) if not data.timed_series else [
            f"{data.model}: {data.shape_text}", "The stored measurements carry no byte counts.",
        ]
        return message_figure("No bandwidth to show", lines)
    peak = data.nvlink_peak_gbps
    if peak:
        caption = (f"fraction of peak = logical bandwidth / NVLink peak ({peak:g} GB/s per GPU per direction, "
                   f"from the host fingerprint); {BANDWIDTH_FORMULA}. Above 100% means local traffic counted.")
    else:
        caption = (f"No NVLink peak on this host ({data.device or 'unknown'} device): absolute GB/s shown, "
                   f"not a fraction. {BANDWIDTH_FORMULA}.")
    fig, ax = _new_figure(caption=caption)
    names = [s.backend for s in data.series]
    for s, pts in series:
        colour, marker = backend_style(s.backend, names)
        t, gbps = zip(*pts)
        y = [g / peak for g in gbps] if peak else list(gbps)
        ax.plot(t, y, color=colour, marker=marker, markersize=5, linewidth=1.8,
                linestyle="-" if s.is_candidate else "--", label=s.backend)
    ax.set_xscale("log", base=2)
    from matplotlib.ticker import PercentFormatter, ScalarFormatter

    ax.xaxis.set_major_formatter(ScalarFormatter())
    all_t = [t for _, pts in series for t, _ in pts]
    if min(all_t) == max(all_t):
        ax.set_xlim(min(all_t) / 2, max(all_t) * 2)
    top = max(y for _, pts in series for _, y in ([(0, g / peak) for _, g in pts] if peak else pts))
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
    ax.legend(loc="upper left", fontsize=8.5)
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
               "Red: flagged by the drift check (autoselect.drift). Dotted line: the fleet median.")
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


# --------------------------------------------------------------------------------------------
# Writing


@dataclass
class ReportFiles:
    """What :func:`write_report` wrote."""

    out_dir: Path
    pngs: dict[str, Path]
    svgs: dict[str, Path]
    html: Path

    def to_dict(self) -> dict:
        """JSON-ready paths."""
        return {
            "out_dir": str(self.out_dir),
            "png": {k: str(v) for k, v in self.pngs.items()},
            "svg": {k: str(v) for k, v in self.svgs.items()},
            "html": str(self.html),
        }


def _prepare_out_dir(out_dir: os.PathLike | str) -> Path:
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ReportOutputNotWritable(f"--out {out} is a file; pass a directory (it is created if missing)")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ReportOutputNotWritable(f"cannot create --out directory {out}: {e.strerror}; pass a writable directory") from None
    if not os.access(out, os.W_OK):
        raise ReportOutputNotWritable(f"--out directory {out} is not writable; pass a writable directory")
    return out


def figure_names(data: ReportData) -> list[str]:
    """The figures a report of this data has (``fleet`` only for fleet data)."""
    return [n for n in FIGURES if n != "fleet" or data.fleet is not None]


def write_report(data: ReportData, out_dir: os.PathLike | str, *, svg: bool = False) -> ReportFiles:
    """Draw every figure to ``out_dir`` as PNG (and SVG), then write ``report.html``.

    :param data: what to draw (see :func:`collect`).
    :param out_dir: created when missing.
    :param svg: also write ``<figure>.svg`` beside each PNG.
    """
    out = _prepare_out_dir(out_dir)
    plt = _pyplot()
    pngs, svgs, images = {}, {}, {}
    for name in figure_names(data):
        fig = FIGURES[name](data)
        try:
            path = out / f"{name}.png"
            fig.savefig(path, dpi=DPI, format="png")
            pngs[name] = path
            images[name] = path.read_bytes()
            if svg:
                svgs[name] = out / f"{name}.svg"
                fig.savefig(svgs[name], format="svg")
        finally:
            plt.close(fig)
    page = out / "report.html"
    page.write_text(render_html(data, images), encoding="utf-8")
    return ReportFiles(out, pngs, svgs, page)


FIGURE_CAPTIONS = {
    "latency": "Latency vs tokens per rank (log-log), p10–p90 bands, crossovers and the fastest legal backend per workload bucket.",
    "phases": "Dispatch and combine timed separately.",
    "bandwidth": "Achieved logical bandwidth. " + BANDWIDTH_FORMULA + ".",
    "fleet": "Per-node latency for one shape and backend; drift-flagged nodes in red.",
}

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1180px;margin:2em auto;padding:0 1em;color:#222}
h1{font-size:1.5em}h2{font-size:1.15em;margin-top:1.8em;border-bottom:1px solid #ddd}
pre{background:#f4f4f4;padding:.8em;overflow-x:auto;border-radius:4px}
table{border-collapse:collapse;font-size:.9em}td,th{border:1px solid #ccc;padding:.3em .6em;text-align:right}
td:first-child,th:first-child,td:last-child,th:last-child,td:nth-child(2){text-align:left}.weights{color:#666;font-size:.85em}.chosen{background:#e8f5e9;font-weight:bold}
.warn{color:#8a4b00}figure{margin:1.2em 0}figcaption{font-size:.85em;color:#555}
img{max-width:100%;height:auto;border:1px solid #eee}
"""


def render_html(data: ReportData, images: dict[str, bytes]) -> str:
    """The self-contained page: recommendation, serve command, candidate table, figures inline."""
    esc = html.escape
    rec = data.recommendation or {}
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>autoselect report — {esc(data.model)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>autoselect report — {esc(data.model)}</h1>",
        f"<p>{esc(data.shape_text)} · {esc(data.host_text)}</p>",
        "<h2>Recommendation</h2>",
    ]
    if data.recommended:
        conf = rec.get("confidence")
        parts.append(
            f"<p>Use <code>--all2all-backend {esc(str(data.recommended))}</code>"
            + (f" (confidence: {esc(str(conf))})" if conf is not None else "")
            + (f" for the {esc(data.workload_kind)} workload" if data.workload_kind else "")
            + ".</p>"
        )
    else:
        parts.append(
            f"<p>No recommendation: at world size {data.world_size} vLLM builds no all2all group "
            "(it needs --data-parallel-size &gt; 1), so there is no backend to choose.</p>"
        )
    if rec.get("decision"):
        parts.append(f"<p>Decision: {esc(str(rec['decision']))}.</p>")
    if rec.get("confidence_reasons"):
        parts.append("<p>Confidence is capped because:</p><ul>")
        parts += [f"<li>{esc(str(r))}</li>" for r in rec["confidence_reasons"]]
        parts.append("</ul>")
    if rec.get("command"):
        parts += ["<p>Serve with:</p><pre>", esc(str(rec["command"])), "</pre>"]
    for w in rec.get("warnings") or ():
        parts.append(f'<p class="warn">⚠ {esc(str(w))}</p>')
    if rec.get("bench_command") and rec.get("estimated"):
        parts.append(f"<p>To measure instead of estimate: <code>{esc(str(rec['bench_command']))}</code></p>")
    parts += _candidate_table(data)
    parts.append("<h2>Figures</h2>")
    for name, png in images.items():
        uri = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
        parts.append(
            f'<figure id="fig-{name}"><img src="{uri}" alt="{esc(FIGURE_CAPTIONS.get(name, name))}">'
            f"<figcaption>{esc(FIGURE_CAPTIONS.get(name, name))}</figcaption></figure>"
        )
    parts.append("<h2>Measurements</h2>")
    parts += _series_table(data)
    parts.append("</body></html>")
    return "\n".join(parts)


def _candidate_table(data: ReportData) -> list[str]:
    esc = html.escape
    rec = data.recommendation or {}
    cands = rec.get("candidates") or []
    out = ["<h2>Candidates</h2>"]
    buckets = [b.tokens_per_rank for b in data.buckets]
    if cands:
        head = "".join(f"<th>T={t} (µs)</th>" for t in buckets)
        weights = "".join(f"<td>{b.weight:.0%}</td>" for b in data.buckets)
        out.append(f"<table><tr><th>backend</th><th>verdict</th>{head}<th>weighted (µs)</th><th>notes</th></tr>")
        out.append(f'<tr class="weights"><td>bucket weight</td><td></td>{weights}<td></td><td></td></tr>')
        for c in cands:
            name = c.get("backend", "?")
            per = _bucket_cells(c)
            cells = "".join(f"<td>{per.get(t, '—')}</td>" for t in buckets)
            cls = ' class="chosen"' if name == data.recommended else ""
            notes = "; ".join(str(n) for n in c.get("warnings") or ())
            out.append(
                f"<tr{cls}><td>{esc(name)}</td><td>{esc(str(c.get('status', '')))}</td>{cells}"
                f"<td>{_fmt(c.get('weighted_us'))}</td><td>{esc(notes)}</td></tr>"
            )
        out.append("</table>")
        out.append('<p class="weights">~ estimated by the selector between or beyond measured token counts '
                   "(latency = a + bytes / bandwidth, fitted on the nearest measured points); — no estimate.</p>")
    else:
        out.append("<p>No candidate has measurements for this shape.</p>")
    rejected = rec.get("rejected") or []
    if rejected:
        out.append("<p>Rejected:</p><ul>")
        for r in rejected:
            if isinstance(r, dict):
                reasons = r.get("reasons") or r.get("reason") or ""
                if isinstance(reasons, (list, tuple)):
                    reasons = "; ".join(map(str, reasons))
                out.append(f"<li><code>{esc(str(r.get('backend', '?')))}</code>: {esc(str(reasons))}</li>")
            else:
                out.append(f"<li>{esc(str(r))}</li>")
        out.append("</ul>")
    return out


def _series_table(data: ReportData) -> list[str]:
    esc = html.escape
    out = ["<table><tr><th>backend</th><th>state</th><th>timed points</th><th>tokens per rank</th>"
           "<th>not timed</th></tr>"]
    for s in data.series:
        tokens = ", ".join(str(t) for t in s.tokens) or "—"
        failed = ", ".join(f"{r.tokens_per_rank}: {r.status}" for r in s.failed) or "—"
        out.append(f"<tr><td>{esc(s.backend)}</td><td>{esc(s.state)}</td><td>{len(s.timed)}</td>"
                   f"<td>{esc(tokens)}</td><td>{esc(failed)}</td></tr>")
    out.append("</table>")
    return out


def _fmt(v: float | None) -> str:
    if v is None:
        return "—"
    return f"{v:.1f}" if v < 1000 else f"{v:,.0f}"


def _bucket_cells(candidate: dict) -> dict[int, str]:
    """Per-bucket cells of one candidate of ``Recommendation.to_dict()``: the expected latency,
    ``~`` in front when the selector estimated it rather than measured it, ``—`` when missing."""
    cells = {}
    for b in candidate.get("buckets") or ():
        v = b.get("latency_us")
        cells[int(b["tokens_per_rank"])] = "—" if v is None else (
            ("~" if b.get("source") in ("interpolated", "extrapolated") else "") + _fmt(v))
    return cells


# --------------------------------------------------------------------------------------------
# Terminal


def terminal_chart(data: ReportData, *, width: int = 100, height: int = 28, colour: bool = False) -> str:
    """The main latency chart drawn with plotext (>= 6.1 API), as a string.

    Log-log, one line per timed backend; below the chart, the backends that are not plain
    candidates (illegal, partly or never timed), the crossovers and the fastest legal backend
    of each workload bucket, in words. ``colour`` keeps plotext's ANSI colours (for a tty).
    """
    try:
        import plotext as plx
    except ImportError:  # pragma: no cover - the report extra is a test dependency
        raise ReportPackagesMissing("plotext is not installed; run: pip install 'autoselect[report]'") from None
    timed = data.timed_series
    if not timed:
        return "\n".join(["No backend was timed." if data.series else "No measurements.", *_not_timed_lines(data)])
    fig = plx.figure
    fig.clear()
    plx.terminal.limit(False, False)
    fig.plot_size(width, height)
    for s in timed:
        label = s.backend if s.is_candidate else f"{s.backend} (not a candidate)"
        fig.draw(fig.signal(s.tokens, [r.latency_us_p50 for r in s.timed]).label(label).lines())
    all_t = [t for s in timed for t in s.tokens]
    all_y = [r.latency_us_p50 for s in timed for r in s.timed]
    if min(all_t) == max(all_t):
        fig.ruler("x").lim(min(all_t) / 2, max(all_t) * 2)
    if min(all_y) == max(all_y):
        fig.ruler("y").lim(min(all_y) / 2, max(all_y) * 2)
    fig.ruler("x").scale("log")
    fig.ruler("y").scale("log")
    fig.title(f"All2all round-trip latency, µs p50 (log) vs tokens per rank (log) — {data.model}")
    chart = fig.build().string(colorless=not colour)
    fig.clear()
    foot = [f"{data.shape_text} — {data.host_text}"]
    foot += [s.label() for s in data.series if s.state != "ok"]
    for c in (c for c in crossovers(data.series) if c.on_envelope):
        foot.append(f"crossover ≈ {c.tokens_per_rank:.0f} tokens per rank: {c.faster_below} faster below, "
                    f"{c.faster_above} above")
    marks = [b for b in data.buckets if b.backend]
    if marks:
        foot.append("fastest legal backend per workload bucket: "
                    + ", ".join(f"T={b.tokens_per_rank}: {b.backend}" for b in marks))
    if data.recommended:
        foot.append(f"recommended: --all2all-backend {data.recommended}")
    return chart.rstrip("\n") + "\n" + "\n".join(foot)


# --------------------------------------------------------------------------------------------
# Reading: the store and the selector -> ReportData


class FleetTokensNotMeasured(UserError):
    "--fleet-tokens names a token count no node measured for the fleet backend."


#: ``--workload`` names the selector knows; anything starting with a digit is token counts.
WORKLOAD_KINDS = ("decode", "prefill", "mixed")


def _resolve_host_class(conn, profile, host_class: str | None, gpu_arch: str | None):
    """(host_class, gpu_arch, dispatch dtype, rows) of the host class the report draws.

    Default: the host class whose newest row of this shape is the most recent. Raises
    :class:`NothingToReport` when no host class measured the shape.
    """
    classes = host_classes(conn)
    known = {c["host_class"]: c for c in classes}
    if host_class is not None and host_class not in known:
        raise UnknownHostClass(
            f"no host class {host_class!r} in the database; `autoselect hosts` lists the known ones"
        )
    wanted = [known[host_class]] if host_class is not None else classes
    found = []
    no_arch = []
    for c in wanted:
        arch = gpu_arch or c.get("gpu_arch")
        if not arch:
            no_arch.append(c["host_class"])
            continue
        arch = normalize_arch(arch)
        dtype = profile.activation_dtype(arch)
        rows = results_for(
            conn, hidden=profile.hidden_size, top_k=profile.top_k, experts=profile.num_experts,
            dispatch_dtype=dtype, host_class=c["host_class"], kind="micro",
        )
        if rows:
            newest = max((r.created_at or r.run_started_at or "") for r in rows)
            found.append((newest, c["host_class"], arch, dtype, rows))
    if not found:
        if no_arch and not gpu_arch:
            raise GpuArchRequired(
                f"host class {', '.join(no_arch)} has no GPU architecture (a CPU host); pass --gpu-arch "
                "sm90|sm100 to say which arch's activation dtype its measurements stand for"
            )
        where = f"host class {host_class}" if host_class else "any host class"
        raise NothingToReport(
            f"no measurement of {profile.model} (hidden {profile.hidden_size}, top_k {profile.top_k}, "
            f"{profile.num_experts} experts) on {where}; run `autoselect bench --model {profile.model}` first"
        )
    _, hc, arch, dtype, rows = max(found, key=lambda f: f[0])
    return hc, arch, dtype, rows


def _workload(text: str, deployment):
    text = text.strip()
    if text[:1].isdigit():
        return workload_from_tokens(text, what="--workload")
    if text not in WORKLOAD_KINDS:
        raise UnknownWorkload(
            f"unknown --workload {text!r}; use {', '.join(WORKLOAD_KINDS)} or token counts per rank like 1,8,64"
        )
    return workload_from_kind(text, deployment)


def bucket_marks(recommendation) -> list[BucketMark]:
    """The fastest candidate per workload bucket, from the selector's per-bucket estimates."""
    marks = []
    for i, (tokens, weight) in enumerate(recommendation.workload.buckets):
        best = None
        for c in recommendation.candidates:
            e = c.buckets[i] if i < len(c.buckets) else None
            if e is not None and e.latency_us is not None and (best is None or e.latency_us < best[1]):
                best = (c.backend, e.latency_us)
        marks.append(BucketMark(tokens, weight, best[0] if best else None, best[1] if best else None))
    return marks


def collect(
    model: str,
    *,
    db_path: os.PathLike | str | None = None,
    host_class: str | None = None,
    world_size: int | None = None,
    workload: str = "mixed",
    gpu_arch: str | None = None,
    vllm_version: str | None = None,
    fleet_backend: str | None = None,
    fleet_tokens: int | None = None,
) -> ReportData:
    """Read everything a report draws: the model's measurements, the recommendation, the fleet.

    :param model: checkpoint directory or Hugging Face id (config files only).
    :param db_path: the results database (default: ``$AUTOSELECT_DB`` / the user data dir).
    :param host_class: whose measurements (default: the class that measured the shape last).
    :param world_size: EP size (default: the largest measured for this shape).
    :param workload: ``decode``, ``prefill``, ``mixed`` or token counts per rank (``1,8,64``).
    :param gpu_arch: the arch whose activation dtype applies (default: the host class's).
    :param fleet_backend: backend of the per-node figure (default: the recommended one).
    :param fleet_tokens: tokens per rank of the per-node figure (default: most measured).
    """
    if world_size is not None and world_size < 1:
        raise BadDeployment(f"--world-size {world_size} must be at least 1")
    profile = load_profile(model)
    conn = connect_readonly(db_path)
    try:
        hc, arch, dtype, rows = _resolve_host_class(conn, profile, host_class, gpu_arch)
        sizes = sorted({r.world_size for r in rows})
        if world_size is None:
            world_size = sizes[-1]
        elif world_size not in sizes:
            raise NothingToReport(
                f"no measurement of {profile.model} at --world-size {world_size} on host class {hc} "
                f"(measured: {', '.join(map(str, sizes))}); pass one of those or run autoselect bench"
            )
        rows = [r for r in rows if r.world_size == world_size]
        host = newest_host(conn, hc)
        deployment = Deployment(dp=world_size, tp=1)
        spec = _workload(workload, deployment)
        rec = None
        if world_size >= 2:  # vLLM builds no all2all group with --data-parallel-size 1
            rec = recommend(
                profile, conn=conn, deployment=deployment, host_class=hc, host=host, gpu_arch=arch,
                vllm_version=vllm_version, workload=spec,
            )
    finally:
        conn.close()

    illegal = {}
    disqualified = {}
    if rec is not None:
        for rej in rec.rejected:
            if rej.kind == "illegal":
                illegal[rej.backend] = tuple(rej.reasons)
            elif rej.kind == "disqualified":
                disqualified[rej.backend] = tuple(rej.reasons)
    series = build_series(rows, illegal)
    for s in series:
        s.disqualified_reasons = disqualified.get(s.backend, ())
    data = ReportData(
        model=Path(profile.model).name if Path(profile.model).exists() else profile.model,
        hidden=profile.hidden_size,
        top_k=profile.top_k,
        experts=profile.num_experts,
        dispatch_dtype=dtype,
        world_size=world_size,
        host_class=hc,
        gpu_name=getattr(host, "gpu_name", None),
        device=getattr(host, "device", None),
        nvlink_peak_gbps=getattr(host, "nvlink_peak_gbps", None),
        series=series,
        buckets=bucket_marks(rec) if rec is not None else [],
        workload_kind=rec.workload.kind if rec is not None else None,
        recommended=rec.backend if rec is not None else None,
        recommendation=rec.to_dict() if rec is not None else None,
    )
    data.fleet = fleet_view(rows, series, data.recommended, backend=fleet_backend, tokens=fleet_tokens)
    return data


def fleet_view(rows: Sequence[Any], series: Sequence[BackendSeries], recommended: str | None, *,
               backend: str | None = None, tokens: int | None = None) -> FleetView | None:
    """The per-node view of one backend at one token count; None when one machine measured.

    Each node's newest timed row at that point; the drift check (:mod:`autoselect.drift`)
    decides which nodes are flagged.
    """
    machines = {r.machine_id for r in rows}
    if len(machines) < 2:
        if backend is not None or tokens is not None:
            raise UnknownBackend(
                "--fleet-backend / --fleet-tokens need a fleet database (measurements from two or more "
                "machines of the host class); this one has one machine"
            )
        return None
    timed = {s.backend for s in series if s.timed}
    if backend is None:
        candidates = [s.backend for s in series if s.is_candidate]
        backend = recommended if recommended in timed else (candidates[0] if candidates else None)
        if backend is None:
            return None
    elif backend not in timed:
        raise UnknownBackend(
            f"--fleet-backend {backend} has no timed measurement of this shape; "
            f"use one of: {', '.join(sorted(timed)) or 'none'}"
        )
    ok = [r for r in rows if r.backend == backend and r.status == "ok" and r.latency_us_p50 is not None]
    per_tokens: dict[int, set[str]] = {}
    for r in ok:
        per_tokens.setdefault(r.tokens_per_rank, set()).add(r.machine_id)
    if tokens is None:
        tokens = max(per_tokens, key=lambda t: (len(per_tokens[t]), t))
    elif tokens not in per_tokens:
        raise FleetTokensNotMeasured(
            f"--fleet-tokens {tokens}: no node measured {backend} at that token count; "
            f"measured: {', '.join(map(str, sorted(per_tokens)))}"
        )
    newest: dict[str, Any] = {}
    for r in ok:
        if r.tokens_per_rank != tokens:
            continue
        key = (r.created_at or "", r.id)
        if r.machine_id not in newest or key > (newest[r.machine_id].created_at or "", newest[r.machine_id].id):
            newest[r.machine_id] = r
    names = [r.hostname or m for m, r in newest.items()]
    nodes = [
        FleetNode(
            (r.hostname or m) if names.count(r.hostname or m) == 1 else f"{r.hostname or m} ({m[:8]})",
            m, r.latency_us_p50, r.latency_us_p10, r.latency_us_p90, r.created_at,
        )
        for m, r in newest.items()
    ]
    values = sorted(n.latency_us_p50 for n in nodes)
    mid = len(values) // 2
    median = values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2
    view = FleetView(backend, tokens, nodes, median)
    flag_drift(view, rows)
    return view


def flag_drift(view: FleetView, rows: Sequence[Any]) -> None:
    """Mark the nodes :func:`autoselect.drift.node_drift` flags, judged on this shape's rows.

    A node is ``drifted`` when its newest run is slow (beyond the noise) at the view's backend
    and token count, against its own history or the other nodes of its class; a node slow only
    at other points of this shape gets a note naming how many, but no red bar.
    """
    verdicts = {nd.machine_id: nd for nd in drift.node_drift(drift.observations(rows))}
    for node in view.nodes:
        nd = verdicts.get(node.machine_id)
        if nd is None or not nd.flagged:
            continue
        here = [sp for sp in nd.slow if sp.backend == view.backend and sp.tokens_per_rank == view.tokens_per_rank]
        if here:
            worst = max(here, key=lambda sp: sp.slowdown)
            versus = "the other nodes" if worst.versus == "class" else "its own history"
            node.drifted = True
            node.drift_note = f"+{worst.slowdown:.0%} vs {versus}"
        else:
            node.drift_note = f"slow at {len(nd.slow)} other point{'s' if len(nd.slow) != 1 else ''}"


def make_report(model: str, out_dir: os.PathLike | str, *, svg: bool = False, **options) -> ReportFiles:
    """:func:`collect` then :func:`write_report`: everything is read and checked before a file is written.

    ``options`` are :func:`collect`'s keyword arguments.
    """
    return write_report(collect(model, **options), out_dir, svg=svg)


def terminal_report(model: str, *, colour: bool = False, **options) -> str:
    """:func:`collect` then :func:`terminal_chart`; ``options`` are :func:`collect`'s keyword arguments."""
    return terminal_chart(collect(model, **options), colour=colour)
