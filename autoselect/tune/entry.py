"""Entry points of a tune: validate every input (:func:`prepare`), then run and store (:func:`run_tune`).

:func:`prepare` writes nothing: every mistake is a :class:`autoselect.errors.UserError` before
the results database, the study or any worker exists. :func:`run_tune` opens the store and the
study, runs the :class:`~autoselect.tune.tuner.Tuner` and saves the best configuration in
``tuned_configs`` (``db/tuned.py``), which ``recommend`` reads to print the knobs and their gain.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autoselect import knobs as knobs_mod
from autoselect import rules
from autoselect.candidates import Target, candidate_backends, resolve_target
from autoselect.errors import GpuArchRequired, InvalidWorldSize, UserError
from autoselect.hardware import HostFingerprint, fingerprint
from autoselect.model import MoeProfile, load_profile, normalize_arch
from autoselect.options import parse_duration
from autoselect.tune.outcome import TuneOutcome
from autoselect.tune.storage import Study, optuna_path, study_name
from autoselect.tune.tuner import ProgressFn, Tuner, TuneSpec
from autoselect.workload import Deployment, Shape, workload_from_kind, workload_from_tokens
from bench.backends import BenchContext, available, check_names, load
from bench.launch import WorkerGroups
from bench.sweep import HARNESS_PACKAGES, check_harness
from db.schema import check_path
from db.tuned import TunedConfig, save_tuned


class NoCandidates(UserError):
    "Nothing to tune: no backend is legal and available for this model on this host."


def load_model(model: str) -> MoeProfile:
    """``--model``: a checkpoint (``autoselect.model.load_profile``) or ``shape:HxEXPERTSxTOPK:DTYPE``."""
    if model.startswith("shape:"):
        return Shape.parse(model).profile()
    return load_profile(model)


def _resolve_arch(profile: MoeProfile, host: HostFingerprint, gpu_arch: str | None) -> str | None:
    if gpu_arch:
        return normalize_arch(gpu_arch)
    if host.gpu_arch:
        return host.gpu_arch
    if len(set(profile.activation_dtypes.values())) == 1:
        return None
    raise GpuArchRequired(
        f"{profile.model} dispatches {', '.join(f'{v} on {a}' for a, v in sorted(profile.activation_dtypes.items()))}; "
        "on a CPU host pass --gpu-arch sm90 or sm100 to say which to benchmark"
    )


def _candidates(target: Target, backends: list[str] | None,
                include_reference: bool) -> tuple[list[str], dict[str, str]]:
    """Legal backends to race, and the excluded ones with the reason (never measured).

    Legality is :func:`autoselect.candidates.candidate_backends` for ``target`` (the vLLM version
    ``recommend`` would judge against; hardware rules only on a CUDA run, as ``bench.sweep``
    judges them); an adapter the rules table does not know is raced unjudged, like ``bench``
    measures it.
    """
    names = check_names(backends) if backends else list(available())
    chosen, excluded = [], {}
    for name, verdict in candidate_backends(target, names).items():
        if name.startswith("reference_") and not (include_reference or backends):
            excluded[name] = "benchmark-only baseline (pass --include-reference to race it)"
        elif verdict is None or verdict.ok:
            chosen.append(name)
        else:
            excluded[name] = "illegal: " + "; ".join(verdict.reasons)
    return chosen, excluded


def _unavailable(names: list[str], device: str, world_size: int, host: HostFingerprint) -> dict[str, str]:
    """Ask each adapter in this process whether it can run here (saves spawning workers for nothing)."""
    out = {}
    ctx = BenchContext(rank=0, world_size=world_size, device=device, torch_device=None,
                       nvlinks_all_up=getattr(host, "all_nvlinks_up", None))
    for name in names:
        try:
            why = load(name).unavailable_reason(ctx)
        except Exception:  # cannot tell outside the workers: let the harness judge it there
            why = None
        if why:
            out[name] = f"unavailable: {why}"
    return out


def prepare(model: str, *, db_path: str | Path, workload: str | None = None, tokens: str | None = None,
            device: str | None = None, world_size: int | None = None, budget: str = "10m",
            gpu_arch: str | None = None, backends: list[str] | None = None,
            include_reference: bool = False, search_knobs: bool = True, enable_dbo: bool = False,
            host: Any = None) -> tuple[TuneSpec, dict[str, str]]:
    """Validate every input and build the :class:`TuneSpec` (nothing is written).

    ``world_size`` None: every GPU of a CUDA host, 2 ranks on CPU. Returns the spec and the
    backends left out before measuring, each with its reason.
    """
    check_harness("autoselect tune", "tune", (*HARNESS_PACKAGES, "optuna"))
    budget_s = parse_duration(budget, what="--budget")
    if world_size is not None and world_size < 1:
        raise InvalidWorldSize(f"--world-size {world_size} must be at least 1 (2 or more for a real exchange)")
    if backends is not None and not backends:
        raise NoCandidates("--backends names no backend; pass e.g. allgather_reducescatter,deepep_low_latency "
                           "or leave it out for every legal one")
    check_path(db_path)  # a garbage or newer --db fails here, before the live view and any worker
    profile = load_model(model)
    host = host or fingerprint()
    device = device or host.device
    if world_size is None:
        world_size = host.gpu_count if device == "cuda" and host.gpu_count else 2
    if device == "cuda" and host.device != "cuda":
        raise NoCandidates("--device cuda on a host without CUDA GPUs; use --device cpu (gloo)")
    if device == "cuda" and world_size > host.gpu_count:
        raise NoCandidates(f"--world-size {world_size} exceeds this host's {host.gpu_count} GPUs")
    arch = _resolve_arch(profile, host, gpu_arch)
    dtype = profile.activation_dtype(arch) if arch else next(iter(profile.activation_dtypes.values()))
    target = resolve_target(profile, world_size=world_size, gpu_arch=arch, host=host if device == "cuda" else None)
    deployment = Deployment(dp=world_size, tp=1)
    memory = min((g.memory_total_mib for g in host.gpus if g.memory_total_mib), default=None)
    budget = rules.token_budget(rules.DEFAULT_BACKEND, target.vllm_version, gpu_memory_mib=memory, gpu_arch=arch)
    spec_workload = (workload_from_tokens(tokens) if tokens is not None else
                     workload_from_kind(workload or "mixed", deployment, max_num_batched_tokens=budget.tokens))
    chosen, excluded = _candidates(target, backends, include_reference)
    excluded.update(_unavailable(chosen, device, world_size, host))
    chosen = [b for b in chosen if b not in excluded]
    if not chosen:
        detail = "; ".join(f"{b}: {why}" for b, why in excluded.items())
        raise NoCandidates(f"no backend can be measured for {profile.model} on this host ({detail}); "
                           "check `autoselect check` or pass --backends")
    shape = Shape(hidden=profile.hidden_size, top_k=profile.top_k, experts=profile.num_experts, dtype=dtype)
    ctx = knobs_mod.KnobContext.from_host(
        host if device == "cuda" else None, world_size=world_size,
        max_num_batched_tokens=max(spec_workload.tokens), enable_dbo=enable_dbo)
    spec = TuneSpec(shape=shape, world_size=world_size, device=device, workload=spec_workload, backends=chosen,
                    db_path=Path(db_path), host=host, vllm_version=target.vllm_version, budget_s=budget_s,
                    model=profile.model, knob_ctx=ctx, search_knobs=search_knobs, gpu_arch=arch)
    return spec, excluded


def run_tune(spec: TuneSpec, *, progress: ProgressFn | None = None, command: str | None = None) -> TuneOutcome:
    """Run (or resume) the study for ``spec``; stores results, the study and the best configuration.

    ``progress`` receives the :mod:`autoselect.tune.events` of the race.
    """
    from db.store import Store  # heavy (sqlite_utils): only a tune that writes pays for it

    groups = WorkerGroups().warm()  # the workers' torch import runs while the stores open
    store = Store(spec.db_path)
    try:
        with store.run(spec.host, trigger="tune", command=command,
                       meta={"model": spec.model, "workload": spec.workload.to_dict()}) as run:
            study = Study(optuna_path(spec.db_path),
                          study_name(spec.host.host_class, spec.shape, spec.world_size, spec.device, spec.workload),
                          spec.backends, spec.workload.tokens)
            outcome = Tuner(spec, store=store, run_id=run.id, study=study, progress=progress).run(groups)
        if outcome.recommendable:
            save_tuned(store, _tuned_config(spec, outcome, run.id))
        return outcome
    finally:
        groups.kill_all("the tune ended")  # a no-op when the race closed them; else (an error) at once
        store.close()


def _tuned_config(spec: TuneSpec, outcome: TuneOutcome, run_id: int) -> TunedConfig:
    """The ``tuned_configs`` row of a finished tune (its backend, the knobs it found, their gain)."""
    k = outcome.knobs
    setting = dict(k.setting) if k else {}
    env, flags, _ = knobs_mod.split_setting(setting)
    shape = spec.shape
    return TunedConfig(
        host_class=spec.host.host_class, machine_id=spec.host.machine_id, hidden=shape.hidden,
        top_k=shape.top_k, experts=shape.experts, activation_dtype=shape.dtype,
        world_size=spec.world_size, device=spec.device, backend=outcome.recommendable,
        status=k.status if k else "not_searched", stop=outcome.stop, study=outcome.study,
        workload=spec.workload.to_dict(), knobs=setting, env=env, flags=flags,
        gain=k.gain if k else None, gain_halfwidth=k.gain_halfwidth if k else None,
        tuned_latency_us=k.tuned_latency_us if k else None, untuned_latency_us=k.untuned_latency_us if k else None,
        versions=dict(getattr(spec.host, "versions", {}) or {}), run_id=run_id,
    )
