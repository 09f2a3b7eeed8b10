"""A sweep: backends x token counts for one shape, written to the store one row at a time.

``run_sweep(SweepSpec(...))`` is the API that ``autoselect bench``, ``tune`` and ``fleet``
share. It validates everything before a worker starts or a database row is written, skips
(or, with ``include_illegal``, marks) backends that ``autoselect.rules.legal`` rejects, runs
each backend's points in fresh worker processes (``bench/launch.py``) and turns every point
into exactly one :class:`db.records.Result`: ``ok``, ``incorrect``, ``unavailable``,
``error`` or ``timeout``.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field, replace

from autoselect.candidates import candidate_backends, check_vllm_version, resolve_target
from autoselect.errors import GpuArchRequired, MissingShape, UserError
from autoselect.options import (
    DEFAULT_TOKENS,
    STOPPING,
    StoppingRule,
    check_seconds,
    check_seed,
    parse_int_list,
    parse_name_list,
)
from autoselect.rules import CHUNK_SIZE, NEWEST_VLLM, smallest_deployment
from autoselect.workload import Shape
from db.records import Result


class BadSweep(UserError):
    "A sweep option is out of range (tokens, device, world size, stopping rule)."


class NotEnoughGpus(UserError):
    "The world size asks for more GPUs than this host has."


@dataclass
class SweepSpec:
    """What to measure: backends x token counts for one shape on one device.

    ``env``: environment variables for the worker processes (knobs such as
    ``NCCL_PROTO``); ``knobs``: the tuned settings recorded with each result (``env`` is
    recorded under ``knobs["env"]`` unless ``knobs`` already has it). ``gpu_arch``: the arch
    legality is judged for (defaults to the host's; on a CPU host without it, legality is
    not checked). ``setup_timeout_s``: wall-clock limit of worker start + adapter setup per
    point (first-use JIT builds of FlashInfer kernels take minutes).
    """

    backends: list[str]
    tokens: list[int]
    hidden: int
    top_k: int
    experts: int
    dtype: str
    world_size: int
    device: str = "cuda"
    routing: str = "uniform"
    seed: int = 0
    max_noise: float = STOPPING.max_noise
    min_samples: int = STOPPING.min_samples
    min_time_s: float = STOPPING.min_time_s
    timeout_s: float = STOPPING.timeout_s
    include_illegal: bool = False
    env: dict[str, str] = field(default_factory=dict)
    knobs: dict = field(default_factory=dict)
    gpu_arch: str | None = None
    vllm_version: str | None = None
    setup_timeout_s: float = 300.0


def validate(spec: SweepSpec, host=None) -> None:
    """Raise a :class:`UserError` for any option that cannot work; touches nothing."""
    import os

    from autoselect.rules import BACKENDS
    from bench.backends import check_names
    from bench.workload import parse_routing, validate_shape

    if not spec.backends:
        raise BadSweep("no backends to measure; pass --backends NAME[,NAME...]")
    check_names(spec.backends)
    if not spec.tokens or any(not isinstance(t, int) or t < 1 for t in spec.tokens):
        raise BadSweep(f"token counts must be positive integers, got {spec.tokens!r}")
    if spec.device not in ("cpu", "cuda"):
        raise BadSweep(f"unknown device {spec.device!r}; use cuda or cpu")
    if spec.vllm_version is not None:  # a bad or flag-less version fails here, before legality()
        check_vllm_version(spec.vllm_version)
    check_seed(spec.seed)
    check_seconds(spec.setup_timeout_s, what="--setup-timeout")
    validate_shape(max(spec.tokens), spec.hidden, spec.top_k, spec.experts, spec.world_size, spec.dtype)
    StoppingRule(spec.max_noise, spec.min_samples, spec.min_time_s, spec.timeout_s).validate()
    if spec.device == "cpu" and spec.world_size > 64:
        raise BadSweep(f"world size {spec.world_size} on CPU starts that many processes; use at most 64")
    if spec.device == "cuda" and host is not None:
        gpus = host.gpu_count or 0
        if gpus == 0:
            raise NotEnoughGpus("--device cuda but this host has no CUDA GPU; use --device cpu")
        if spec.world_size > gpus:
            raise NotEnoughGpus(f"world size {spec.world_size} needs {spec.world_size} GPUs; "
                                f"this host has {gpus} (lower --world-size)")
    # An environment variable a per-token kernel limit reads (NVSHMEM_QP_DEPTH) must parse now:
    # tune and fleet call run_sweep inside a run they have already begun.
    environ = {**os.environ, **spec.env}
    for name in spec.backends:
        limit = getattr(BACKENDS.get(name), "max_tokens_per_rank", None)
        if limit is not None:
            limit.value.depth(environ)  # raises InvalidQueueDepth (a UserError)
    # The routing file is read now so that a bad file fails before any worker starts.
    routing = parse_routing(spec.routing)
    if routing.kind == "file":
        from bench.workload import load_routing_file

        load_routing_file(routing.path, spec.top_k, spec.experts)


def legality(spec: SweepSpec, host, tokens: int | None = None):
    """``{backend: Verdict | None}``: None where rules cannot judge (an unknown adapter).

    :func:`autoselect.candidates.candidate_backends` over the spec's target: ``--vllm-version``,
    else the version every command resolves (``candidates.resolve_target``). Without a target
    arch (a CPU host and no ``--gpu-arch``) the explicit dtype is judged on every known arch
    (``model.GPU_ARCHS``): a backend is illegal only when it is illegal on all of them (bf16 on
    one-sided is; a sm100-only backend is not), with the reasons of the first. Hardware is
    judged only for ``--device cuda``. With ``tokens``, the per-token
    kernel limits are judged too, for a deployment that runs batches of that many tokens per
    rank (:func:`point_budget`), in the environment the workers get (ours, then ``spec.env``:
    an exported ``NVSHMEM_QP_DEPTH`` counts, as it does for the adapter and for ``check``).
    """
    import os

    shape = Shape(hidden=spec.hidden, top_k=spec.top_k, experts=spec.experts, dtype=spec.dtype)
    target = resolve_target(shape.profile(), world_size=spec.world_size,
                            gpu_arch=spec.gpu_arch or getattr(host, "gpu_arch", None),
                            host=host if spec.device == "cuda" else None, vllm_version=spec.vllm_version,
                            environ={**os.environ, **spec.env})
    verdicts = {}
    for name in spec.backends:
        point = target
        if tokens is not None:
            # the smallest deployment that dispatches `tokens` per rank at once; which setting
            # carries its buffer depends on the target release (rules.smallest_deployment)
            budget, sized = smallest_deployment(name, target.vllm_version, tokens)
            point = replace(target.with_tokens(budget), environ={**(target.environ or {}), **sized})
        verdicts.update(candidate_backends(point, [name]))
    return verdicts


def point_budget(backend: str, tokens: int, vllm_version: str | None = None) -> int:
    """The dispatch buffer (tokens per rank) of the smallest deployment that runs ``tokens`` per rank.

    ``tokens`` itself, or the backend's default buffer when that is larger (256 for
    deepep_low_latency): :func:`autoselect.rules.smallest_deployment`, which also says which
    setting carries it in ``vllm_version``'s release.
    """
    batched, sized = smallest_deployment(backend, vllm_version or NEWEST_VLLM, tokens)
    return int(sized.get(CHUNK_SIZE, batched))


def plan_points(spec: SweepSpec, host) -> tuple[list[tuple[str, list[int], set[int]]], dict[str, str]]:
    """Which points to measure: ``[(backend, tokens, illegal tokens)]`` and the skipped ``{label: reason}``.

    A backend the rules reject at every token count is skipped whole (label = its name);
    one rejected only at some (a per-token kernel limit, e.g. deepep_low_latency above 511
    tokens per rank) loses those points (label ``name @ t1,t2``, the reason of the first). With ``include_illegal``
    nothing is skipped and the rejected points are measured with ``illegal`` set. Repeated
    token counts stay repeated (``tune`` measures a point again that way).
    """
    per_tokens = {t: legality(spec, host, t) for t in dict.fromkeys(spec.tokens)}
    plan, skipped = [], {}
    for name in spec.backends:
        points, illegal_at, first_reason = [], {}, None  # illegal_at: an ordered set
        for t in spec.tokens:
            verdict = per_tokens[t].get(name)
            if verdict is not None and not verdict.ok:
                illegal_at[t] = None
                first_reason = first_reason or "; ".join(verdict.reasons)
                if not spec.include_illegal:
                    continue
            points.append(t)
        if illegal_at and not spec.include_illegal:
            # the reason of the smallest rejected point stands for the rest (they differ in the number)
            label = name if not points else f"{name} @ {','.join(map(str, illegal_at))}"
            skipped[label] = first_reason
        illegal_at = set(illegal_at)
        if points:
            plan.append((name, points, illegal_at))
    return plan, skipped


def _versions(host) -> dict:
    versions = dict(getattr(host, "versions", {}) or {})
    for key, attr in (("driver", "driver_version"), ("cuda", "cuda_version")):
        value = getattr(host, attr, None)
        if value:
            versions[key] = str(value)
    return versions


def run_sweep(spec: SweepSpec, *, store=None, run_id=None, host=None, progress=None) -> list[Result]:
    """Measure every (backend, tokens) point of ``spec``; returns the results in order.

    :param store: a :class:`db.store.Store`; each result is written as it arrives.
    :param run_id: the run to add results to; when None and a store is given, a run is
        begun here and finished (``complete``, or ``interrupted``/``failed``) at the end.
    :param host: the :class:`autoselect.hardware.HostFingerprint` (default: fingerprint()).
    :param progress: ``progress(event: dict)`` callback: ``start`` (total), ``skip``
        (backend, reason), ``phase`` (backend, tokens, phase), ``result`` (result), ``done``.
    Under torchrun every rank measures; only rank 0 returns results and writes the store.
    """
    from bench import launch

    if host is None:
        from autoselect.hardware import fingerprint

        host = fingerprint()
    validate(spec, host)
    plan, skipped = plan_points(spec, host)
    emit = progress or (lambda event: None)
    for label, reason in skipped.items():
        emit({"event": "skip", "backend": label, "reason": reason})
    emit({"event": "start", "total": sum(len(points) for _, points, _ in plan)})

    rank = launch.torchrun_rank()
    own_run = store is not None and run_id is None and rank == 0
    # a run begun here is finished here: complete, or interrupted / failed by what is raised
    run_cm = (store.run(host, trigger="manual", command="bench", meta={"spec": _spec_meta(spec)})
              if own_run else nullcontext())
    results: list[Result] = []
    with run_cm as run:
        if own_run:
            run_id = run.id
        versions = _versions(host)
        knobs = dict(spec.knobs)
        if spec.env and "env" not in knobs:
            knobs["env"] = dict(spec.env)
        with launch.signals_raise():
            for name, points, illegal_at in plan:
                def on_event(ev, name=name, illegal_at=illegal_at):
                    if ev.get("event") == "phase":
                        emit({"event": "phase", "backend": name, "tokens": ev["tokens"], "phase": ev["phase"]})
                        return
                    if ev.get("event") != "result":
                        return
                    result = Result(
                        backend=name, world_size=spec.world_size, tokens_per_rank=ev["tokens"],
                        hidden=spec.hidden, top_k=spec.top_k, experts=spec.experts,
                        dispatch_dtype=spec.dtype, routing=_routing_label(spec.routing),
                        status=ev["status"], error=ev.get("error"), device=spec.device,
                        illegal=ev["tokens"] in illegal_at, knobs=knobs, versions=versions,
                    )
                    for key, value in (ev.get("fields") or {}).items():
                        setattr(result, key, value)
                    if rank == 0:
                        results.append(result)
                        if store is not None:
                            store.add_result(run_id, result)
                        emit({"event": "result", "result": result})

                job = _job(spec, name, host, points)
                if launch.under_torchrun():
                    _serve_in_process(job, on_event)
                else:
                    launch.run_backend(job, on_event)
    emit({"event": "done"})
    return results


def _routing_label(routing: str) -> str:
    from bench.workload import parse_routing

    return parse_routing(routing).label


def _spec_meta(spec: SweepSpec) -> dict:
    from dataclasses import asdict

    return {k: v for k, v in asdict(spec).items() if k not in ("knobs",)}


def _job(spec: SweepSpec, backend: str, host, points: list[int]) -> dict:
    from bench.workload import parse_routing

    routing = parse_routing(spec.routing)
    return {
        "backend": backend, "points": points, "hidden": spec.hidden, "top_k": spec.top_k,
        "experts": spec.experts, "world_size": spec.world_size, "dtype": spec.dtype,
        "routing": f"file:{routing.path}" if routing.kind == "file" else spec.routing,
        "seed": spec.seed, "device": spec.device, "max_noise": spec.max_noise,
        "min_samples": spec.min_samples, "min_time_s": spec.min_time_s, "timeout_s": spec.timeout_s,
        "setup_timeout_s": spec.setup_timeout_s, "env": dict(spec.env),
        "nvlinks_all_up": getattr(host, "all_nvlinks_up", None),
    }


def _serve_in_process(job: dict, on_event) -> None:
    """torchrun mode: this process is one rank; no isolation (torchrun owns the processes)."""
    import os

    from bench import launch

    world = int(os.environ["WORLD_SIZE"])
    if world != job["world_size"]:
        raise BadSweep(f"torchrun started {world} ranks but --world-size is {job['world_size']}; make them equal")
    for key, value in job.get("env", {}).items():
        os.environ[key] = value

    def translate(event):
        if event.get("event") == "unavailable":
            for tokens in job["points"]:
                on_event({"event": "result", "tokens": tokens, "status": "unavailable", "error": event["reason"]})
        else:
            on_event(event)

    launch.serve_job(job, int(os.environ["RANK"]), world, translate)


class ShapeOptions(UserError):
    "The model shape was given both ways: --model and --hidden/--top-k/--experts/--dtype."


@dataclass
class BenchReport:
    """What ``autoselect bench`` prints: the spec, the results, the skipped backends, where they are stored."""

    spec: SweepSpec
    results: list[Result]
    skipped: dict[str, str]
    run_id: int | None
    db_path: str | None
    host: object = None

    def to_dict(self) -> dict:
        """The JSON document (``schema_version`` 1); raw samples are left out (they are in the store)."""
        from dataclasses import asdict

        rows = []
        for r in self.results:
            d = r.to_dict()
            d.pop("raw_samples_us", None)
            rows.append(d)
        spec = asdict(self.spec)
        return {"schema_version": 1, "run_id": self.run_id, "db": self.db_path, "spec": spec,
                "skipped": self.skipped, "results": rows}


def run_bench(*, model=None, gpu_arch=None, hidden=None, top_k=None, experts=None, dtype=None,
                  backends=None, tokens=None, world_size=None, device="cuda", routing="uniform",
                  seed=0, max_noise=STOPPING.max_noise, min_samples=STOPPING.min_samples,
                  min_time_s=STOPPING.min_time_s, timeout_s=STOPPING.timeout_s,
                  setup_timeout_s=300.0, include_illegal=False, vllm_version=None, db_path=None,
                  progress=None) -> BenchReport:
    """Resolve the shape (``--model`` + arch, or explicit sizes), validate, sweep, store.

    Everything is validated before the database is opened. ``backends``/``tokens`` are
    comma lists (default: every registered adapter; the decode grid 1..256).
    """
    from autoselect.hardware import fingerprint
    from bench.backends import available

    shape = (hidden, top_k, experts, dtype)
    if model is not None and any(v is not None for v in shape):
        raise ShapeOptions("pass either --model or --hidden/--top-k/--experts/--dtype, not both")
    host = fingerprint()
    if model is not None:
        from autoselect.model import load_profile, normalize_arch

        arch = gpu_arch or host.gpu_arch
        if not arch:
            raise GpuArchRequired(f"--model {model} on a host without a GPU: pass --gpu-arch sm90|sm100 "
                                  "to choose the activation dtype")
        arch = normalize_arch(arch)
        profile = load_profile(model)
        hidden, top_k, experts = profile.hidden_size, profile.top_k, profile.num_experts
        dtype = profile.activation_dtype(arch)
        gpu_arch = arch
    elif Shape.from_options(hidden=hidden, top_k=top_k, experts=experts, dtype=dtype) is None:
        raise MissingShape("nothing to measure: pass --model, or all of --hidden/--top-k/--experts/--dtype")
    elif gpu_arch:
        from autoselect.model import normalize_arch

        gpu_arch = normalize_arch(gpu_arch)
    names = parse_name_list(backends, what="--backends") if backends is not None else list(available())
    token_list = parse_int_list(tokens, what="--tokens") if tokens is not None else list(DEFAULT_TOKENS)
    if world_size is None:
        world_size = (host.gpu_count or 1) if device == "cuda" else 2
    spec = SweepSpec(backends=names, tokens=token_list, hidden=hidden, top_k=top_k, experts=experts,
                     dtype=dtype, world_size=world_size, device=device, routing=routing, seed=seed,
                     max_noise=max_noise, min_samples=min_samples, min_time_s=min_time_s,
                     timeout_s=timeout_s, include_illegal=include_illegal, gpu_arch=gpu_arch,
                     vllm_version=vllm_version, setup_timeout_s=setup_timeout_s)
    validate(spec, host)  # bad --vllm-version / NVSHMEM_QP_DEPTH fail here, before the store opens
    skipped: dict[str, str] = {}

    def on_progress(event):
        if event.get("event") == "skip":
            skipped[event["backend"]] = event["reason"]
        if progress:
            progress(event)

    from bench import launch

    if launch.torchrun_rank() != 0:
        results = run_sweep(spec, host=host, progress=on_progress)
        return BenchReport(spec, results, skipped, None, None, host)
    from db.store import Store

    with Store(db_path) as store:
        with store.run(host, trigger="manual", command="autoselect bench",
                       meta={"spec": _spec_meta(spec)}) as run:
            results = run_sweep(spec, store=store, run_id=run.id, host=host, progress=on_progress)
        return BenchReport(spec, results, skipped, run.id, str(store.path), host)
