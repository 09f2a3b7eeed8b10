"""Reading the store and the selector into :class:`ReportData`: what every figure, the page and
the terminal chart draw.

``collect`` resolves the host class, reads the model's measurements of that class (stdlib
``sqlite3`` through :mod:`db.queries`), asks the selector for its recommendation and builds the
series and the fleet view. Nothing here writes to the database.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from autoselect.errors import GpuArchRequired, UnknownHostClass
from autoselect.model import load_profile, normalize_arch
from autoselect.report.errors import NothingToReport
from autoselect.report.nodes import FleetView, fleet_view
from autoselect.report.series import BackendSeries, build_series
from autoselect.selector import recommend
from autoselect.workload import BadDeployment, Deployment, UnknownWorkload, workload_from_kind, workload_from_tokens
from db.queries import connect_readonly, host_classes, newest_host, results_for


@dataclass
class BucketMark:
    """One workload bucket and the candidate that is fastest there (from the selector)."""

    tokens_per_rank: int
    weight: float
    backend: str | None  # None: no candidate has an estimate for this bucket
    latency_us: float | None


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

    def not_timed_lines(self) -> list[str]:
        """Why there is nothing to plot, in words: the shape, the host, each backend's state."""
        lines = [f"{self.model}: {self.shape_text}", f"on {self.host_text}", ""]
        if not self.series:
            lines.append("No measurement of this shape is stored.")
        for s in self.series:
            lines.append(s.label())
        lines += ["", f"Run: autoselect bench --model {self.model} --world-size {self.world_size}"]
        return lines


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
        world_size = _world_size(profile, hc, rows, world_size)
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

    series = _series(rows, rec)
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


def _world_size(profile, host_class: str, rows, world_size: int | None) -> int:
    """The EP size to draw: ``world_size`` when the class measured it, else the largest measured."""
    sizes = sorted({r.world_size for r in rows})
    if world_size is None:
        return sizes[-1]
    if world_size not in sizes:
        raise NothingToReport(
            f"no measurement of {profile.model} at --world-size {world_size} on host class {host_class} "
            f"(measured: {', '.join(map(str, sizes))}); pass one of those or run autoselect bench"
        )
    return world_size


def _series(rows, rec) -> list[BackendSeries]:
    """One series per backend, marked illegal / disqualified as the selector's rejections say."""
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
    return series
