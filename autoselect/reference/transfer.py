"""Shape transfer: a backend's published numbers carried to a shape (or dtype) NVIDIA did not measure.

The published rows cover a few shapes per backend (DeepEP: six DeepSeek/Kimi/Qwen-sized shapes,
bf16 only; TensorRT-LLM: 7168 × top-8 × 256 in bf16 / fp8 / nvfp4). Another model's shape gets
estimates from the **same backend's rows on the same system at the same EP size**, by the bytes
one token puts on the all2all (``autoselect.payload``: dispatch row + top-k ids and weights,
bf16 combine row), with the latency model ``latency = a + bytes / bandwidth``
(:func:`autoselect.latency_model.fit_latency`):

* **across shapes** (the backend has rows of two or more bytes-per-token values): at each
  published token count ``T`` the model is fitted on the source shapes' ``(T · bytes_per_token,
  latency)`` and read at ``T ·`` the target's bytes per token. ``a`` absorbs what a round trip of
  ``T`` tokens costs whatever the shape (launches, synchronisation, per-token bookkeeping), the
  bandwidth what each byte costs;
* **from one shape** (TensorRT-LLM's one-sided rows exist for one shape and dtype only): the same
  bytes cost the same time, so the target at ``T`` tokens is the source's curve at the token
  count that moves as many bytes (``T · target / source`` bytes per token), read with the latency
  model on the four nearest source points in log-tokens; inside the source's token range only.

A token count where the source shapes cost no more for more bytes (the fitted slope would be
negative and is clamped at zero: DeepEP low-latency at a few tokens per rank, launch-bound) gives
every target their weighted mean, whatever its bytes; its derivation says so (``flat``).

Refused (no number) when the target's bytes per token lie more than :data:`SHAPE_TRANSFER_LIMIT`
times outside the source shapes' range: "far outside the measured bytes". Every transferred
point is marked ``transferred`` and says from which shapes (``derivation``). The phase split
(dispatch / combine / prepare) is the nearest source shape's at the same token count. Pure Python.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Sequence

from autoselect.latency_model import LatencyFit, fit_latency
from autoselect.payload import all2all_bytes_per_token
from autoselect.workload import Shape

TRANSFERRED = "transferred"
#: Refuse a transfer when the target's bytes per token are more than this factor outside the
#: source shapes' bytes per token.
SHAPE_TRANSFER_LIMIT = 2.0
#: Source points nearest in log-tokens that the one-shape transfer reads the curve with.
CURVE_POINTS = 4
ACROSS_SHAPES = "fit across shapes at each token count"

#: The measured transfer error per backend: p95 of ``|transferred / published - 1|`` when each
#: published (shape, dtype) of a backend is held out and transferred from that backend's other
#: shapes on the same system and EP size (``python3 perf/regret_reference.py``, "est.err by
#: backend, shapes"; AIConfigurator 0.12.0). A transferred point carries it as its band.
TRANSFER_ERROR = {
    "deepep_high_throughput": 0.176,
    "deepep_low_latency": 0.316,
    "flashinfer_nvlink_two_sided": 0.131,
}
#: A backend without a measurement of its own (one-sided has one published shape, so holding it
#: out leaves nothing to transfer from): the p95 over every backend's transferred points.
TRANSFER_ERROR_POOLED = 0.195
BYTES_EQUIVALENT = "one shape: the same bytes at an equivalent token count"


def transfer_error(backend: str) -> float:
    """The relative band of ``backend``'s transferred points (:data:`TRANSFER_ERROR`, else the pooled one)."""
    return TRANSFER_ERROR.get(backend, TRANSFER_ERROR_POOLED)


def shape_label(hidden: int, top_k: int, experts: int, dtype: str) -> str:
    """``H7168 top8 E256 bf16`` (:meth:`autoselect.workload.Shape.label`)."""
    return Shape(hidden=hidden, top_k=top_k, experts=experts, dtype=dtype).label()


class Transfer(NamedTuple):
    """The transferred points of one backend for one target shape, or why there are none."""

    points: list  # [ReferencePoint], ascending tokens, evidence "transferred"
    from_shapes: tuple[str, ...]  # the source shapes' labels
    method: str | None  # ACROSS_SHAPES / BYTES_EQUIVALENT, None when refused
    refused: str | None  # why nothing was transferred


def transfer_points(sources: Sequence, *, hidden: int, top_k: int, experts: int, dtype: str,
                    source_line: str | None = None) -> Transfer:
    """Transfer one backend's published ``sources`` (ReferencePoints of one system and world size,
    any shapes) to the target shape; see the module docstring.

    :param source_line: the source line of the published rows (default: the first source's).
    """
    if not sources:
        return Transfer([], (), None, "no published rows to transfer from")
    by_shape: dict[tuple, dict[int, object]] = {}
    for p in sources:
        by_shape.setdefault((p.hidden, p.top_k, p.experts, p.wire_dtype), {})[p.tokens_per_rank] = p
    target_bpt = all2all_bytes_per_token(dtype, hidden, top_k)
    bpt = {s: all2all_bytes_per_token(s[3], s[0], s[1]) for s in by_shape}
    labels = tuple(shape_label(*s) for s in sorted(by_shape, key=lambda s: (bpt[s], s)))
    lo, hi = min(bpt.values()), max(bpt.values())
    if target_bpt * SHAPE_TRANSFER_LIMIT < lo or target_bpt > hi * SHAPE_TRANSFER_LIMIT:
        return Transfer([], labels, None, (
            f"refused: {shape_label(hidden, top_k, experts, dtype)} moves {target_bpt} bytes per token, more than "
            f"{SHAPE_TRANSFER_LIMIT:g}x outside the published shapes' {lo}..{hi} ({', '.join(labels)})"))
    line = source_line or sources[0].source_line
    text = f"transferred from {', '.join(labels)} by bytes per token ({line})"
    if len(set(bpt.values())) >= 2:
        points = _across_shapes(by_shape, bpt, target_bpt, (hidden, top_k, experts, dtype), text, labels)
        method = ACROSS_SHAPES
    else:
        # one bytes-per-token value (shapes that differ only in experts): the curve with the most points
        shape, curve = max(sorted(by_shape.items()), key=lambda kv: len(kv[1]))
        points = _bytes_equivalent(curve, bpt[shape], target_bpt, (hidden, top_k, experts, dtype), text, labels)
        method = BYTES_EQUIVALENT
    if not points:
        return Transfer([], labels, None, "no token count of the published rows can be transferred")
    return Transfer(points, labels, method, None)


def _across_shapes(by_shape, bpt, target_bpt, target, text, labels) -> list:
    tokens = sorted({t for curve in by_shape.values() for t in curve})
    out = []
    for t in tokens:
        here = [(s, curve[t]) for s, curve in by_shape.items() if t in curve]
        if len({bpt[s] for s, _ in here}) < 2:
            continue
        fit = fit_latency([(t * bpt[s], p.latency_us) for s, p in here])
        nearest = min(here, key=lambda sp: (abs(math.log(bpt[sp[0]] / target_bpt)), sp[0]))[1]
        out.append(_point(nearest, target, t, fit.predict(t * target_bpt), text, {
            "method": ACROSS_SHAPES, "from_shapes": list(labels), "bytes_per_token": target_bpt,
            "source_bytes_per_token": sorted({bpt[s] for s, _ in here}), **_fit_terms(fit),
            # the shapes cost no more for more bytes here (the fit's slope clamped at zero): every
            # target gets their weighted mean, the same number whatever its bytes
            "flat": fit.us_per_byte == 0.0,
            "points": [[t * bpt[s], p.latency_us] for s, p in here]}))
    return out


def _bytes_equivalent(curve, source_bpt, target_bpt, target, text, labels) -> list:
    tokens = sorted(curve)
    out = []
    for t in tokens:
        equivalent = t * target_bpt / source_bpt
        if equivalent < tokens[0] or equivalent > tokens[-1]:
            continue
        near = sorted(tokens, key=lambda u: (abs(math.log(u / equivalent)), u))[:CURVE_POINTS]
        fit = fit_latency([(u * source_bpt, curve[u].latency_us) for u in near])
        exact = curve.get(int(equivalent)) if equivalent == int(equivalent) else None
        latency = exact.latency_us if exact is not None else fit.predict(t * target_bpt)
        out.append(_point(curve[t], target, t, latency, text, {
            "method": BYTES_EQUIVALENT, "from_shapes": list(labels), "bytes_per_token": target_bpt,
            "source_bytes_per_token": [source_bpt], "equivalent_tokens": equivalent, **_fit_terms(fit),
            "points": [[u * source_bpt, curve[u].latency_us] for u in sorted(near)]}))
    return out


def _fit_terms(fit: LatencyFit) -> dict:
    return {"a_us": fit.a_us, "bandwidth_gbps": fit.bandwidth_gbps, "rel_rms": fit.rel_rms}


def _point(nearest, target, tokens: int, latency_us: float, text: str, derivation: dict):
    """A transferred ReferencePoint at ``tokens``: the nearest source point's provenance, the
    target's shape, ``latency_us`` split into phases as the nearest source splits it."""
    hidden, top_k, experts, dtype = target
    share = latency_us / nearest.latency_us if nearest.latency_us else 1.0
    return nearest._replace(
        evidence=TRANSFERRED, hidden=hidden, top_k=top_k, experts=experts, wire_dtype=dtype,
        tokens_per_rank=tokens, latency_us=latency_us, dispatch_us=nearest.dispatch_us * share,
        combine_us=nearest.combine_us * share,
        prepare_us=nearest.prepare_us * share if nearest.prepare_us is not None else None,
        source_line=text, extra={}, raw=None, derivation=derivation)
