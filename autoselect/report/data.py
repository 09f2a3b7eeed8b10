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

from autoselect.errors import GpuArchRequired
from autoselect.model import load_profile, normalize_arch
from autoselect.model.profile import shape_label
from autoselect.reference import ReferenceClass, get_class, is_reference_class, match_host
from autoselect.report.errors import GpuArchNotOfReference, NothingToReport
from autoselect.report.nodes import FleetView, fleet_view
from autoselect.report.reference_curves import ReferenceCurve, ReferenceView, reference_view
from autoselect.report.series import BackendSeries, build_series
from autoselect.selector import recommend, target_host
from autoselect.selector.confidence import CONFIDENCE_LEVELS
from autoselect.workload import BadDeployment, Deployment, UnknownWorkload, workload_from_tokens
from db import default_path
from db.queries import connect_readonly, host_classes, results_for


@dataclass
class BucketMark:
    """One workload bucket and the candidate that is fastest there (from the selector)."""

    tokens_per_rank: int
    weight: float
    backend: str | None  # None: no candidate has an estimate for this bucket
    latency_us: float | None
    evidence: str = "measured"  # the kind of number the latency is (the selector's evidence)
    estimated: bool = False  # interpolated / extrapolated by the selector, not read at this count


@dataclass
class ReportData:
    """Everything the figures and the page draw, read once from the store and the selector."""

    model: str
    hidden: int
    top_k: int
    experts: int
    activation_dtype: str
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
    reference: ReferenceView | None = None  # NVIDIA's published curves of this shape, when a system matches
    reference_note: str | None = None  # why there are none (no system matches, no reference wanted)
    workload_note: str | None = None  # which workload the recommendation is weighted for, and why that one

    @property
    def confidence(self) -> tuple[str | None, str | None]:
        """(the confidence the page shows, why it is lower than the answer's, or None).

        The answer's own, except that a pick with no weighted value (a bucket no candidate has a
        value for: ``incomplete``) is shown at most ``low``: the page never claims more than the
        numbers it draws support."""
        rec = self.recommendation or {}
        level = rec.get("confidence")
        pick = next((c for c in rec.get("candidates") or () if c.get("backend") == self.recommended), None)
        if level is None or pick is None or pick.get("weighted_us") is not None:
            return level, None
        capped = max(level, "low", key=CONFIDENCE_LEVELS.index)
        if capped == level:
            return level, None
        missing = [str(b["tokens_per_rank"]) for b in pick.get("buckets") or () if b.get("latency_us") is None]
        return capped, (f"the answer says {level}, but its pick has no value at {', '.join(missing) or 'some'} "
                        "tokens per rank, so no weighted latency")

    @property
    def reference_only(self) -> bool:
        """A report of a reference class (``--host-class ref-...``): no local measurement in it."""
        return is_reference_class(self.host_class)

    @property
    def shape_text(self) -> str:
        """One line naming the shape: hidden, top_k, experts, dispatch dtype, EP size."""
        return f"{shape_label(self.hidden, self.top_k, self.experts, self.activation_dtype)} dispatch, EP{self.world_size}"

    @property
    def host_text(self) -> str:
        """One line naming the host class the measurements come from."""
        if self.host_class is None:
            return "all hosts"
        if self.reference_only and self.reference is not None:
            ref = self.reference.ref_class
            return f"{self.world_size}×{ref.system.label} (reference class {ref.name}, published)"
        gpu = self.gpu_name or ("CPU" if self.device == "cpu" else "unknown GPU")
        return f"{gpu} (host class {self.host_class})"

    @property
    def timed_series(self) -> list[BackendSeries]:
        """The series with at least one timed point, in drawing order."""
        return [s for s in self.series if s.timed]

    @property
    def reference_curves(self) -> list[ReferenceCurve]:
        """The reference curves to draw (none without a matching reference system)."""
        return self.reference.curves if self.reference is not None else []

    def not_timed_lines(self) -> list[str]:
        """Why there is nothing to plot, in words: the shape, the host, each backend's state."""
        lines = [f"{self.model}: {self.shape_text}", f"on {self.host_text}", ""]
        if not self.series:
            lines.append("No measurement of this shape is stored.")
        for s in self.series:
            lines.append(s.label())
        lines += ["", f"Run: autoselect bench --model {self.model} --world-size {self.world_size}"]
        if self.reference is not None and self.reference.curves and not self.reference_only:
            lines.append(f"NVIDIA's published reference of this shape: autoselect report --model {self.model} "
                         f"--host-class {self.reference.ref_class.name}")
        lines += self.reference.absent if self.reference is not None else []
        return lines


#: ``--workload`` names the selector knows; anything starting with a digit is token counts.
WORKLOAD_KINDS = ("decode", "prefill", "mixed")


def _resolve_host_class(conn, path, profile, host_class: str | None, gpu_arch: str | None):
    """(host, gpu_arch, dispatch dtype, rows) of the host class the report draws.

    ``host_class`` is resolved by the selector's lookup (:func:`autoselect.selector.target_host`:
    the newest machine of the class stands for it; an unknown class is its error). Default: the
    class whose newest row of this shape is the most recent (a report is about stored data, not
    this machine). Raises :class:`NothingToReport` when no host class measured the shape.
    """
    names = [host_class] if host_class is not None else [c["host_class"] for c in host_classes(conn)]
    found = []
    no_arch = []
    for name in names:
        host = target_host(conn, path, name)
        arch = gpu_arch or host.gpu_arch
        if not arch:
            no_arch.append(name)
            continue
        arch = normalize_arch(arch)
        dtype = profile.activation_dtype(arch)
        rows = results_for(
            conn, hidden=profile.hidden_size, top_k=profile.top_k, experts=profile.num_experts,
            activation_dtype=dtype, host_class=name, kind="micro",
        )
        if rows:
            newest = max((r.created_at or r.run_started_at or "") for r in rows)
            found.append((newest, host, arch, dtype, rows))
    if not found:
        if no_arch and not gpu_arch:
            raise GpuArchRequired(
                f"host class {', '.join(no_arch)} has no GPU architecture (a CPU host); pass --gpu-arch "
                "sm90|sm100 to say which arch's activation dtype its measurements stand for"
            )
        where = f"host class {host_class}" if host_class else "any host class"
        raise NothingToReport(
            f"no measurement of {profile.model} (H{profile.hidden_size} top{profile.top_k} E{profile.num_experts}) "
            f"on {where}; run `autoselect bench --model {profile.model}` first"
        )
    _, host, arch, dtype, rows = max(found, key=lambda f: f[0])
    return host, arch, dtype, rows


def measured_workload(rows) -> tuple[str, str]:
    """(``--workload`` text, what the page says of it) when none was given: the token counts timed
    for the host class and shape, equally weighted, so every bucket the answer weighs was measured;
    with nothing timed, the mixed workload, saying why."""
    timed = sorted({r.tokens_per_rank for r in rows if r.status == "ok" and r.latency_us_p50 is not None})
    if not timed:
        return "mixed", ("the mixed workload: no point of this shape was timed on this host class "
                         "(--workload decode|prefill|TOKENS weighs another)")
    counts = ", ".join(map(str, timed))
    return ",".join(map(str, timed)), (f"the token counts measured for this host class and shape ({counts} per rank), "
                                       "equally weighted (--workload decode|prefill|mixed|TOKENS weighs another)")


def _workload(text: str, deployment):
    """Token counts as a workload; a kind as itself (the selector builds it with the answer's token budget)."""
    text = text.strip()
    if text[:1].isdigit():
        return workload_from_tokens(text, what="--workload")
    if text not in WORKLOAD_KINDS:
        raise UnknownWorkload(
            f"unknown --workload {text!r}; use {', '.join(WORKLOAD_KINDS)} or token counts per rank like 1,8,64"
        )
    return text


def bucket_marks(recommendation) -> list[BucketMark]:
    """The fastest candidate per workload bucket, from the selector's per-bucket estimates."""
    marks = []
    for i, (tokens, weight) in enumerate(recommendation.workload.buckets):
        best = None
        for c in recommendation.candidates:
            e = c.buckets[i] if i < len(c.buckets) else None
            if e is not None and e.latency_us is not None and (best is None or e.latency_us < best[1].latency_us):
                best = (c.backend, e)
        if best is None:
            marks.append(BucketMark(tokens, weight, None, None))
            continue
        backend, e = best
        marks.append(BucketMark(tokens, weight, backend, e.latency_us, evidence=e.evidence,
                                estimated=e.estimated))
    return marks


def collect(
    model: str,
    *,
    db_path: os.PathLike | str | None = None,
    host_class: str | None = None,
    world_size: int | None = None,
    workload: str | None = None,
    gpu_arch: str | None = None,
    vllm_version: str | None = None,
    fleet_backend: str | None = None,
    fleet_tokens: int | None = None,
    reference: bool = True,
) -> ReportData:
    """Read everything a report draws: the model's measurements, the recommendation, the fleet,
    and NVIDIA's published reference curves of the same shape.

    :param model: checkpoint directory or Hugging Face id (config files only).
    :param db_path: the results database (default: ``$AUTOSELECT_DB`` / the user data dir).
    :param host_class: whose measurements (default: the class that measured the shape last); a
        reference class (``ref-h200_sxm-x8``) reports the published measurements alone.
    :param world_size: EP size (default: the largest measured for this shape; a reference
        class's own default).
    :param workload: ``decode``, ``prefill``, ``mixed`` or token counts per rank (``1,8,64``); default:
        the token counts measured for the host class and shape, equally weighted (a report draws
        what was measured), else ``mixed`` and the page says why.
    :param gpu_arch: the arch whose activation dtype applies (default: the host class's).
    :param fleet_backend: backend of the per-node figure (default: the recommended one).
    :param fleet_tokens: tokens per rank of the per-node figure (default: most measured).
    :param reference: draw the reference curves when the host class is a reference system.
    """
    if world_size is not None and world_size < 1:
        raise BadDeployment(f"--world-size {world_size} must be at least 1")
    profile = load_profile(model)
    if is_reference_class(host_class):
        note = None if workload is not None else (
            "the mixed workload: a reference class has no measurement of its own to weigh "
            "(--workload decode|prefill|TOKENS weighs another)")
        data = _collect_reference(profile, get_class(host_class), db_path=db_path, world_size=world_size,
                                  workload=workload or "mixed", gpu_arch=gpu_arch, vllm_version=vllm_version)
        data.workload_note = note
        data.fleet = fleet_view([], [], data.recommended, backend=fleet_backend, tokens=fleet_tokens)
        return data
    path = default_path() if db_path is None else Path(db_path)
    conn = connect_readonly(path)
    try:
        host, arch, dtype, rows = _resolve_host_class(conn, path, profile, host_class, gpu_arch)
        hc = host.host_class
        world_size = _world_size(profile, hc, rows, world_size)
        rows = [r for r in rows if r.world_size == world_size]
        note = None
        if workload is None:
            workload, note = measured_workload(rows)
        rec = _recommend(profile, conn, hc, host, arch, world_size, workload, vllm_version)
    finally:
        conn.close()

    series = _series(rows, rec)
    data = _report_data(profile, dtype, world_size, hc, rec, series=series, gpu_name=getattr(host, "gpu_name", None),
                        device=getattr(host, "device", None),
                        nvlink_peak_gbps=getattr(host, "nvlink_peak_gbps", None), workload_note=note)
    if reference:
        data.reference, data.reference_note = _matched_reference(data, host, rec)
    else:
        data.reference_note = "reference curves left out (--no-reference)"
    data.fleet = fleet_view(rows, series, data.recommended, backend=fleet_backend, tokens=fleet_tokens)
    return data


def _collect_reference(profile, ref_class: ReferenceClass, *, db_path, world_size: int | None, workload: str,
                       gpu_arch: str | None, vllm_version: str | None) -> ReportData:
    """A report of a reference class alone: its published curves and what the selector makes of it.

    No local measurement is needed; a results database, when there is one, is passed to the
    selector as ``recommend`` would read it.
    """
    system = ref_class.system
    if gpu_arch is not None and normalize_arch(gpu_arch) != system.arch:
        raise GpuArchNotOfReference(
            f"--gpu-arch {gpu_arch}: {ref_class.name} is {system.label} hardware ({system.arch}); "
            f"drop --gpu-arch or pass {system.arch}")
    world_size = ref_class.check_world_size(world_size)
    dtype = profile.activation_dtype(system.arch)
    path = default_path() if db_path is None else Path(db_path)
    conn = connect_readonly(path) if path.exists() else None
    try:
        rec = _recommend(profile, conn, ref_class.name, None, system.arch, world_size, workload, vllm_version)
    finally:
        if conn is not None:
            conn.close()
    data = _report_data(profile, dtype, world_size, ref_class.name, rec, series=[], gpu_name=system.gpu_name,
                        device="cuda", nvlink_peak_gbps=system.nvlink_gbps)
    data.reference = reference_view(
        ref_class, hidden=profile.hidden_size, top_k=profile.top_k, experts=profile.num_experts, dtype=dtype,
        world_size=world_size, how=f"--host-class {ref_class.name}: {ref_class.describe()}",
        illegal=_rejections(rec)[0])
    return data


def _recommend(profile, conn, host_class: str, host, arch: str, world_size: int, workload: str, vllm_version):
    """The selector's recommendation for the report's deployment (None at world size 1)."""
    deployment = Deployment(dp=world_size, tp=1)
    spec = _workload(workload, deployment)
    if world_size < 2:  # vLLM builds no all2all group with --data-parallel-size 1
        return None
    return recommend(profile, conn=conn, deployment=deployment, host_class=host_class, host=host, gpu_arch=arch,
                     vllm_version=vllm_version, workload=spec)


def _report_data(profile, dtype: str, world_size: int, host_class: str, rec, **fields) -> ReportData:
    return ReportData(
        model=Path(profile.model).name if Path(profile.model).exists() else profile.model,
        hidden=profile.hidden_size,
        top_k=profile.top_k,
        experts=profile.num_experts,
        activation_dtype=dtype,
        world_size=world_size,
        host_class=host_class,
        buckets=bucket_marks(rec) if rec is not None else [],
        workload_kind=rec.workload.kind if rec is not None else None,
        recommended=rec.backend if rec is not None else None,
        recommendation=rec.to_dict() if rec is not None else None,
        **fields,
    )


def _matched_reference(data: ReportData, host, rec) -> tuple[ReferenceView | None, str | None]:
    """The reference view of a measured host class whose GPUs are a reference system, or why none."""
    match = match_host(host, data.world_size) if host is not None else None
    if match is None:
        what = (f"{host.gpu_count}×{host.gpu_name}" if host is not None and host.gpu_name
                else "a CPU host" if getattr(host, "device", None) == "cpu" else "unknown GPUs")
        return None, (f"no reference curves: host class {data.host_class} ({what}) is none of the published "
                      "reference systems (`autoselect report --host-class ref-...` draws one on its own)")
    timed = [t for s in data.timed_series for t in s.tokens]
    view = reference_view(
        match.ref_class, hidden=data.hidden, top_k=data.top_k, experts=data.experts, dtype=data.activation_dtype,
        world_size=data.world_size, caveats=match.caveats, illegal=_rejections(rec)[0],
        how=(f"host class {data.host_class} has {host.gpu_count}×{host.gpu_name}, the GPUs of "
             f"{match.ref_class.name} ({match.ref_class.describe()})"),
        tokens=(min(timed), max(timed)) if timed else None)
    return view, None


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


def _rejections(rec) -> tuple[dict[str, tuple[str, ...]], dict[str, tuple[str, ...]]]:
    """(illegal, disqualified): backend -> the selector's reasons, from its rejections."""
    illegal: dict[str, tuple[str, ...]] = {}
    disqualified: dict[str, tuple[str, ...]] = {}
    for rej in rec.rejected if rec is not None else ():
        if rej.kind == "illegal":
            illegal[rej.backend] = tuple(rej.reasons)
        elif rej.kind == "disqualified":
            disqualified[rej.backend] = tuple(rej.reasons)
    return illegal, disqualified


def _series(rows, rec) -> list[BackendSeries]:
    """One series per backend, marked illegal / disqualified as the selector's rejections say."""
    illegal, disqualified = _rejections(rec)
    series = build_series(rows, illegal)
    for s in series:
        s.disqualified_reasons = disqualified.get(s.backend, ())
    return series
