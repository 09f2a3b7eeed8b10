"""The self-contained page: the recommendation, the ``vllm serve`` command, the candidate table,
the figures embedded as base64 data URIs (one file to mail or attach to a ticket)."""

from __future__ import annotations

import base64
import html

from autoselect.report.data import ReportData
from autoselect.report.style import BANDWIDTH_FORMULA

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

