"""Pick the fastest legal all2all backend for a model, deployment and workload.

The decision rules in code:

1. **Candidates** are the backends :func:`autoselect.candidates.candidate_backends` accepts for
   the model's activation dtype on the target GPU arch, world size and vLLM version (the one
   legality filter every command uses, over :func:`autoselect.rules.legal`). The one-sided
   nvfp4-only rule lives in ``rules``; this module never re-implements it and asserts, belt
   and braces, that whatever it picks is legal.
2. **Evidence** is every ``micro`` result of this host class (all machines of the class) for
   the model's shape (hidden, top_k, experts, dispatch dtype) at the deployment's world size,
   read summarized (``results_for(summarize=STALENESS_KEYS)``: the newest row per point,
   status and versions, with its group's count and median range), so a history of repeated
   sweeps costs SQL work, not one Python object per stored row; the answer is the same.
   An ``incorrect`` or ``error`` row disqualifies its backend for that shape. Rows measured
   under other vllm / flashinfer / driver versions than the target still count, with a
   staleness warning. For each (backend, tokens per rank) the newest up-to-date row wins.
3. **Unmeasured token counts** are estimated per backend with the latency model
   ``latency = a + bytes / bandwidth`` (:func:`fit_latency`), fitted on the measured points
   nearest in log-tokens; estimates are marked, extrapolation beyond the measured range is
   flagged, and beyond :data:`EXTRAPOLATION_LIMIT` times the range it is refused.
4. **Comparison** (:func:`autoselect.noise.band_compare`): every expected latency carries a
   half-width (the noise band, :func:`autoselect.noise.point_rel_halfwidth`, widened to the run-to-run spread when several runs
   measured the point); the workload-weighted latency of a candidate is
   ``L = sum(w_i * latency_i)`` with band ``H = sum(w_i * halfwidth_i)``. A candidate beats
   the default only when ``L_c + H_c < L_d - H_d`` (the bands do not overlap); otherwise it
   is a tie and vLLM's default stays.
5. **Confidence** starts at ``high`` and is capped by every rule of :data:`CONFIDENCE_CAPS`
   that applies; ``none`` means no usable measurement at all (the answer is the default and
   the ``autoselect bench`` command that would settle it).

Fast path: imports only the standard library and autoselect's pure-Python modules (no torch,
numpy, sqlite_utils or optuna); the database is read with stdlib ``sqlite3``.
"""

from __future__ import annotations

import math
import os
import shlex
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Sequence

from autoselect import rules, vllm_flags
from autoselect.candidates import candidate_backends, judge, resolve_target
from autoselect.errors import GpuArchRequired, UnknownHostClass, UserError
from autoselect.hardware import fingerprint
from autoselect.model import load_profile, normalize_arch
from autoselect.noise import REL_FLOOR, Z, band_compare, point_rel_halfwidth
from autoselect.payload import combine_bytes_per_token, dispatch_bytes_per_token
from autoselect.vllm_target import target_version
# Deployment, WorkloadSpec, Z, REL_FLOOR, ... are also re-exported for the selector's callers.
from autoselect.workload import (
    DEFAULT_CONCURRENCY,
    DEFAULT_MAX_NUM_BATCHED_TOKENS,
    WORKLOAD_TABLE,
    BadDeployment,
    BadWorkloadOption,
    Deployment,
    NoAll2All,
    UnknownWorkload,
    WorkloadSpec,
    check_deployment_flags,
    check_workload_kind,
    resolve_deployment,
    workload_from_kind,
    workload_from_tokens,
)
from db import default_path
from db.queries import connect_readonly, host_classes, newest_host, results_for
from db.tuned import best_tuned

#: Version of the JSON ``recommend --format json`` prints; bump on incompatible changes.
SCHEMA_VERSION = 1

class NoLegalBackend(UserError):
    "No all2all backend is legal for this model, deployment and vLLM version."


class BadWorkspaceAllowance(UserError):
    "The --max-workspace-gib allowance is not a positive number."


#: Extra relative band of an estimated (not measured) latency, on top of the model's residuals.
ESTIMATE_FLOOR = 0.03
#: Refuse to extrapolate beyond this factor outside the measured token range.
EXTRAPOLATION_LIMIT = 4.0
#: How many measured points, nearest in log-tokens, the local latency fit uses.
FIT_POINTS = 4


# --------------------------------------------------------------------------------------
# Latency model: latency = a + bytes / bandwidth
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LatencyFit:
    """``latency_us = a_us + bytes * us_per_byte``, fitted on ``n`` points.

    ``rel_rms`` is the root-mean-square relative residual of the fit on its own points.
    """

    a_us: float
    us_per_byte: float
    n: int
    rel_rms: float

    @property
    def bandwidth_gbps(self) -> float | None:
        """The fitted bandwidth in GB/s (bytes / ns), None when the fit is flat."""
        return 1e-3 / self.us_per_byte if self.us_per_byte > 0 else None

    def predict(self, nbytes: float) -> float:
        """Expected latency in microseconds for ``nbytes`` bytes per rank."""
        return self.a_us + nbytes * self.us_per_byte


def fit_latency(points: Sequence[tuple[float, float]]) -> LatencyFit:
    """Fit ``latency = a + bytes * b`` with ``a, b >= 0`` to ``(bytes, latency_us)`` points.

    Least squares on relative errors (each residual divided by its latency, i.e. weights
    ``1 / latency^2``), so a 10 µs point counts as much as a 10 ms one. Non-negativity is
    enforced exactly: the unconstrained optimum is used when it is feasible, else the better
    of the two one-parameter fits on the boundary (``a = 0`` or ``b = 0``). Pure Python.
    """
    if not points:
        raise ValueError("fit_latency needs at least one point")
    xs = [float(x) for x, _ in points]
    ys = [float(y) for _, y in points]
    ws = [1.0 / (y * y) if y > 0 else 1.0 for y in ys]

    def sse(a: float, b: float) -> float:
        return sum(w * (y - a - b * x) ** 2 for x, y, w in zip(xs, ys, ws))

    sw = sum(ws)
    swx = sum(w * x for w, x in zip(ws, xs))
    swy = sum(w * y for w, y in zip(ws, ys))
    swxx = sum(w * x * x for w, x in zip(ws, xs))
    swxy = sum(w * x * y for w, x, y in zip(ws, xs, ys))
    det = sw * swxx - swx * swx
    options = []
    if det > 1e-12 * max(sw * swxx, 1e-300):
        a = (swxx * swy - swx * swxy) / det
        b = (sw * swxy - swx * swy) / det
        if a >= 0 and b >= 0:
            options.append((a, b))
    if not options:
        options.append((swy / sw, 0.0))  # b = 0: weighted mean
        if swxx > 0:
            options.append((0.0, max(swxy / swxx, 0.0)))  # a = 0: through the origin
    a, b = min(options, key=lambda ab: sse(*ab))
    rel = [(y - a - b * x) / y for x, y in zip(xs, ys) if y > 0]
    rel_rms = math.sqrt(sum(r * r for r in rel) / len(rel)) if rel else 0.0
    return LatencyFit(a_us=a, us_per_byte=b, n=len(xs), rel_rms=rel_rms)


@dataclass(frozen=True)
class Estimate:
    """The expected latency of one backend at one token count, with its band and origin.

    ``source``: ``measured``, ``interpolated`` (inside the measured token range),
    ``extrapolated`` (outside, within :data:`EXTRAPOLATION_LIMIT`) or ``missing``.
    """

    tokens_per_rank: int
    latency_us: float | None
    halfwidth_us: float | None
    source: str
    result_ids: tuple[int, ...] = ()
    note: str | None = None

    @property
    def estimated(self) -> bool:
        """True for interpolated and extrapolated values."""
        return self.source in ("interpolated", "extrapolated")


@dataclass(frozen=True)
class MeasuredPoint:
    """One chosen measurement of a backend: tokens, median, relative band, result id."""

    tokens_per_rank: int
    latency_us: float
    rel_halfwidth: float
    result_id: int | None = None


def estimate_latency(
    points: Sequence[MeasuredPoint], tokens: int, bytes_per_token: int
) -> Estimate:
    """The expected latency at ``tokens`` per rank from one backend's measured points.

    A measured token count is returned as measured. Otherwise the latency model is fitted on
    the :data:`FIT_POINTS` measured points nearest in log-tokens; the band is the widest band
    of those points plus ``max(Z * rel_rms, ESTIMATE_FLOOR)``. Beyond
    :data:`EXTRAPOLATION_LIMIT` times the measured range the estimate is refused (``missing``).
    """
    by_tokens = {p.tokens_per_rank: p for p in points}
    if tokens in by_tokens:
        p = by_tokens[tokens]
        ids = (p.result_id,) if p.result_id is not None else ()
        return Estimate(tokens, p.latency_us, p.latency_us * p.rel_halfwidth, "measured", ids)
    if not points:
        return Estimate(tokens, None, None, "missing", note="no measurement")
    lo = min(by_tokens)
    hi = max(by_tokens)
    if tokens > hi * EXTRAPOLATION_LIMIT or tokens * EXTRAPOLATION_LIMIT < lo:
        return Estimate(
            tokens,
            None,
            None,
            "missing",
            note=f"refused: {tokens} tokens/rank is more than {EXTRAPOLATION_LIMIT:g}x outside "
            f"the measured range {lo}..{hi}",
        )
    nearest = sorted(points, key=lambda p: (abs(math.log(p.tokens_per_rank / tokens)), p.tokens_per_rank))
    used = nearest[:FIT_POINTS]
    fit = fit_latency([(p.tokens_per_rank * bytes_per_token, p.latency_us) for p in used])
    latency = fit.predict(tokens * bytes_per_token)
    rel = max(p.rel_halfwidth for p in used) + max(Z * fit.rel_rms, ESTIMATE_FLOOR)
    source = "interpolated" if lo < tokens < hi else "extrapolated"
    bw = fit.bandwidth_gbps
    note = (
        f"a={fit.a_us:.3g}us"
        + (f" + bytes/{bw:.3g}GB/s" if bw else "")
        + f" fitted on {fit.n} points ({', '.join(str(p.tokens_per_rank) for p in sorted(used, key=lambda p: p.tokens_per_rank))} tokens)"
    )
    ids = tuple(p.result_id for p in used if p.result_id is not None)
    return Estimate(tokens, latency, latency * rel, source, ids, note)


# --------------------------------------------------------------------------------------
# The recommendation
# --------------------------------------------------------------------------------------

#: Confidence levels, best first.
CONFIDENCE_LEVELS = ("high", "medium", "low", "none")

#: Each rule caps the confidence when it applies; the answer's confidence is the lowest cap
#: of all rules that apply (``high`` when none does). "Decisive" latencies are those of the
#: pick, the default and the best other candidate.
CONFIDENCE_CAPS: tuple[tuple[str, str, str], ...] = (
    ("no_data", "none", "no measurement of any legal backend for this host class, shape and world size"),
    ("default_unmeasured", "low", "vLLM's default has no data for every bucket of this workload, so nothing could be compared with it"),
    ("unmeasured_candidates", "low", "some legal backends have no data for this workload"),
    ("extrapolated", "low", "a decisive latency is extrapolated beyond the measured token range"),
    ("stale", "low", "some decisive measurements were taken under other vllm / flashinfer / driver versions"),
    ("interpolated", "medium", "some decisive latencies are estimated between measured token counts"),
    ("close_call", "medium", "the pick ties with another backend that also beats the default"),
)

#: Result statuses that disqualify a backend for the whole shape.
DISQUALIFYING = ("incorrect", "error")
#: Version keys compared between a measurement and the target for the staleness warning.
STALENESS_KEYS = ("vllm", "flashinfer", "driver")


@dataclass
class Candidate:
    """A legal backend with its expected latency per bucket and verdict against the default.

    ``status``: ``pick``, ``default`` (the default, not picked), ``faster`` (beats the
    default but is not the pick), ``tie`` (within the noise of the default), ``slower``,
    ``incomplete`` (some bucket has no value) or ``no data``.
    """

    backend: str
    status: str
    weighted_us: float | None
    halfwidth_us: float | None
    buckets: list[Estimate]
    warnings: list[str] = field(default_factory=list)
    fit: LatencyFit | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON form (``buckets`` as a list of dicts, the fit as a/bandwidth)."""
        return {
            "backend": self.backend,
            "status": self.status,
            "weighted_us": _round(self.weighted_us),
            "halfwidth_us": _round(self.halfwidth_us),
            "buckets": [
                {
                    "tokens_per_rank": e.tokens_per_rank,
                    "latency_us": _round(e.latency_us),
                    "halfwidth_us": _round(e.halfwidth_us),
                    "source": e.source,
                    "result_ids": list(e.result_ids),
                    "note": e.note,
                }
                for e in self.buckets
            ],
            "fit": None
            if self.fit is None
            else {
                "a_us": _round(self.fit.a_us),
                "bandwidth_gbps": _round(self.fit.bandwidth_gbps),
                "points": self.fit.n,
                "rel_rms": _round(self.fit.rel_rms, 4),
            },
            "warnings": list(self.warnings),
        }


@dataclass
class Rejection:
    """A backend that is not a candidate: ``kind`` ``illegal`` (rules), ``disqualified``
    (an incorrect / error result for this shape) or ``unavailable`` (every row says so)."""

    backend: str
    kind: str
    reasons: list[str]

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return asdict(self)


@dataclass
class Recommendation:
    """The answer: the backend, its ``vllm serve`` flags, the evidence and the confidence.

    ``knobs`` is the hook for tuned settings (issue 6): ``{"env": {...}, "flags": [...]}``
    found for the pick; its env vars are merged into ``env`` and its flags into ``vllm_args``.
    """

    model: str
    profile: dict[str, Any]
    deployment: Deployment
    gpu_arch: str
    dispatch_dtype: str
    vllm_version: str
    workload: WorkloadSpec
    backend: str
    decision: str
    vllm_args: list[str]
    command: str
    env: dict[str, str]
    knobs: dict[str, Any]
    confidence: str
    confidence_reasons: list[str]
    candidates: list[Candidate]
    rejected: list[Rejection]
    warnings: list[str]
    data_used: dict[str, Any]
    bench_command: str | None
    #: where vllm_version came from: "--vllm-version", "vllm at AUTOSELECT_VLLM_PYTHON",
    #: "installed vllm" or "newest known" (as check's; autoselect.vllm_target.target_version)
    vllm_version_source: str = ""

    @property
    def estimated(self) -> list[dict[str, Any]]:
        """Every estimated (not measured) latency among the candidates."""
        return [
            {"backend": c.backend, "tokens_per_rank": e.tokens_per_rank, "source": e.source, "note": e.note}
            for c in self.candidates
            for e in c.buckets
            if e.estimated
        ]

    def to_dict(self) -> dict[str, Any]:
        """The stable JSON document of ``recommend --format json`` (README, "recommend JSON")."""
        return {
            "schema_version": SCHEMA_VERSION,
            "model": self.model,
            "profile": self.profile,
            "deployment": self.deployment.to_dict(),
            "gpu_arch": self.gpu_arch,
            "dispatch_dtype": self.dispatch_dtype,
            "vllm_version": self.vllm_version,
            "vllm_version_source": self.vllm_version_source,
            "workload": self.workload.to_dict(),
            "backend": self.backend,
            "decision": self.decision,
            "vllm_args": list(self.vllm_args),
            "command": self.command,
            "env": dict(self.env),
            "knobs": dict(self.knobs),
            "confidence": self.confidence,
            "confidence_reasons": list(self.confidence_reasons),
            "candidates": [c.to_dict() for c in self.candidates],
            "rejected": [r.to_dict() for r in self.rejected],
            "estimated": self.estimated,
            "warnings": list(self.warnings),
            "data_used": self.data_used,
            "bench_command": self.bench_command,
        }


def _round(x: float | None, digits: int = 3) -> float | None:
    return None if x is None else round(x, digits)


def _when(row: Any) -> str:
    return str(getattr(row, "created_at", None) or getattr(row, "run_started_at", None) or "")


def _stale_keys(row: Any, target_versions: dict[str, str | None]) -> list[str]:
    versions = getattr(row, "versions", None) or {}
    return [
        k
        for k in STALENESS_KEYS
        if target_versions.get(k) and versions.get(k) and versions[k] != target_versions[k]
    ]


def _choose_rows(rows: list[Any], target_versions: dict[str, str | None]) -> dict[int, Any]:
    """The row used per token count: up-to-date rows before stale ones, then the newest.

    Hot path (every stored run of the shape passes here): plain loops, no helper calls.
    """
    targets = [(k, v) for k, v in target_versions.items() if v and k in STALENESS_KEYS]
    best: dict[int, Any] = {}
    for row in rows:
        versions = row.versions or {}
        fresh = True
        for k, v in targets:
            have = versions.get(k)
            if have and have != v:
                fresh = False
                break
        key = (fresh, row.created_at or getattr(row, "run_started_at", None) or "", getattr(row, "id", 0) or 0)
        current = best.get(row.tokens_per_rank)
        if current is None or key > current[0]:
            best[row.tokens_per_rank] = (key, row)
    return {t: row for t, (_, row) in best.items()}


def _run_to_run_spread(rows: list[Any], chosen: dict[int, Any], target_versions: dict[str, str | None]) -> dict[int, float]:
    """Per token count measured by several runs (as fresh as the chosen row): the relative
    half-range of their medians, ``(max - min) / 2 / chosen``. It widens the chosen point's
    band when repeated runs disagree more than one run's own noise says."""
    by_tokens: dict[int, list] = {}  # tokens -> [rows, lowest median, highest median]
    for row in rows:
        best = chosen.get(row.tokens_per_rank)
        if best is not None and bool(_stale_keys(row, target_versions)) == bool(_stale_keys(best, target_versions)):
            # a summarized row (db.queries.results_for(summarize=...)) stands for its whole group
            lo = getattr(row, "group_p50_min", None)
            hi = getattr(row, "group_p50_max", None)
            if lo is None or hi is None:
                lo = hi = row.latency_us_p50
            acc = by_tokens.get(row.tokens_per_rank)
            if acc is None:
                by_tokens[row.tokens_per_rank] = [_count(row), lo, hi]
            else:
                acc[0] += _count(row)
                acc[1] = min(acc[1], lo)
                acc[2] = max(acc[2], hi)
    return {
        t: (hi - lo) / 2 / chosen[t].latency_us_p50
        for t, (n, lo, hi) in by_tokens.items()
        if n > 1 and chosen[t].latency_us_p50
    }


def _count(row: Any) -> int:
    """How many stored results ``row`` stands for (a summarized row: its group; else 1)."""
    return getattr(row, "group_count", None) or 1


def _weighted(estimates: list[Estimate], workload: WorkloadSpec) -> tuple[float | None, float | None]:
    if any(e.latency_us is None for e in estimates):
        return None, None
    weights = [w for _, w in workload.buckets]
    latency = sum(w * e.latency_us for w, e in zip(weights, estimates))
    halfwidth = sum(w * e.halfwidth_us for w, e in zip(weights, estimates))
    return latency, halfwidth


def settle_command(
    model: str, deployment: Deployment, tokens: Iterable[int], backends: Iterable[str], device: str = "cuda"
) -> str:
    """The ``autoselect bench`` command that measures ``backends`` at ``tokens`` per rank."""
    argv = [
        "autoselect",
        "bench",
        "--model",
        model,
        "--world-size",
        str(deployment.world_size),
        "--tokens",
        ",".join(str(t) for t in sorted(set(tokens))),
    ]
    backends = sorted(set(backends))
    if backends:
        argv += ["--backends", ",".join(backends)]
    argv += ["--device", device]
    return shlex.join(argv)


def recommend(
    profile: Any,
    *,
    conn: Any,
    deployment: Deployment,
    host_class: str | None = None,
    host: Any = None,
    gpu_arch: str | None = None,
    vllm_version: str | None = None,
    workload: WorkloadSpec | None = None,
    max_num_batched_tokens: int | None = None,
    max_workspace_gib: float | None = None,
    knobs: dict[str, Any] | None = None,
    rows: list[Any] | None = None,
    vllm_version_source: str | None = None,
) -> Recommendation:
    """The fastest legal backend for ``profile`` on the host (class), with its evidence.

    :param profile: an :class:`autoselect.model.MoeProfile`.
    :param conn: a read-only sqlite3 connection to the results store, or None (no data).
    :param deployment: dp x tp; the all2all spans ``deployment.world_size`` ranks.
    :param host_class: the host class whose results count (default ``host.host_class``).
    :param host: the target :class:`autoselect.hardware.HostFingerprint` (hardware rules and
        current driver / flashinfer versions), or None.
    :param gpu_arch: the target GPU arch (default ``host.gpu_arch``).
    :param vllm_version: the vLLM version to serve with (default: resolved as ``check`` does,
        :func:`autoselect.vllm_target.target_version`).
    :param workload: token buckets (default ``mixed``).
    :param max_num_batched_tokens: the per-engine token budget the user set, if any.
    :param max_workspace_gib: the one-sided workspace allowance (default
        :data:`autoselect.vllm_flags.DEFAULT_MAX_WORKSPACE_GIB`).
    :param knobs: tuned knobs for the pick, ``{"env": {...}, "flags": [...]}``; default: the
        newest ``autoselect tune`` configuration with a measured gain in ``conn`` (``{}`` if none).
    :param rows: the measurements to use instead of querying ``conn`` (leave-one-out studies).
    :param vllm_version_source: where ``vllm_version`` came from (JSON ``vllm_version_source``);
        default ``"--vllm-version"`` when a version is given, else the resolution's.
    """
    if host_class is None and host is not None:
        host_class = getattr(host, "host_class", None)
    gpu_arch = gpu_arch or (getattr(host, "gpu_arch", None) if host is not None else None)
    if not gpu_arch:
        raise GpuArchRequired(
            "the target host has no GPU architecture (a CPU host?); pass --gpu-arch sm90|sm100 "
            "or --host-class of a GPU host in the database"
        )
    gpu_arch = normalize_arch(gpu_arch)
    target = resolve_target(profile, world_size=deployment.world_size, gpu_arch=gpu_arch, host=host,
                            vllm_version=vllm_version, vllm_version_source=vllm_version_source,
                            max_tokens_per_rank=max_num_batched_tokens)
    vllm_version, vllm_version_source = target.vllm_version, target.vllm_version_source
    workload = workload or workload_from_kind(
        "mixed", deployment, max_num_batched_tokens=max_num_batched_tokens
    )
    world_size = deployment.world_size
    dtype = profile.activation_dtype(gpu_arch)
    bytes_per_token = dispatch_bytes_per_token(dtype, profile.hidden_size, profile.top_k) + (
        combine_bytes_per_token(profile.hidden_size)
    )
    target_versions = {
        "vllm": vllm_version,
        "flashinfer": (getattr(host, "versions", None) or {}).get("flashinfer") if host else None,
        "driver": getattr(host, "driver_version", None) if host else None,
    }
    if rows is None:
        rows = []
        if conn is not None and host_class is not None:
            rows = results_for(
                conn,
                hidden=profile.hidden_size,
                top_k=profile.top_k,
                experts=profile.num_experts,
                dispatch_dtype=dtype,
                world_size=world_size,
                host_class=host_class,
                kind="micro",
                summarize=STALENESS_KEYS,  # one row per point, status and versions: see results_for
            )

    warnings: list[str] = []
    candidates: list[Candidate] = []
    rejected: list[Rejection] = []
    used_rows: dict[int, Any] = {}
    unmeasured: list[str] = []
    missing_buckets: dict[str, list[int]] = {}
    by_backend: dict[str, list[Any]] = {}
    for r in rows:
        by_backend.setdefault(r.backend, []).append(r)
    for backend, verdict in candidate_backends(target).items():
        if not verdict.ok:
            rejected.append(Rejection(backend, "illegal", list(verdict.reasons)))
            continue
        # Rows measured with tuned knobs (``autoselect tune``) are not the untuned backend's
        # evidence; their gain reaches the answer through db.tuned (see ``knobs`` below).
        mine = [r for r in by_backend.get(backend, ()) if not getattr(r, "illegal", False)
                and not getattr(r, "knobs", None)]
        bad = sorted((r for r in mine if r.status in DISQUALIFYING), key=_when)
        if bad:
            r, n_bad = bad[-1], sum(map(_count, bad))
            rejected.append(
                Rejection(
                    backend,
                    "disqualified",
                    [
                        f"{r.status} result at {r.tokens_per_rank} tokens/rank "
                        f"(result {getattr(r, 'id', '?')}, run {getattr(r, 'run_id', '?')}, "
                        f"{_when(r) or 'undated'}): {r.error or 'no detail recorded'}"
                        + (f"; {n_bad - 1} more such result(s)" if n_bad > 1 else "")
                    ],
                )
            )
            continue
        ok_rows = [r for r in mine if r.status == "ok" and r.latency_us_p50 is not None]
        if not ok_rows and mine and all(r.status == "unavailable" for r in mine):
            reason = sorted(mine, key=_when)[-1].error or "no reason recorded"
            rejected.append(Rejection(backend, "unavailable", [f"unavailable on this host class: {reason}"]))
            continue
        cand_warnings = list(verdict.warnings)
        timeouts = sorted({r.tokens_per_rank for r in mine if r.status == "timeout"})
        if timeouts:
            cand_warnings.append(f"timed out at {', '.join(map(str, timeouts))} tokens/rank")
        chosen = _choose_rows(ok_rows, target_versions)
        spread = _run_to_run_spread(ok_rows, chosen, target_versions)
        points = [
            MeasuredPoint(
                t, r.latency_us_p50, max(point_rel_halfwidth(r), spread.get(t, 0.0)), getattr(r, "id", None)
            )
            for t, r in sorted(chosen.items())
        ]
        estimates = [estimate_latency(points, t, bytes_per_token) for t in workload.tokens]
        fit = (
            fit_latency([(p.tokens_per_rank * bytes_per_token, p.latency_us) for p in points])
            if points
            else None
        )
        latency, halfwidth = _weighted(estimates, workload)
        if not points:
            status = "no data"
            unmeasured.append(backend)
        elif latency is None:
            status = "incomplete"
            missing_buckets[backend] = [e.tokens_per_rank for e in estimates if e.latency_us is None]
        else:
            status = "measured"
        for e in estimates:
            for rid in e.result_ids:
                for r in chosen.values():
                    if getattr(r, "id", None) == rid:
                        used_rows[rid] = r
        candidates.append(Candidate(backend, status, latency, halfwidth, estimates, cand_warnings, fit))

    if not candidates:
        if not rejected:
            raise NoLegalBackend(
                f"vLLM {vllm_version} has no --all2all-backend flag (it arrived in {rules.FLAG_SINCE}); "
                "pass a newer --vllm-version"
            )
        raise NoLegalBackend(
            f"no all2all backend is legal for {profile.model} at EP {world_size} on vLLM {vllm_version}: "
            + "; ".join(f"{r.backend}: {'; '.join(r.reasons)}" for r in rejected)
        )
    by_name = {c.backend: c for c in candidates}
    default = by_name.get(rules.DEFAULT_BACKEND)
    complete = [c for c in candidates if c.weighted_us is not None]
    applies: set[str] = set()
    runner_up: Candidate | None = None

    if len(candidates) == 1:
        pick = candidates[0]
        decision = "the only legal backend: nothing to compare"
        if pick.status == "measured":
            pick.status = "pick"
    elif default is not None and default.weighted_us is not None:
        for c in complete:
            if c is not default:
                c.status = band_compare(c.weighted_us, c.halfwidth_us, default.weighted_us, default.halfwidth_us)
        winners = sorted((c for c in complete if c.status == "faster"), key=lambda c: c.weighted_us)
        if winners:
            pick = winners[0]
            decision = "faster than the default beyond the noise"
            close = [
                c
                for c in winners[1:]
                if band_compare(pick.weighted_us, pick.halfwidth_us, c.weighted_us, c.halfwidth_us) == "tie"
            ]
            if close:
                applies.add("close_call")
                warnings.append(
                    f"{pick.backend} and {', '.join(c.backend for c in close)} are tied within the noise; "
                    f"{pick.backend} has the lowest expected latency"
                )
            runner_up = default
        else:
            pick = default
            ties = [c for c in complete if c.status == "tie"]
            decision = (
                f"tie within the noise with {', '.join(c.backend for c in ties)}: vLLM's default stays"
                if ties
                else "the default is fastest"
            )
            others = sorted((c for c in complete if c is not default), key=lambda c: c.weighted_us)
            runner_up = others[0] if others else None
        default.status = "default" if pick is not default else "pick"
        pick.status = "pick"
    else:
        pick = default if default is not None else candidates[0]
        decision = "no comparison possible: vLLM's default"
        applies.add("default_unmeasured")
        if all(c.fit is None for c in candidates):
            applies.add("no_data")
    if unmeasured and len(candidates) > 1:
        applies.add("unmeasured_candidates")
    if missing_buckets and len(candidates) > 1:
        applies.add("unmeasured_candidates")

    # Belt and braces: the one-sided nvfp4 rule (and every other) is the rules table's call.
    final = judge(target, pick.backend)
    assert final.ok, f"selector picked an illegal backend {pick.backend}: {final.reasons}"

    decisive = [c for c in (pick, default, runner_up) if c is not None and c.weighted_us is not None]
    for c in decisive:
        for e in c.buckets:
            if e.source == "extrapolated":
                applies.add("extrapolated")
            elif e.source == "interpolated":
                applies.add("interpolated")
    decisive_rows = [
        used_rows[rid] for c in decisive for e in c.buckets for rid in e.result_ids if rid in used_rows
    ]
    stale: dict[str, set[str]] = {}
    for r in decisive_rows:
        for k in _stale_keys(r, target_versions):
            stale.setdefault(k, set()).add(r.versions[k])
    if any(getattr(r, "device", "cuda") == "cpu" for r in decisive_rows):
        warnings.append(
            "these measurements were taken on CPU (gloo): they exercise the flow, not NVLink speed; "
            "benchmark on the GPU host before serving"
        )
    if stale:
        applies.add("stale")
        for k, versions in sorted(stale.items()):
            warnings.append(
                f"stale data: measured with {k} {', '.join(sorted(versions))}, target is "
                f"{k} {target_versions[k]}; re-run autoselect bench to refresh"
            )
    for c in candidates:
        for e in c.buckets:
            if e.source == "extrapolated":
                warnings.append(f"{c.backend} at {e.tokens_per_rank} tokens/rank is extrapolated: {e.note}")
            elif e.source == "missing" and c.status != "no data":
                warnings.append(f"{c.backend} at {e.tokens_per_rank} tokens/rank: {e.note}")

    if "no_data" in applies:
        applies = {"no_data"}  # the one reason that matters
    confidence = "high"
    reasons = []
    for name, cap, text in CONFIDENCE_CAPS:
        if name in applies:
            reasons.append(text)
            if CONFIDENCE_LEVELS.index(cap) > CONFIDENCE_LEVELS.index(confidence):
                confidence = cap

    need = set(unmeasured) | set(missing_buckets)
    if default is not None and default.weighted_us is None:
        need.add(default.backend)
    need_tokens = set()
    for b in need:
        need_tokens |= set(missing_buckets.get(b, workload.tokens))
    settle = (
        settle_command(profile.model, deployment, need_tokens or workload.tokens, need)
        if need and len(candidates) > 1
        else None
    )

    knobs = dict(knobs or {})
    if not knobs and conn is not None and host_class is not None:
        tuned = best_tuned(conn, host_class=host_class, hidden=profile.hidden_size, top_k=profile.top_k,
                           experts=profile.num_experts, dispatch_dtype=dtype, world_size=world_size,
                           backend=pick.backend)
        if tuned is not None:
            knobs = {"env": tuned.env, "flags": tuned.flags, "settings": tuned.knobs, "gain": tuned.gain,
                     "gain_halfwidth": tuned.gain_halfwidth, "tuned_at": tuned.created_at}
    serve_mnbt, flag_notes = vllm_flags.workspace_max_num_batched_tokens(
        pick.backend,
        hidden=profile.hidden_size,
        top_k=profile.top_k,
        dispatch_dtype=dtype,
        world_size=world_size,
        max_num_batched_tokens=max_num_batched_tokens,
        max_workspace_gib=max_workspace_gib,
        gpu_memory_mib=_gpu_memory_mib(host),
    )
    warnings.extend(flag_notes)
    extra = list(knobs.get("flags", []))
    vllm_args = vllm_flags.serve_flags(
        pick.backend, deployment, vllm_version, max_num_batched_tokens=serve_mnbt, extra=extra
    )
    env = {"AUTOSELECT_ALL2ALL_BACKEND": pick.backend, "AUTOSELECT_VLLM_ARGS": shlex.join(vllm_args)}
    env.update({k: str(v) for k, v in (knobs.get("env") or {}).items()})
    knob_env = [f"{k}={v}" for k, v in (knobs.get("env") or {}).items()]
    command = shlex.join(knob_env + ["vllm", "serve", profile.model] + vllm_args)
    warnings = list(dict.fromkeys(list(final.warnings) + warnings))

    return Recommendation(
        model=profile.model,
        profile={
            "hidden_size": profile.hidden_size,
            "num_experts": profile.num_experts,
            "top_k": profile.top_k,
            "weight_quant": profile.weight_quant,
        },
        deployment=deployment,
        gpu_arch=gpu_arch,
        dispatch_dtype=dtype,
        vllm_version=vllm_version,
        vllm_version_source=vllm_version_source,
        workload=workload,
        backend=pick.backend,
        decision=decision,
        vllm_args=vllm_args,
        command=command,
        env=env,
        knobs=knobs,
        confidence=confidence,
        confidence_reasons=reasons,
        candidates=candidates,
        rejected=rejected,
        warnings=warnings,
        data_used=_data_used(host_class, host, gpu_arch, used_rows, target_versions, stale, sum(map(_count, rows))),
        bench_command=settle,
    )


def _gpu_memory_mib(host: Any) -> int | None:
    gpus = getattr(host, "gpus", None) or []
    sizes = [getattr(g, "memory_total_mib", None) for g in gpus]
    sizes = [s for s in sizes if s]
    return min(sizes) if sizes else None


def _data_used(host_class, host, gpu_arch, used_rows, target_versions, stale, considered) -> dict[str, Any]:
    rows = list(used_rows.values())
    runs: dict[Any, dict[str, Any]] = {}
    for r in rows:
        run = runs.setdefault(
            getattr(r, "run_id", None),
            {
                "run_id": getattr(r, "run_id", None),
                "hostname": getattr(r, "hostname", None),
                "started_at": getattr(r, "run_started_at", None),
                "versions": dict(getattr(r, "versions", None) or {}),
                "results": 0,
            },
        )
        run["results"] += 1
    dates = sorted(_when(r) for r in rows if _when(r))
    gpu_names = sorted({getattr(r, "gpu_name", None) for r in rows} - {None})
    return {
        "host_class": host_class,
        "gpu_name": gpu_names[0] if gpu_names else (getattr(host, "gpu_name", None) or getattr(host, "cpu_model", None)),
        "gpu_arch": gpu_arch,
        "machines": sorted({getattr(r, "hostname", None) for r in rows} - {None}),
        "results": len(rows),
        "results_considered": considered,
        "runs": sorted(runs.values(), key=lambda run: (run["started_at"] or "", run["run_id"] or 0)),
        "oldest": dates[0] if dates else None,
        "newest": dates[-1] if dates else None,
        "target_versions": {k: v for k, v in target_versions.items() if v},
        "stale_versions": {k: sorted(v) for k, v in stale.items()},
    }


def target_vllm_version(explicit: str | None = None) -> str:
    """The vLLM version to spell flags for, resolved as ``check`` resolves it (the version alone).

    ``--vllm-version``, else ``$AUTOSELECT_VLLM_PYTHON``'s vllm metadata, else this environment's,
    else the newest known: :func:`autoselect.vllm_target.target_version`, which also says where
    the version came from. vllm itself is never imported.
    """
    return target_version(explicit)[0]


def recommend_for(
    model: str,
    *,
    db_path: str | os.PathLike | None = None,
    dp: int | None = None,
    tp: int | None = None,
    world_size: int | None = None,
    host_class: str | None = None,
    gpu_arch: str | None = None,
    vllm_version: str | None = None,
    workload: str | None = None,
    tokens: str | None = None,
    concurrency: int | None = None,
    max_num_batched_tokens: int | None = None,
    max_workspace_gib: float | None = None,
) -> Recommendation:
    """``autoselect recommend`` from its flags: validate, load, read the store, decide.

    Every input is checked before anything is read. The target host is this machine
    (:func:`autoselect.hardware.fingerprint`) unless ``host_class`` names a class present in
    the database (its newest machine then stands for it). A missing database file means no
    measurements (confidence ``none``), not an error, unless ``host_class`` needs it.
    """
    if workload is not None and tokens is not None:
        raise BadWorkloadOption("pass either --workload or --tokens, not both")
    explicit = workload_from_tokens(tokens) if tokens is not None else None
    kind = workload or "mixed"
    check_workload_kind(kind)
    if max_workspace_gib is not None and not (max_workspace_gib > 0 and math.isfinite(max_workspace_gib)):
        raise BadWorkspaceAllowance(f"--max-workspace-gib {max_workspace_gib} must be a positive number of GiB")
    for name, value in (("--concurrency", concurrency), ("--max-num-batched-tokens", max_num_batched_tokens)):
        if value is not None and value < 1:
            raise BadWorkloadOption(f"{name} {value} must be at least 1")
    check_deployment_flags(dp, tp, world_size)
    if gpu_arch is not None:
        gpu_arch = normalize_arch(gpu_arch)

    version_problems: list[str] = []  # an AUTOSELECT_VLLM_PYTHON that could not be read: a warning
    version, version_source = target_version(vllm_version, problems=version_problems)
    profile = load_profile(model)
    path = default_path() if db_path is None else db_path
    conn = None
    if os.path.exists(path):
        conn = connect_readonly(path)
    try:
        asked_class = host_class is not None
        if asked_class:
            known = [h["host_class"] for h in host_classes(conn)] if conn is not None else []
            if host_class not in known:
                raise UnknownHostClass(
                    f"host class {host_class!r} is not in {path}; known: {', '.join(known) or 'none'} "
                    "(`autoselect db info` lists them)"
                )
            host = newest_host(conn, host_class)
        else:
            host = fingerprint()
            host_class = host.host_class
        deployment = resolve_deployment(dp, tp, world_size, getattr(host, "gpu_count", None))
        budget = max_num_batched_tokens or vllm_flags.vllm_default_max_num_batched_tokens(
            rules.DEFAULT_BACKEND, _gpu_memory_mib(host)
        )
        spec = explicit or workload_from_kind(
            kind, deployment, concurrency=concurrency, max_num_batched_tokens=budget
        )
        rec = recommend(
            profile,
            conn=conn,
            deployment=deployment,
            host_class=host_class,
            host=host,
            gpu_arch=gpu_arch,
            vllm_version=version,
            vllm_version_source=version_source,
            workload=spec,
            max_num_batched_tokens=max_num_batched_tokens,
            max_workspace_gib=max_workspace_gib,
        )
        rec.warnings.extend(version_problems)
        if rec.bench_command and asked_class:
            rec.warnings.append(f"run the bench command on a machine of host class {host_class}")
        return rec
    finally:
        if conn is not None:
            conn.close()


# --------------------------------------------------------------------------------------
# Rendering (plain text; the CLI only prints these)
# --------------------------------------------------------------------------------------

_STATUS_WORDS = {
    "pick": "PICK",
    "default": "default",
    "faster": "faster",
    "tie": "tie",
    "slower": "slower",
    "incomplete": "incomplete",
    "no data": "no data",
    "measured": "measured",
}


def _fmt_us(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.1f}" if x < 1000 else f"{x:.0f}"


def _pm(x: float | None) -> str:
    return "" if x is None else "+-" + _fmt_us(x)


def _table(rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(cell.rjust(w) if i in right else cell.ljust(w) for i, (cell, w) in enumerate(zip(r, widths))).rstrip()
        for r in rows
    ]


def render_text(rec: Recommendation, *, explain: bool = False) -> str:
    """The human answer: the command line first, then candidates, rejections, warnings, data."""
    lines = [rec.command, ""]
    dep = rec.deployment
    lines.append(f"backend     {rec.backend}  ({rec.decision})")
    lines.append(
        f"confidence  {rec.confidence}"
        + (f": {'; '.join(rec.confidence_reasons)}" if rec.confidence_reasons else "")
    )
    lines.append(
        f"model       {rec.model}: hidden {rec.profile['hidden_size']}, {rec.profile['num_experts']} experts, "
        f"top-{rec.profile['top_k']}, {rec.dispatch_dtype} dispatch on {rec.gpu_arch}"
    )
    lines.append(
        f"deployment  dp {dep.dp} x tp {dep.tp} = EP {dep.world_size}, vLLM {rec.vllm_version}"
        + (f" ({rec.vllm_version_source})" if rec.vllm_version_source else "")
    )
    if rec.knobs:
        settings = [f"{k}={v}" for k, v in (rec.knobs.get("env") or {}).items()] + list(rec.knobs.get("flags") or [])
        gain = rec.knobs.get("gain")
        lines.append(
            f"tuned knobs {' '.join(settings) or '-'}"
            + (f"  (autoselect tune: {gain:.1%} faster" if gain is not None else "")
            + (f" +- {rec.knobs['gain_halfwidth']:.1%}" if gain is not None and rec.knobs.get("gain_halfwidth") is not None else "")
            + (")" if gain is not None else "")
        )
    lines.append(
        f"workload    {rec.workload.kind}: "
        + ", ".join(f"{t} tok/rank {w:.0%}" for t, w in rec.workload.buckets)
    )
    if rec.candidates:
        lines.append("")
        header = ["candidate", "verdict", "weighted us", "+-"] + [f"{t} tok" for t in rec.workload.tokens]
        rows = [header]
        for c in rec.candidates:
            cells = []
            for e in c.buckets:
                mark = {"interpolated": "~", "extrapolated": "~~"}.get(e.source, "")
                cells.append(mark + _fmt_us(e.latency_us))
            rows.append(
                [c.backend, _STATUS_WORDS.get(c.status, c.status), _fmt_us(c.weighted_us), _fmt_us(c.halfwidth_us)]
                + cells
            )
        lines += _table(rows, right={2, 3} | set(range(4, len(header))))
        if rec.estimated:
            lines.append("(~ interpolated, ~~ extrapolated with the fitted latency model; us = microseconds)")
    if rec.rejected:
        lines.append("")
        lines.append("rejected:")
        for r in rec.rejected:
            lines.append(f"  {r.backend} ({r.kind}): {'; '.join(r.reasons)}")
    if rec.warnings:
        lines.append("")
        lines.append("warnings:")
        lines += [f"  - {w}" for w in rec.warnings]
    d = rec.data_used
    lines.append("")
    if d["results"]:
        lines.append(
            f"data: host class {d['host_class']} ({d['gpu_name']}), {len(d['machines'])} machine(s) "
            f"({', '.join(d['machines'])}), {len(d['runs'])} run(s), {d['results']} results, "
            f"{(d['oldest'] or '?')[:10]} .. {(d['newest'] or '?')[:10]}"
        )
    else:
        lines.append(f"data: no measurements for host class {d['host_class']} and this shape")
    if rec.bench_command:
        lines.append(f"to settle it: {rec.bench_command}")
    if explain:
        lines += ["", render_explain(rec)]
    return "\n".join(lines)


def render_explain(rec: Recommendation) -> str:
    """The evidence per token bucket: every candidate's latency, band, origin and result ids."""
    lines = [
        "evidence per token bucket (latency +- band; a backend leaves the default only when its "
        "weighted band clears the default's):"
    ]
    for i, (tokens, weight) in enumerate(rec.workload.buckets):
        lines.append(f"{tokens} tokens/rank (weight {weight:.0%}):")
        rows = []
        for c in rec.candidates:
            e = c.buckets[i]
            origin = e.source
            if e.result_ids:
                origin += f" (result{'s' if len(e.result_ids) > 1 else ''} {', '.join(map(str, sorted(e.result_ids)))})"
            rows.append(["  " + c.backend, _fmt_us(e.latency_us), _pm(e.halfwidth_us), origin])
        if rows:
            lines += _table(rows, right={1, 2})
        for c in rec.candidates:
            note = c.buckets[i].note
            if note and c.buckets[i].source != "measured" and c.status != "no data":
                lines.append(f"    {c.backend}: {note}")
    lines.append("weighted over the workload:")
    rows = [
        ["  " + c.backend, _fmt_us(c.weighted_us), _pm(c.halfwidth_us), c.status]
        for c in rec.candidates
    ]
    if rows:
        lines += _table(rows, right={1, 2})
    fits = [c for c in rec.candidates if c.fit is not None]
    if fits:
        lines.append("latency model per backend (latency = a + bytes / bandwidth, all measured points):")
        for c in fits:
            bw = c.fit.bandwidth_gbps
            lines.append(
                f"  {c.backend}: a = {c.fit.a_us:.1f} us, bandwidth = "
                + (f"{bw:.1f} GB/s" if bw else "-")
                + f", {c.fit.n} points, rms residual {c.fit.rel_rms:.1%}"
            )
    return "\n".join(lines)


def render_env(rec: Recommendation) -> str:
    """Shell ``export`` lines for launch scripts (``eval "$(autoselect recommend ... --format env)"``)."""
    return "\n".join(f"export {k}={shlex.quote(v)}" for k, v in rec.env.items())


def render_args(rec: Recommendation) -> str:
    """Only the flags, shell-quoted, for ``vllm serve MODEL $(autoselect recommend ... --format args)``."""
    return shlex.join(rec.vllm_args)
