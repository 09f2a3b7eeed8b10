"""The latency chart in the terminal (plotext, imported on first use), for a headless node."""

from __future__ import annotations

from autoselect.report.data import ReportData, collect
from autoselect.report.errors import ReportPackagesMissing
from autoselect.report.series import crossovers


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
        return "\n".join(["No backend was timed." if data.series else "No measurements.", *data.not_timed_lines()])
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


def terminal_report(model: str, *, colour: bool = False, **options) -> str:
    """:func:`collect` then :func:`terminal_chart`; ``options`` are :func:`collect`'s keyword arguments."""
    return terminal_chart(collect(model, **options), colour=colour)
