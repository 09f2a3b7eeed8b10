"""The self-contained page: the recommendation, the ``vllm serve`` command, the candidate table,
the figures embedded as base64 data URIs (one file to mail or attach to a ticket)."""

from __future__ import annotations

import base64
import html

from autoselect.report.data import ReportData
from autoselect.report.style import BANDWIDTH_FORMULA, ESTIMATED_MARK, EVIDENCE_WORDS

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
.warn{color:#8a4b00}sup{font-size:.7em;color:#555;margin-left:.15em}.ev-published,.ev-derived,.ev-transferred{font-style:italic}figure{margin:1.2em 0}
img{max-width:100%;height:auto;border:1px solid #eee}
"""


def render_html(data: ReportData, images: dict[str, bytes]) -> str:
    """The self-contained page: recommendation, serve command, candidate table, the published
    reference, figures inline, the measurements."""
    esc = html.escape
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>autoselect report — {esc(data.model)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>autoselect report — {esc(data.model)}</h1>",
        f"<p>{esc(data.shape_text)} · {esc(data.host_text)}</p>",
    ]
    if data.reference_only:
        parts.append('<p class="warn">A reference class: every number on this page is NVIDIA\'s published '
                     "measurement (or derived from one) on NVIDIA's nodes; nothing here was measured on your "
                     "machines.</p>")
    parts += _recommendation(data)
    parts += _candidate_table(data)
    parts += _reference_section(data)
    parts.append("<h2>Figures</h2>")
    for name, png in images.items():
        uri = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
        caption = FIGURE_CAPTIONS.get(name, name)
        if data.reference_curves and name in ("latency", "phases", "bandwidth"):
            caption += " Dashed, open markers: NVIDIA's published reference of this shape (see above)."
        # the image draws its own caption (a PNG is also read alone); the page repeats it only as the
        # alt text a screen reader or a page without images shows
        parts.append(f'<figure id="fig-{name}"><img src="{uri}" alt="{esc(caption)}"></figure>')
    parts.append("<h2>Measurements</h2>")
    parts += _series_table(data)
    parts.append("</body></html>")
    return "\n".join(parts)


def _recommendation(data: ReportData) -> list[str]:
    esc = html.escape
    rec = data.recommendation or {}
    parts = ["<h2>Recommendation</h2>"]
    if data.recommended:
        conf, capped = data.confidence
        workload = (f" for {esc(data.workload_note)}" if data.workload_note
                    else f" for the {esc(data.workload_kind)} workload" if data.workload_kind else "")
        parts.append(
            f"<p>Use <code>--all2all-backend {esc(str(data.recommended))}</code>"
            + (f" (confidence: {esc(str(conf))})" if conf is not None else "")
            + workload + ".</p>"
        )
        if capped:
            parts.append(f'<p class="warn">⚠ Confidence shown as {esc(str(conf))}: {esc(capped)}.</p>')
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
    return parts


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
        kinds = set()
        for c in cands:
            name = c.get("backend", "?")
            per = {int(b["tokens_per_rank"]): b for b in c.get("buckets") or ()}
            kinds |= {value_kind(b)[0] for b in per.values() if b.get("latency_us") is not None}
            cells = "".join(_value_cell(per.get(t)) for t in buckets)
            cls = ' class="chosen"' if name == data.recommended else ""
            notes = "; ".join(str(n) for n in c.get("warnings") or ())
            out.append(
                f"<tr{cls}><td>{esc(name)}</td><td>{esc(str(c.get('status', '')))}</td>{cells}"
                f"{_weighted_cell(c)}<td>{esc(notes)}</td></tr>"
            )
        out.append("</table>")
        out.append(f'<p class="weights">{esc(evidence_legend(kinds))}</p>')
    else:
        out.append("<p>No candidate has measurements for this shape.</p>")
    out += _rejected(rec.get("rejected") or [])
    return out


def _rejected(rejected: list) -> list[str]:
    esc = html.escape
    if not rejected:
        return []
    out = ["<p>Rejected:</p><ul>"]
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


def value_kind(bucket: dict) -> tuple[str, bool]:
    """(evidence kind, estimated) of one bucket value of ``Recommendation.to_dict()``.

    The kind is the bucket's ``evidence`` (written when it is not ``measured``); estimated: the
    selector interpolated or extrapolated it rather than read it at its token count.
    """
    return bucket.get("evidence") or "measured", bucket.get("source") in ("interpolated", "extrapolated")


def _value_cell(bucket: dict | None) -> str:
    """One table cell: the value, ``~`` when estimated, and the mark of its kind (words on hover)."""
    if bucket is None or bucket.get("latency_us") is None:
        return "<td>—</td>"
    kind, estimated = value_kind(bucket)
    return _mark_cell(bucket["latency_us"], kind, estimated)


def _mark_cell(value: float, kind: str, estimated: bool) -> str:
    mark, words = EVIDENCE_WORDS.get(kind, (kind[:1].upper(), kind))
    title = words + ("; estimated between or beyond the token counts it rests on" if estimated else "")
    return (f'<td class="ev-{html.escape(kind)}" title="{html.escape(title)}">'
            f"{ESTIMATED_MARK if estimated else ''}{_fmt(value)}<sup>{html.escape(mark)}</sup></td>")


def _weighted_cell(candidate: dict) -> str:
    """The weighted latency, marked with the weakest kind of the values it weighs."""
    value = candidate.get("weighted_us")
    kinds = [value_kind(b) for b in candidate.get("buckets") or () if b.get("latency_us") is not None]
    if value is None or not kinds:
        return f"<td>{_fmt(value)}</td>"
    order = list(EVIDENCE_WORDS)
    weakest = max((k for k, _ in kinds), key=lambda k: order.index(k) if k in order else len(order))
    return _mark_cell(value, weakest, any(e for _, e in kinds))


def evidence_legend(kinds, *, estimates: bool = True) -> str:
    """The line under a table: what each mark means (the kinds shown; with ``estimates``, also
    ``measured`` and the selector's ``~``)."""
    kinds = set(kinds) | ({"measured"} if estimates else set())
    shown = [k for k in EVIDENCE_WORDS if k in kinds] + sorted(kinds - set(EVIDENCE_WORDS))
    text = " · ".join(f"{EVIDENCE_WORDS.get(k, (k[:1].upper(), k))[0]} {EVIDENCE_WORDS.get(k, ('', k))[1]}"
                      for k in shown)
    if estimates:
        text += (f" · {ESTIMATED_MARK} estimated by the selector between or beyond the token counts it rests on "
                 "(latency = a + bytes / bandwidth, fitted on the nearest points); — no estimate.")
    return text


def _reference_section(data: ReportData) -> list[str]:
    """What NVIDIA published for this shape on the matching reference system, or why nothing."""
    esc = html.escape
    out = ["<h2>Published reference</h2>"]
    view = data.reference
    if view is None:
        return out + [f"<p>{esc(data.reference_note or 'no reference curves')}.</p>"]
    out.append(f"<p>{esc(view.how)}. These numbers were measured by NVIDIA on its own nodes and published "
               "in AIConfigurator's tables, with another harness and other versions (vLLM 0.24, TensorRT-LLM "
               "1.2): compare ratios, not exact microseconds. Drawn dashed in the figures.</p>")
    for c in view.caveats:
        out.append(f'<p class="warn">⚠ {esc(c)}</p>')
    if view.curves:
        buckets = [b.tokens_per_rank for b in data.buckets]
        head = "".join(f"<th>T={t} (µs)</th>" for t in buckets)
        out.append(f"<table><tr><th>backend</th><th>kind</th>{head}<th>token counts</th><th>source</th></tr>")
        for c in view.curves:
            cells = "".join(_mark_cell(p.latency_us, c.evidence, False) if (p := c.at(t)) else "<td>—</td>"
                            for t in buckets)
            kind = c.evidence + ("; ILLEGAL here" if c.illegal_reasons else "")
            tokens = f"{c.tokens[0]}–{c.tokens[-1]} ({len(c.points)})"
            out.append(f'<tr><td>{esc(c.backend)}</td><td>{esc(kind)}</td>{cells}<td>{esc(tokens)}</td>'
                       f'<td title="{esc(c.fidelity)}">{esc(c.source_line)}</td></tr>')
        out.append("</table>")
        out.append(f'<p class="weights">{esc(evidence_legend({c.evidence for c in view.curves}, estimates=False))}'
                   " · — no published row at that token count (never interpolated here).</p>")
    for note in view.absent:
        out.append(f"<p>{esc(note)}.</p>")
    return out


def _series_table(data: ReportData) -> list[str]:
    esc = html.escape
    out = ["<table><tr><th>backend</th><th>kind</th><th>state</th><th>points</th><th>tokens per rank</th>"
           "<th>not timed</th></tr>"]
    for s in data.series:
        tokens = ", ".join(str(t) for t in s.tokens) or "—"
        failed = ", ".join(f"{r.tokens_per_rank}: {r.status}" for r in s.failed) or "—"
        kind = EVIDENCE_WORDS["measured"][1] if s.timed else "not measured"
        out.append(f"<tr><td>{esc(s.backend)}</td><td>{esc(kind)}</td>"
                   f"<td>{esc(s.state)}</td><td>{len(s.timed)}</td><td>{esc(tokens)}</td><td>{esc(failed)}</td></tr>")
    for c in data.reference_curves:
        state = "illegal here" if c.illegal_reasons else "reference"
        out.append(f"<tr><td>{esc(c.backend)}</td><td>{esc(c.evidence)}: {esc(c.source_line)}</td>"
                   f"<td>{state}</td><td>{len(c.points)}</td><td>{esc(', '.join(map(str, c.tokens)))}</td>"
                   "<td>—</td></tr>")
    out.append("</table>")
    return out


def _fmt(v: float | None) -> str:
    if v is None:
        return "—"
    return f"{v:.1f}" if v < 1000 else f"{v:,.0f}"
