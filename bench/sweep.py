"""A sweep: backends x token counts for one shape, written to the store one row at a time.

``run_sweep(SweepSpec(...))`` is the API that ``autoselect bench``, ``tune`` and ``fleet``
share. It validates everything before a worker starts or a database row is written, skips
(or, with ``include_illegal``, marks) backends that ``autoselect.rules.legal`` rejects, runs
each backend's points as one job in that backend's worker group (:mod:`bench.launch`: the
caller's long-lived groups when it passes them, else groups of its own, one start-up per
backend) and turns every point into exactly one :class:`db.records.Result`. Each backend's points
carry the payload vLLM's prepare step sends through it (``autoselect.rules.wire``: DeepEP moves an
nvfp4 or per-tensor fp8 model's activations as bf16), so a local measurement times what vLLM
would move; the result stays filed under the model's activation dtype. Outcomes: ``ok``,
``incorrect``, ``unavailable``, ``error`` or ``timeout``, stored as it arrives; or
``harness_error`` (the harness itself failed: an allocation, an overflow), returned and
reported but never stored as a result row, so it never counts against the backend: the
run's meta keeps it (``harness_failures``).
"""

from __future__ import annotations

import os
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field

from autoselect.bridge import TargetVersion, target_version
from autoselect.candidates import candidate_backends, check_vllm_version, resolve_target
from autoselect.errors import UserError
from autoselect.hardware import fingerprint
from autoselect.options import SETUP_TIMEOUT_S, check_seconds, check_seed
from autoselect.stopping import STOPPING, StoppingRule
from autoselect.rules import BACKENDS, smallest_deployment
from autoselect.rules.versions import parse_version
from autoselect.rules.wire import Wire, wire_dtype, wire_of
from autoselect.workload import Shape
from bench import launch
from bench.backends import VLLM_PATH_DTYPES, check_names
from bench.backends._flashinfer import has_module
from bench.events import (
    BackendSkipped,
    GroupStarted,
    WireConverted,
    JobFinished,
    PointMeasured,
    PointPhase,
    SweepFinished,
    SweepStarted,
)
from bench.launch import HARNESS_ERROR, GroupConfig, Job, PointDone, WorkerGroups
from bench.routing import load_routing_file, parse_routing
from bench.synthetic import validate_shape
from db.records import ADAPTER, DP_SIZES, EQUAL, VIAS, VLLM, Result


class BadSweep(UserError):
    "A sweep option is out of range (tokens, device, world size, stopping rule)."


class NotEnoughGpus(UserError):
    "The world size asks for more GPUs than this host has."


class HarnessNotInstalled(UserError):
    "A package the benchmark workers import (torch, numpy; optuna for tune) is not installed."


#: what every benchmark worker imports (bench/launch/zygote.py preloads them), the `bench` extra
HARNESS_PACKAGES = ("torch", "numpy")


def check_harness(command: str = "autoselect bench", extra: str = "bench",
                  packages: tuple[str, ...] = HARNESS_PACKAGES) -> None:
    """Raise :class:`HarnessNotInstalled` naming every one of ``packages`` not importable here (found,
    not imported: torch costs seconds), before a worker starts or a row is written."""
    missing = [name for name in packages if not has_module(name)]
    if missing:
        raise HarnessNotInstalled(
            f"{command} needs {' and '.join(missing)}, not installed here (a plain `pip install autoselect` "
            f"answers without them); install the torch build for this machine first (its CUDA's, or the CPU "
            f"wheel), then pip install 'autoselect[{extra}]'")


class VllmPathUnavailable(UserError):
    "bench --via vllm cannot run here: not on CUDA, no vLLM in this Python, or another vLLM release asked for."


def check_vllm_path(device: str, vllm_version: str | None, dtype: str) -> str:
    """The installed vLLM's version, which ``--via vllm`` times; raises :class:`VllmPathUnavailable` on
    CPU (vLLM's prepare / finalize kernels need CUDA), for an activation dtype whose synthetic payload
    vLLM's own quantization does not reproduce (the gate could not check it), without an importable
    vLLM (asked without importing it), or when ``vllm_version`` names another release."""
    from importlib.metadata import PackageNotFoundError, version

    if device != "cuda":
        raise VllmPathUnavailable("--via vllm times vLLM's own prepare/finalize kernels, which run on CUDA GPUs "
                                  "only; run it with --device cuda on a GPU node that has vLLM, or drop --via vllm")
    if dtype not in VLLM_PATH_DTYPES:
        raise VllmPathUnavailable(f"--via vllm takes {', '.join(VLLM_PATH_DTYPES)} activations, not {dtype}: vLLM "
                                  "quantizes the bf16 input itself and that dtype's synthetic payload does not survive "
                                  "it bit for bit, so the correctness gate could not check it; drop --via vllm")
    if not has_module("vllm"):
        raise VllmPathUnavailable("--via vllm needs vLLM importable in this Python (no module named 'vllm'); "
                                  "install vLLM on this node, or drop --via vllm")
    try:
        installed = version("vllm")
    except PackageNotFoundError:
        raise VllmPathUnavailable("--via vllm: a vllm module is importable but no vllm distribution is installed "
                                  "(a source tree on the path?); install vLLM, or drop --via vllm") from None
    if vllm_version is not None and parse_version(vllm_version)[:4] != parse_version(installed)[:4]:
        raise VllmPathUnavailable(f"--via vllm times the installed vLLM {installed}, but --vllm-version says "
                                  f"{vllm_version}; drop --vllm-version or install vLLM {vllm_version}")
    return installed


@dataclass
class SweepSpec:
    """What to measure: backends x token counts for one shape on one device.

    ``env``: environment variables for the worker processes (knobs such as
    ``NCCL_PROTO``); ``knobs``: the tuned settings recorded with each result (``env`` is
    recorded under ``knobs["env"]`` unless ``knobs`` already has it). ``gpu_arch``: the arch
    legality is judged for (defaults to the host's; on a CPU host without it, legality is
    not checked). ``setup_timeout_s``: wall-clock limit of a worker group's start-up and of
    each point's adapter setup (first-use JIT builds of FlashInfer kernels take minutes).
    ``dp_sizes``: vLLM's default's call path for equal or unequal token counts per DP rank
    (``db.records.DP_SIZES``; other backends run as they always do). ``via``: the benchmark's
    adapters, or vLLM's own prepare / finalize objects (``db.records.VIAS``).
    """

    backends: list[str]
    tokens: list[int]
    hidden: int
    top_k: int
    experts: int
    activation_dtype: str  # the model's: every result is filed under it; each backend sends its wire dtype
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
    setup_timeout_s: float = SETUP_TIMEOUT_S
    dp_sizes: str = EQUAL
    via: str = ADAPTER


def validate(spec: SweepSpec, host=None) -> None:
    """Raise a :class:`UserError` for any option that cannot work; touches nothing."""
    if not spec.backends:
        raise BadSweep("no backends to measure; pass --backends NAME[,NAME...]")
    check_names(spec.backends)
    if not spec.tokens or any(not isinstance(t, int) or t < 1 for t in spec.tokens):
        raise BadSweep(f"token counts must be positive integers, got {spec.tokens!r}")
    if spec.device not in ("cpu", "cuda"):
        raise BadSweep(f"unknown device {spec.device!r}; use cuda or cpu")
    if spec.dp_sizes not in DP_SIZES:
        raise BadSweep(f"unknown DP sizes {spec.dp_sizes!r}; use {' or '.join(DP_SIZES)}")
    if spec.via not in VIAS:
        raise BadSweep(f"unknown path {spec.via!r}; use {' or '.join(VIAS)}")
    if spec.via == VLLM:
        check_vllm_path(spec.device, spec.vllm_version, spec.activation_dtype)
    if spec.vllm_version is not None:  # a bad or flag-less version fails here, before legality()
        check_vllm_version(spec.vllm_version)
    check_seed(spec.seed)
    check_seconds(spec.setup_timeout_s, what="--setup-timeout")
    validate_shape(max(spec.tokens), spec.hidden, spec.top_k, spec.experts, spec.world_size, spec.activation_dtype)
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
        load_routing_file(routing.path, spec.top_k, spec.experts)


def _target(spec: SweepSpec, host):
    """The legality target of ``spec`` (the version every command resolves, the host's arch)."""
    shape = Shape(hidden=spec.hidden, top_k=spec.top_k, experts=spec.experts, dtype=spec.activation_dtype)
    return resolve_target(shape.profile(), world_size=spec.world_size,
                          gpu_arch=spec.gpu_arch or getattr(host, "gpu_arch", None),
                          host=host if spec.device == "cuda" else None, vllm_version=spec.vllm_version,
                          environ={**os.environ, **spec.env})


def wires(spec: SweepSpec, host) -> dict[str, Wire]:
    """``{backend: Wire}``: what each backend of ``spec`` sends for its activation dtype on the target
    vLLM, in the workers' environment (a backend the wire table does not know sends the dtype as it is)."""
    target = _target(spec, host)
    out = {}
    for name in spec.backends:
        w = wire_of(name, target.profile.weight_quant, target.gpu_arch, target.vllm_version, target.environ,
                    activation=spec.activation_dtype, ep_size=target.world_size) if target.gpu_arch else \
            wire_dtype(name, spec.activation_dtype, target.vllm_version, target.environ)
        out[name] = w if w is not None else Wire(name, spec.activation_dtype, spec.activation_dtype, "not in the wire table", "")
    return out


def legality(spec: SweepSpec, host, tokens: int | None = None):
    """``{backend: Verdict | None}``: None where rules cannot judge (an unknown adapter).

    :func:`autoselect.candidates.candidate_backends` over the spec's target: ``--vllm-version``,
    else the version every command resolves (``candidates.resolve_target``). Without a target
    arch (a CPU host and no ``--gpu-arch``) the explicit dtype is judged on every known arch
    (``model.GPU_ARCHS``): a backend is illegal only when it is illegal on all of them (bf16 on
    one-sided is; a sm100-only backend is not), with the reasons of the first. Hardware is
    judged only for ``--device cuda``. With ``tokens``, the per-token
    kernel limits are judged too, for a deployment that runs batches of that many tokens per
    rank (:func:`autoselect.rules.smallest_deployment`), in the environment the workers get (ours, then ``spec.env``:
    an exported ``NVSHMEM_QP_DEPTH`` counts, as it does for the adapter and for ``check``).
    """
    target = _target(spec, host)
    verdicts = {}
    for name in spec.backends:
        point = target
        if tokens is not None:
            # the smallest deployment that dispatches `tokens` per rank at once; which setting
            # carries its buffer depends on the target release (rules.smallest_deployment)
            budget, sized = smallest_deployment(name, target.vllm_version, tokens)
            point = target.with_token_budget(budget)._replace(environ={**(target.environ or {}), **sized})
        verdicts.update(candidate_backends(point, [name]))
    return verdicts


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


def run_sweep(spec: SweepSpec, *, store=None, run_id=None, host=None, progress=None,
              groups: WorkerGroups | None = None) -> list[Result]:
    """Measure every (backend, tokens) point of ``spec``; returns the results in order.

    :param store: a :class:`db.store.Store`; each result is written as it arrives.
    :param run_id: the run to add results to; when None and a store is given, a run is
        begun here and finished (``complete``, or ``interrupted``/``failed``) at the end.
    :param host: the :class:`autoselect.hardware.HostFingerprint` (default: fingerprint()).
    :param progress: ``progress(event)`` callback, one of :mod:`bench.events` (skipped
        backends, start, group start-ups, phases, results, each backend's job, done).
    :param groups: the caller's :class:`bench.launch.WorkerGroups` (the caller closes them;
        with ``keep`` a backend's group stays up for the caller's next sweep); default: groups
        of this sweep, each closed after its backend's job.
    Under torchrun every rank measures; only rank 0 returns results and writes the store.
    """
    host = host or fingerprint()
    validate(spec, host)
    plan, skipped = plan_points(spec, host)
    emit = progress or (lambda event: None)
    for label, reason in skipped.items():
        emit(BackendSkipped(label, reason))
    sent = wires(spec, host)
    for name, _, _ in plan:
        if sent[name].converts and spec.via != VLLM:  # vLLM's own path converts by itself
            emit(WireConverted(name, spec.activation_dtype, sent[name].dtype, sent[name].why))
    emit(SweepStarted(sum(len(points) for _, points, _ in plan)))
    rank = launch.torchrun_rank()
    own_run = store is not None and run_id is None and rank == 0
    # a run begun here is finished here: complete, or interrupted / failed by what is raised
    run_cm = (store.run(host, trigger="manual", command="bench", meta={"spec": spec_meta(spec)})
              if own_run else nullcontext())
    pool_cm = nullcontext(groups) if groups is not None else WorkerGroups(keep=False)
    results: list[Result] = []
    with run_cm as run, launch.signals_raise(), pool_cm as pool:
        if own_run:
            run_id = run.id
        record = _Recorder(spec, host, store, run_id, rank, emit, results, {n: w.dtype for n, w in sent.items()})
        for name, points, illegal_at in plan:
            # vLLM's own prepare takes the model's activation dtype and sends what it sends itself
            dtype = spec.activation_dtype if spec.via == VLLM else sent[name].dtype
            config, job = group_config(spec, name, host), _job(spec, points, dtype)
            on_event = record.for_backend(name, illegal_at)
            if launch.under_torchrun():
                _check_torchrun(spec)
                launch.serve_in_process(config, job, on_event)
                continue
            report = pool.get(config).run(job, on_event)
            if not pool.keep:
                pool.close(name, "its sweep job is done")
            emit(JobFinished(name, report.points, report.seconds, len(report.startups)))
    emit(SweepFinished())
    return results


class _Recorder:
    """Turns the launcher's events for one sweep into Results (stored, returned, reported)."""

    def __init__(self, spec: SweepSpec, host, store, run_id, rank: int, emit, results: list, wires: dict[str, str]):
        self.spec, self.store, self.run_id, self.rank, self.emit, self.results = spec, store, run_id, rank, emit, results
        self.wires = wires  # backend -> the dtype its points' payload carried (recorded on each result)
        self.versions = _versions(host)
        self.knobs = dict(spec.knobs)
        if spec.env and "env" not in self.knobs:
            self.knobs["env"] = dict(spec.env)
        self.routing = parse_routing(spec.routing).label

    def for_backend(self, name: str, illegal_at: set[int]):
        """The ``on_event`` of one backend's job."""
        def on_event(ev):
            if isinstance(ev, (PointPhase, GroupStarted)):
                self.emit(ev)
            elif isinstance(ev, PointDone):
                self.point(name, ev, ev.tokens_per_rank in illegal_at)
        return on_event

    def point(self, name: str, done: PointDone, illegal: bool) -> None:
        s = self.spec
        result = Result(
            backend=name, world_size=s.world_size, tokens_per_rank=done.tokens_per_rank, hidden=s.hidden,
            top_k=s.top_k, experts=s.experts, activation_dtype=s.activation_dtype, wire_dtype=self.wires[name], routing=self.routing,
            status=done.status, error=done.error, device=s.device, illegal=illegal,
            knobs=self.knobs, versions=self.versions, via=s.via,
        )
        if done.status == "ok":
            result.timing, result.timing_note = done.timing, done.timing_note
        fields = dict(done.fields or {})
        path = fields.pop("code_path", None)  # the adapter's code path: recorded with the versions
        if path:
            result.versions = {**result.versions, **{str(k): str(v) for k, v in path.items()}}
        for key, value in fields.items():
            setattr(result, key, value)
        if self.rank == 0:
            self.results.append(result)
            if self.store is not None and done.status == HARNESS_ERROR:
                # not a measurement of the backend: kept with the run, never as a result row
                self.store.append_run_meta(self.run_id, "harness_failures", [
                    {"backend": name, "tokens_per_rank": done.tokens_per_rank, "error": done.error}])
            elif self.store is not None:
                self.store.add_result(self.run_id, result)
            self.emit(PointMeasured(result))


def spec_meta(spec: SweepSpec) -> dict:
    """The spec as stored in a run's meta (without the recorded knobs)."""
    return {k: v for k, v in asdict(spec).items() if k not in ("knobs",)}


def spec_target(spec: SweepSpec) -> TargetVersion:
    """The vLLM release ``spec`` is judged for and its adapters mirror: ``--vllm-version``, else the
    version every command resolves (:func:`autoselect.bridge.target_version`)."""
    return target_version(spec.vllm_version)


def group_config(spec: SweepSpec, backend: str, host) -> GroupConfig:
    """The start-up settings of ``backend``'s worker group for ``spec``."""
    return GroupConfig.make(backend, spec.world_size, spec.device, spec.env,
                            setup_timeout_s=spec.setup_timeout_s,
                            nvlinks_all_up=getattr(host, "all_nvlinks_up", None),
                            vllm_version=spec_target(spec).version,
                            gpu_arch=(spec.gpu_arch or getattr(host, "gpu_arch", None)) if spec.device == "cuda" else None,
                            dp_sizes=spec.dp_sizes, via=spec.via)


def _job(spec: SweepSpec, tokens: list[int], wire_dtype: str | None = None) -> Job:
    """One backend's job: its token counts, moving ``wire_dtype`` payloads (the backend's; default the activation dtype)."""
    routing = parse_routing(spec.routing)
    return Job(tokens=tuple(tokens), hidden=spec.hidden, top_k=spec.top_k, experts=spec.experts,
               wire_dtype=wire_dtype or spec.activation_dtype, routing=f"file:{routing.path}" if routing.kind == "file" else spec.routing,
               seed=spec.seed, max_noise=spec.max_noise, min_samples=spec.min_samples,
               min_time_s=spec.min_time_s, timeout_s=spec.timeout_s)


def _check_torchrun(spec: SweepSpec) -> None:
    world = int(os.environ["WORLD_SIZE"])
    if world != spec.world_size:
        raise BadSweep(f"torchrun started {world} ranks but --world-size is {spec.world_size}; make them equal")
