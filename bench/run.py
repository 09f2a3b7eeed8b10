"""``autoselect bench`` as a library call: resolve the shape, validate, sweep, store, report.

:func:`run_bench` is what the CLI calls; :class:`BenchReport` is what it prints (text or the
JSON document), including what each backend's worker group cost: its start-ups (spawn to
ready, and why) and its job's wall time, so the per-point cost is visible next to the
start-up.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from autoselect import rules
from autoselect.errors import GpuArchRequired, MissingShape, UserError
from autoselect.hardware import fingerprint
from autoselect.model import load_profile, normalize_arch
from autoselect.options import DEFAULT_TOKENS, SETUP_TIMEOUT_S, parse_int_list, parse_name_list
from autoselect.stopping import STOPPING
from autoselect.reference.health import ReferenceCheck, check_results
from autoselect.workload import Shape
from bench import launch
from bench.backends import available
from bench.events import BackendSkipped, WireConverted
from bench.launch import WorkerGroups
from bench.sweep import SweepSpec, check_harness, run_sweep, spec_meta, spec_target, validate
from db.records import ADAPTER, EQUAL, Result
from db.store import Store


class ShapeOptions(UserError):
    "The model shape was given both ways: --model and --hidden/--top-k/--experts/--dtype."


@dataclass
class BenchReport:
    """What ``autoselect bench`` prints: the spec, the results, the skipped backends, where they are stored.

    ``groups``: per backend, its worker group's start-ups (seconds, reason) and jobs (points,
    seconds) (:meth:`bench.launch.WorkerGroups.summary`). ``wire``: the backends whose points moved
    another dtype than the model's activation dtype, as vLLM sends them: ``{backend: {"wire_dtype",
    "why"}}``.
    """

    spec: SweepSpec
    results: list[Result]
    skipped: dict[str, str]
    run_id: int | None
    db_path: str | None
    host: object = None
    groups: list[dict] = field(default_factory=list)
    wire: dict[str, dict] = field(default_factory=dict)
    vllm_version: str | None = None  # the release legality was judged for and the adapters mirror

    @property
    def vllm_version_warning(self) -> str | None:
        """The line every command prints when the target release is newer than the rules tables."""
        return rules.newer_than_known(self.vllm_version) if self.vllm_version else None

    @property
    def startups(self) -> int:
        """Worker-group start-ups paid, over all backends."""
        return sum(len(g["startups"]) for g in self.groups)

    def to_dict(self) -> dict:
        """The JSON document (``schema_version`` 2); raw samples are left out (they are in the store)."""
        rows = []
        for r in self.results:
            d = r.to_dict()
            d.pop("raw_samples_us", None)
            rows.append(d)
        check = self.reference_check()
        return {"schema_version": 2, "run_id": self.run_id, "db": self.db_path, "spec": asdict(self.spec),
                "vllm_version": self.vllm_version, "vllm_version_warning": self.vllm_version_warning,
                "skipped": self.skipped, "wire": self.wire, "results": rows, "startups": self.startups,
                "worker_groups": self.groups, "reference": check.to_dict() if check else None}

    def reference_check(self) -> ReferenceCheck | None:
        """The ok rows against NVIDIA's published reference, when this host is a reference system."""
        return check_results(self.results, self.host)


def resolve_shape(host, *, model=None, gpu_arch=None, hidden=None, top_k=None, experts=None,
                  dtype=None) -> tuple[int, int, int, str, str | None]:
    """``(hidden, top_k, experts, dtype, gpu_arch)`` from ``--model`` + arch, or the explicit sizes."""
    shape = (hidden, top_k, experts, dtype)
    if model is not None and any(v is not None for v in shape):
        raise ShapeOptions("pass either --model or --hidden/--top-k/--experts/--dtype, not both")
    if model is not None:
        arch = gpu_arch or host.gpu_arch
        if not arch:
            raise GpuArchRequired(f"--model {model} on a host without a GPU: pass --gpu-arch sm90|sm100 "
                                  "to choose the activation dtype")
        arch = normalize_arch(arch)
        profile = load_profile(model)
        return profile.hidden_size, profile.top_k, profile.num_experts, profile.activation_dtype(arch), arch
    if Shape.from_options(hidden=hidden, top_k=top_k, experts=experts, dtype=dtype) is None:
        raise MissingShape("nothing to measure: pass --model, or all of --hidden/--top-k/--experts/--dtype")
    return hidden, top_k, experts, dtype, normalize_arch(gpu_arch) if gpu_arch else None


def check_choices(host, *, model, gpu_arch, device) -> None:
    """On a host without a GPU, every choice it cannot make itself, named in one error: the arch
    whose activation dtype ``--model`` stands for, and the device (``--device cuda`` cannot run).
    One of them alone is left to its own check (:func:`resolve_shape`, :func:`bench.sweep.validate`)."""
    missing = []
    if model is not None and not (gpu_arch or host.gpu_arch):
        missing.append("--gpu-arch sm90|sm100 (the arch whose activation dtype to measure)")
    if device == "cuda" and not host.gpu_count:
        missing.append("--device cpu (it measures over gloo processes)")
    if len(missing) > 1:
        raise GpuArchRequired(f"this host has no GPU: pass {' and '.join(missing)}")


def run_bench(*, model=None, gpu_arch=None, hidden=None, top_k=None, experts=None, dtype=None,
              backends=None, tokens=None, world_size=None, device=None, routing="uniform",
              seed=0, max_noise=STOPPING.max_noise, min_samples=STOPPING.min_samples,
              min_time_s=STOPPING.min_time_s, timeout_s=STOPPING.timeout_s, setup_timeout_s=SETUP_TIMEOUT_S, include_illegal=False, vllm_version=None, db_path=None,
              progress=None, dp_sizes=EQUAL, via=ADAPTER) -> BenchReport:
    """Resolve the shape (``--model`` + arch, or explicit sizes), validate, sweep, store.

    Everything is validated before the database is opened. ``backends``/``tokens`` are
    comma lists (default: every registered adapter; the decode grid 1..256); ``device`` defaults to
    the host's (cuda with GPUs, else cpu), as for ``tune``. Each backend
    runs in one worker group, started once (:class:`bench.launch.WorkerGroups`). ``dp_sizes`` and
    ``via``: the footing (:class:`bench.sweep.SweepSpec`); ``--via vllm`` refuses a CPU device or a
    Python without vLLM before anything starts.
    """
    check_harness()
    host = fingerprint()
    device = device or host.device
    check_choices(host, model=model, gpu_arch=gpu_arch, device=device)
    hidden, top_k, experts, dtype, gpu_arch = resolve_shape(
        host, model=model, gpu_arch=gpu_arch, hidden=hidden, top_k=top_k, experts=experts, dtype=dtype)
    names = parse_name_list(backends, what="--backends") if backends is not None else list(available())
    token_list = parse_int_list(tokens, what="--tokens") if tokens is not None else list(DEFAULT_TOKENS)
    if world_size is None:
        world_size = (host.gpu_count or 1) if device == "cuda" else 2
    spec = SweepSpec(backends=names, tokens=token_list, hidden=hidden, top_k=top_k, experts=experts,
                     activation_dtype=dtype, world_size=world_size, device=device, routing=routing, seed=seed,
                     max_noise=max_noise, min_samples=min_samples, min_time_s=min_time_s,
                     timeout_s=timeout_s, include_illegal=include_illegal, gpu_arch=gpu_arch,
                     vllm_version=vllm_version, setup_timeout_s=setup_timeout_s, dp_sizes=dp_sizes, via=via)
    validate(spec, host)  # bad --vllm-version / NVSHMEM_QP_DEPTH fail here, before the store opens
    target = spec_target(spec).version
    skipped: dict[str, str] = {}
    wire: dict[str, dict] = {}

    def on_progress(event):
        if isinstance(event, BackendSkipped):
            skipped[event.label] = event.reason
        elif isinstance(event, WireConverted):
            wire[event.backend] = {"wire_dtype": event.wire, "why": event.why}
        if progress:
            progress(event)

    with WorkerGroups(keep=False) as groups:
        if launch.torchrun_rank() != 0:
            results = run_sweep(spec, host=host, progress=on_progress, groups=groups)
            return BenchReport(spec, results, skipped, None, None, host, wire=wire, vllm_version=target)
        with Store(db_path) as store:
            with store.run(host, trigger="manual", command="autoselect bench",
                           meta={"spec": spec_meta(spec)}) as run:
                results = run_sweep(spec, store=store, run_id=run.id, host=host, progress=on_progress,
                                    groups=groups)
            return BenchReport(spec, results, skipped, run.id, str(store.path), host, groups.summary(), wire,
                               target)
