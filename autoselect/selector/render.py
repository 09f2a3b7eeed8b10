"""The answer as text: the human answer, the evidence per bucket, shell exports, bare flags.

The CLI only prints these. The human answer puts the command line first, then the decision, the
published reference it rests on (if any: which backend's numbers are published, derived or
transferred, and from where), the candidates table, rejections, warnings, the data used;
``--explain`` adds the evidence per token bucket, each number with its kind and source; stored
end-to-end results and a ``--validate`` verdict come last.
"""

from __future__ import annotations

import shlex

from autoselect.columns import aligned
from autoselect.selector.answer import MEASURED, POINT, Candidate, E2eEvidence, Recommendation, ReferenceUsed
from autoselect.selector.confidence import CONFIDENCE_CAPS
from autoselect.selector.ties import E2E_BASIS
from autoselect.selector.wording import SHOWN, confidence_sentence

#: rule name -> the level it caps the confidence at
_CAPS = {cap.name: cap.cap for cap in CONFIDENCE_CAPS}
#: How the candidates table marks an estimated value.
_ESTIMATE_MARKS = {"interpolated": "~", "extrapolated": "~~"}


def _fmt_us(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.1f}" if x < 1000 else f"{x:.0f}"


def _pm(x: float | None) -> str:
    return "" if x is None else "+-" + _fmt_us(x)


def render_text(rec: Recommendation, *, explain: bool = False) -> str:
    """The human answer: the command line first, then candidates, rejections, warnings, data."""
    lines = [rec.command, ""] + _summary(rec) + _reference(rec.reference) + _candidates(rec)
    if rec.rejected:
        lines += ["", "rejected:"] + [f"  {r.backend} ({r.kind}): {'; '.join(r.reasons)}" for r in rec.rejected]
    if rec.warnings:
        lines += ["", "warnings:"] + [f"  - {w}" for w in rec.warnings]
    lines += ["", _data_line(rec)]
    if rec.bench_command:
        lines.append(f"to settle it: {rec.bench_command}")
    if explain:
        lines += ["", render_explain(rec)]
    if rec.e2e is not None:
        lines += _e2e_table(rec.e2e, rec.backend)
    if rec.vllm_validation is not None:
        lines += ["", f"validated: {rec.vllm_validation.vllm.label()}'s own `vllm serve` parser accepts the flags"]
    return "\n".join(lines)


def _summary(rec: Recommendation) -> list[str]:
    dep, prof = rec.deployment, rec.profile
    lines = [
        f"backend     {rec.backend}  ({rec.decision})",
        f"confidence  {_confidence(rec)}",
        f"model       {rec.model}: hidden {prof.hidden_size}, {prof.num_experts} experts, "
        f"top-{prof.top_k}, {rec.activation_dtype} dispatch on {rec.gpu_arch}",
        f"deployment  dp {dep.dp} x tp {dep.tp} = EP {dep.world_size}, vLLM {rec.vllm_version}"
        + (f" ({rec.vllm_version_source})" if rec.vllm_version_source else ""),
    ]
    if rec.knobs:
        lines.append(_knobs_line(rec.knobs))
    lines.append(f"workload    {rec.workload.kind}: "
                 + ", ".join(f"{t} tok/rank {w:.0%}" for t, w in rec.workload.buckets))
    lines.append(f"budget      {rec.token_budget.tokens} tokens per engine per step: {rec.token_budget.why}")
    if rec.step_consequences:
        lines.append(f"step        {rec.backend}: " + "; ".join(c.text for c in rec.step_consequences))
    return lines


def _confidence(rec: Recommendation) -> str:
    """The confidence in one sentence (the reasons in full: ``--explain``)."""
    caps = [_CAPS.get(code, "") for code in rec.confidence_codes]
    return confidence_sentence(rec.confidence, rec.confidence_reasons, caps, rec.comparison)


def _knobs_line(knobs: dict) -> str:
    settings = [f"{k}={v}" for k, v in (knobs.get("env") or {}).items()] + list(knobs.get("flags") or [])
    gain, band = knobs.get("gain"), knobs.get("gain_halfwidth")
    measured = ""
    if gain is not None:
        measured = f"  (autoselect tune: {gain:.1%} faster" + (f" +- {band:.1%}" if band is not None else "") + ")"
    return f"tuned knobs {' '.join(settings) or '-'}" + measured


def _reference(ref: ReferenceUsed | None) -> list[str]:
    """The published reference behind the answer: the class, why, each kind's backends and source."""
    if ref is None:
        return []
    lines = [f"reference   {ref.host_class}: {ref.system}"]
    if not ref.why.startswith("--host-class"):
        lines.append(f"            {ref.why}")
    by_line: dict[tuple[str, str], list[str]] = {}
    for b in ref.backends:
        by_line.setdefault((b.evidence, b.line), []).append(b.backend)
    width = max(len(kind) for kind, _ in by_line)
    for (kind, line), backends in by_line.items():
        lines.append(f"            {kind.ljust(width)}  {', '.join(backends)}: {line}")
    lines += [f"            serving host: {r}" for r in ref.requirements]
    fixes = ref.footing.get("corrections") if ref.footing else None
    if ref.footing:
        lines.append("footing     every number as vLLM's layer pays it (CUDA graph up to the largest captured step, "
                     "eager above); corrections: " + (", ".join(f"{k} {v['effect']} [{', '.join(v['evidence'])}]"
                                                        for k, v in fixes.items()) if fixes else "none")
                     + " (--explain and the JSON give each number's)")
    return lines


def _candidates(rec: Recommendation) -> list[str]:
    if not rec.candidates:
        return []
    kinds = rec.reference is not None or any(c.evidence != MEASURED for c in rec.candidates)
    header = ["candidate", "verdict", "x default"] + (["evidence"] if kinds else []) + ["weighted us", "+-"]
    first = len(header)
    header += [f"{t} tok" for t in rec.workload.tokens]
    rows = [header]
    for c in rec.candidates:
        cells = [_ESTIMATE_MARKS.get(b.source, "") + (">=" if b.bound else "") + ("=" if b.flat else "")
                 + _fmt_us(b.latency_us) + ("*" if b.steps > 1 and b.latency_us is not None else "")
                 for b in c.buckets]
        kind = ([(c.evidence + (" bound" if c.bound else "")) if c.fit is not None else "-"] if kinds else [])
        ratio = f"{c.ratio_to_default:.2f}x" if c.ratio_to_default is not None else "-"
        rows.append([c.backend, SHOWN.get(c.status, c.status), ratio] + kind
                    + [(">=" if c.bound else "") + _fmt_us(c.weighted_us), _fmt_us(c.halfwidth_us)] + cells)
    lines = [""] + aligned(rows, right={2} | set(range(first - 2, len(header))))
    if rec.estimated:
        lines.append("(~ interpolated, ~~ extrapolated with the fitted latency model; us = microseconds)")
    if any(b.steps > 1 and b.latency_us is not None for c in rec.candidates for b in c.buckets):
        lines.append("(* above the backend's step budget: vLLM runs it as several steps, priced as their all2alls)")
    lines += _ranges(rec.candidates, rec.activation_dtype)
    return lines


def _ranges(candidates: list[Candidate], activation_dtype: str) -> list[str]:
    """Under the table: each derived range, each lower bound, each backend that sends another dtype,
    and what each backend needs of a serving host this machine is not."""
    lines = []
    for c in candidates:
        if c.range_us is not None and c.weighted_us is not None:
            lo, hi = c.range_us
            why = ("one launch per NCCL group plus a per-tensor term, and the framework's per-launch cost"
                   if c.evidence == "derived" else "the footing corrections' range")
            lines.append(f"{c.backend}: {c.evidence}, between {_fmt_us(lo)} and {_fmt_us(hi)} us on vLLM's footing "
                         f"({why}); {_fmt_us(c.weighted_us)}, the middle, is compared")
        elif c.bound and c.weighted_us is not None:
            lines.append(f"{c.backend}: >= {_fmt_us(c.weighted_us)} us is only a lower bound (no NCCL timings at "
                         "this EP size): a backend below it is faster, one above it cannot be compared")
        if c.wire_dtype is not None:
            how = (f"vLLM runs {c.expert_kernel}, which takes the activation unquantized" if c.expert_kernel
                   else "vLLM's prepare step")
            lines.append(f"{c.backend}: sends {activation_dtype} activations as {c.wire_dtype} ({how})")
        lines += [f"{c.backend}: {line}" for line in c.step]
        if c.requires:
            lines.append(f"{c.backend}: {'; '.join(c.requires)}")
        flat = [b.tokens_per_rank for b in c.buckets if b.flat and b.latency_us is not None]
        if flat:
            lines.append(f"{c.backend}: = a flat transfer at {', '.join(map(str, flat))} tok: there the published "
                         "shapes cost no more for more bytes (launch-bound), so every shape gets their mean, whatever "
                         "its bytes; the transfer reads bytes per token, not the expert count")
    return lines


def _data_line(rec: Recommendation) -> str:
    d = rec.data_used
    if not d.results and rec.reference is not None:  # results_considered counts the reference points then
        return (f"data: no local measurements for host class {d.host_class} and this shape; "
                f"{rec.reference.points} points of NVIDIA's published reference {rec.reference.host_class}")
    if not d.results and d.results_considered:
        return (f"data: {d.results_considered} stored results for host class {d.host_class} and this shape, none "
                "close enough to these token counts to use (the warnings say why)")
    if not d.results:
        return f"data: no measurements for host class {d.host_class} and this shape"
    made_up = sorted({run.synthetic for run in d.runs if run.synthetic})
    return (f"data: host class {d.host_class} ({d.gpu_name}), {len(d.machines)} machine(s) "
            f"({', '.join(d.machines)}), {len(d.runs)} run(s), {d.results} results, "
            f"{(d.oldest or '?')[:10]} .. {(d.newest or '?')[:10]}"
            + (f"; SYNTHETIC: {'; '.join(made_up)}" if made_up else ""))


def _e2e_table(e2e: E2eEvidence, backend: str) -> list[str]:
    backends = sorted({b for v in e2e.latencies.values() for b in v})
    rows = [["e2e (vllm bench forward)"] + [f"{t} tok" for t in e2e.latencies]]
    for b in backends:
        rows.append([b + (" *" if b == backend else "")]
                    + ["-" if b not in v else f"{v[b]:.1f}" for v in e2e.latencies.values()])
    return [""] + aligned(rows, right=set(range(1, len(rows[0])))) + ["(us per forward pass; * the recommended backend)"]


def render_explain(rec: Recommendation) -> str:
    """The evidence per token bucket: every candidate's latency, band, origin and result ids."""
    lines = [
        "evidence per token bucket (latency +- band; a backend leaves a measured default only when its "
        "weighted band clears the default's, a derived one by the tie rule of docs/recommend.md):"
    ]
    sources = _sources(rec.candidates)
    if sources:
        lines.append("sources of the numbers that are not measured here:")
        lines += [f"  [{n}] {line}" for line, n in sources.items()]
    footing = rec.reference.footing if rec.reference is not None else {}
    if footing:
        lines.append(f"footing: every number is put on one footing: {footing['common']}")
        lines += [f"  {k}: {v}" for k, v in footing["footings"].items()]
        if footing.get("derived_default"):
            lines.append(f"  the derived default: {footing['derived_default']}")
        lines += [f"  correction {k} ({', '.join(v['backends'])}): {v['effect']}: {v['what']} [{', '.join(v['evidence'])}]"
                  for k, v in footing["corrections"].items()]
        lines += [f"  [{k}] {v}" for k, v in footing["evidence"].items()]
    for i, (tokens, weight) in enumerate(rec.workload.buckets):
        lines.append(f"{tokens} tokens/rank (weight {weight:.0%}):")
        lines += _bucket_rows(rec.candidates, i, sources)
    lines.append("weighted over the workload:")
    rows = [["  " + c.backend, _fmt_us(c.weighted_us), _pm(c.halfwidth_us), c.status] for c in rec.candidates]
    if rows:
        lines += aligned(rows, right={1, 2})
    lines += _why(rec)
    fitted = [c for c in rec.candidates if c.fit is not None]
    if fitted:
        lines.append("latency model per backend (latency = a + bytes / bandwidth, all measured points):")
        for c in fitted:
            bw = c.fit.bandwidth_gbps
            lines.append(f"  {c.backend}: a = {c.fit.a_us:.1f} us, bandwidth = " + (f"{bw:.1f} GB/s" if bw else "-")
                         + f", {c.fit.points} points, rms residual {c.fit.rel_rms:.1%}")
    return "\n".join(lines)


def _why(rec: Recommendation) -> list[str]:
    """The decision and the confidence with everything behind them: every confidence rule that
    applied, the comparison, the end-to-end effect and its sources, and the sources of every
    sentence of the answer that has them."""
    c = rec.comparison
    lines = [f"decision ({c.rule}): {rec.decision}"]
    if c.versus is not None and c.ratio is not None:
        lines.append(f"  {c.pick} against {c.versus}: {c.verdict}, {c.ratio:.3f}x at the central values"
                     + (f"; a whole step: {c.end_to_end_pct[0]:.1f}-{c.end_to_end_pct[1]:.1f} %"
                        if c.end_to_end_pct is not None else ""))
    if c.settle:
        lines.append(f"  a measurement on the serving host separates them: {c.settle}")
    if c.end_to_end_pct is not None:
        lines.append(f"  {E2E_BASIS}")
    lines.append(f"confidence {rec.confidence}:" + ("" if rec.confidence_reasons else " no rule capped it"))
    lines += [f"  [{code}] {reason}" for code, reason in zip(rec.confidence_codes, rec.confidence_reasons)]
    if rec.details:
        lines.append("sources of the sentences above:")
        lines += [f"  - {detail}" for detail in rec.details.values()]
    return lines


def _sources(candidates: list[Candidate]) -> dict[str, int]:
    """Every reference line a value rests on, numbered in order of appearance."""
    lines = [b.reference for c in candidates for b in c.buckets if b.reference]
    return {line: n for n, line in enumerate(dict.fromkeys(lines), 1)}


def _bucket_rows(candidates: list[Candidate], i: int, sources: dict[str, int]) -> list[str]:
    rows = []
    for c in candidates:
        b = c.buckets[i]
        # a point says its kind (measured, synthetic, published, ...); an estimate says so, then its kind
        origin = b.evidence if b.source == POINT else b.source + ("" if b.evidence == MEASURED else f", {b.evidence}")
        if b.reference:
            origin += f" [{sources[b.reference]}]"
        if b.result_ids:
            origin += f" (result{'s' if len(b.result_ids) > 1 else ''} {', '.join(map(str, sorted(b.result_ids)))})"
        if b.range_us is not None:
            origin += f", range {_fmt_us(b.range_us[0])}..{_fmt_us(b.range_us[1])}"
        if b.bound:
            origin += ", a lower bound"
        if b.flat:
            origin += ", flat (every shape gets this value here)"
        if b.footing is not None:
            origin += f"; {b.footing.describe()}"
        rows.append(["  " + c.backend, _fmt_us(b.latency_us), _pm(b.halfwidth_us), origin])
    lines = aligned(rows, right={1, 2}) if rows else []
    for c in candidates:
        b = c.buckets[i]
        if b.note and b.source != POINT and c.status != "no data":
            lines.append(f"    {c.backend}: {b.note}")
    return lines


def render_env(rec: Recommendation) -> str:
    """Shell ``export`` lines for launch scripts (``eval "$(autoselect recommend ... --format env)"``)."""
    return "\n".join(f"export {k}={shlex.quote(v)}" for k, v in rec.env.items())


def render_args(rec: Recommendation) -> str:
    """Only the flags, shell-quoted, for ``vllm serve MODEL $(autoselect recommend ... --format args)``."""
    return shlex.join(rec.vllm_args)
