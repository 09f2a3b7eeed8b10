"""The latency chart in the terminal (plotext, imported on first use), for a headless node."""

from __future__ import annotations

from autoselect.report.data import ReportData, collect
from autoselect.report.errors import ReportPackagesMissing
from autoselect.report.series import crossovers
from autoselect.reference import DERIVED
from autoselect.report.style import ESTIMATED_MARK, EVIDENCE_WORDS, REFERENCE_MARKERS


def terminal_chart(data: ReportData, *, width: int = 100, height: int = 28, colour: bool = False) -> str:
    """The main latency chart drawn with plotext (>= 6.1 API), as a string.

    Log-log, one line per timed backend, NVIDIA's published reference of the same shape as
    unconnected points (a terminal's dashed line); every legend entry says whether its numbers
    are measured here, published or derived. Below the chart, in words: the backends that are
    not plain candidates (illegal, partly or never timed), the reference sources, the
    crossovers and the fastest legal backend of each workload bucket with the kind of its
    number. ``colour`` keeps plotext's ANSI colours (for a tty).
    """
    try:
        import plotext as plx
    except ImportError:  # pragma: no cover - the report extra is a test dependency
        raise ReportPackagesMissing("plotext is not installed; run: pip install 'autoselect[report]'") from None
    timed = data.timed_series
    curves = data.reference_curves
    if not timed and not (data.reference_only and curves):
        return "\n".join(["No backend was timed." if data.series else "No measurements.", *data.not_timed_lines()])
    fig = plx.figure
    fig.clear()
    plx.terminal.limit(False, False)
    fig.plot_size(width, height)
    measured = EVIDENCE_WORDS["measured"][1]
    for s in timed:
        label = f"{s.backend} — {measured}" + ("" if s.is_candidate else ", not a candidate")
        fig.draw(fig.signal(s.tokens, [r.latency_us_p50 for r in s.timed]).label(label).lines())
    for c, marker in zip(curves, _reference_markers(len(curves))):
        label = f"{c.backend} — {c.evidence}" + (", illegal here" if c.illegal_reasons else "")
        fig.draw(fig.signal(c.tokens, [p.latency_us for p in c.points], marker=marker).label(label))
    all_t = [t for s in timed for t in s.tokens] + [t for c in curves for t in c.tokens]
    all_y = [r.latency_us_p50 for s in timed for r in s.timed] + [p.latency_us for c in curves for p in c.points]
    if min(all_t) == max(all_t):
        fig.ruler("x").lim(min(all_t) / 2, max(all_t) * 2)
    if min(all_y) == max(all_y):
        fig.ruler("y").lim(min(all_y) / 2, max(all_y) * 2)
    fig.ruler("x").scale("log")
    fig.ruler("y").scale("log")
    fig.title(f"All2all round-trip latency, µs p50 (log) vs tokens per rank (log) — {data.model}")
    chart = fig.build().string(colorless=not colour)
    fig.clear()
    return chart.rstrip("\n") + "\n" + "\n".join(_footer(data))


def _footer(data: ReportData) -> list[str]:
    """The lines under the chart: shape and host, what is wrong, whose reference, crossovers, picks."""
    foot = [f"{data.shape_text} — {data.host_text}"]
    foot += [s.label() for s in data.series if s.state != "ok"]
    if data.reference is not None and data.reference.curves:
        foot.append(f"unconnected points ({' '.join(_reference_markers(len(data.reference.curves)))}): not measured "
                    f"here, NVIDIA's published reference; {data.reference.how}:")
        for c in data.reference.curves:
            line = c.source_line if c.evidence == DERIVED else f"published: {c.source_line}"
            foot.append(f"  {c.backend} — {line}" + ("; ILLEGAL here, never a candidate" if c.illegal_reasons else ""))
    if data.reference is not None:
        foot += data.reference.absent
    elif data.reference_note:
        foot.append(data.reference_note)
    for c in (c for c in crossovers(data.series) if c.on_envelope):
        foot.append(f"crossover ≈ {c.tokens_per_rank:.0f} tokens per rank: {c.faster_below} faster below, "
                    f"{c.faster_above} above")
    marks = [b for b in data.buckets if b.backend]
    if marks:
        foot.append("fastest legal backend per workload bucket: " + ", ".join(
            f"T={b.tokens_per_rank}: {b.backend} {_us(b.latency_us)} ({_kind_words(b)})" for b in marks))
    if data.recommended:
        conf, capped = data.confidence
        foot.append(f"recommended: --all2all-backend {data.recommended}" + (f" (confidence: {conf})" if conf else "")
                    + (f" for {data.workload_note}" if data.workload_note else ""))
        if capped:
            foot.append(f"confidence shown as {conf}: {capped}")
    return foot


def _reference_markers(n: int) -> list[str]:
    return [REFERENCE_MARKERS[i % len(REFERENCE_MARKERS)] for i in range(n)]


def _us(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f} µs" if value < 1000 else f"{value:,.0f} µs"


def _kind_words(mark) -> str:
    """What kind of number a bucket mark's latency is, in words (the selector's evidence)."""
    words = EVIDENCE_WORDS.get(mark.evidence, ("", mark.evidence))[1]
    return f"{ESTIMATED_MARK} estimated from values {words}" if mark.estimated else words


def terminal_report(model: str, *, colour: bool = False, **options) -> str:
    """:func:`collect` then :func:`terminal_chart`; ``options`` are :func:`collect`'s keyword arguments."""
    return terminal_chart(collect(model, **options), colour=colour)
