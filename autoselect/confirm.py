"""``autoselect confirm``: check the microbenchmark's verdict with vLLM's own forward pass.

For each candidate backend, ``vllm bench forward`` (vLLM >= 0.33,
``vllm/benchmarks/forward/``) runs the real model forward with dummy weights and balanced
MoE routing as one-shot CUDA graphs, with the flags ``recommend`` would emit. Its
``--output-json`` is parsed into :class:`db.records.Result` rows of kind ``"e2e"`` and
stored next to the ``"micro"`` ones; ``recommend`` shows both and warns when their winners
differ (:func:`autoselect.selector.e2e.e2e_evidence`).

The output format parsed here was read from vLLM 0.33.0's source (``main.py`` writes a
list with one entry per case: ``case``, ``requests``, ``median_us`` and ``ranks``, one
result dict per rank whose ``latency_us`` holds ``median``, ``sample_spread_pct``, ``mean``,
``std``, ``min``, ``p90``, ``count``, ``samples_us`` — every replay already the maximum over
ranks). Multi-GPU runs go through ``torchrun --nproc-per-node=N -m
vllm.entrypoints.cli.main bench forward``. The run needs vLLM with CUDA GPUs; without them
:func:`check_runnable` says so before anything is written.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from autoselect import bridge, rules
from autoselect.candidates import judge, legal_backends, resolve_target
from autoselect.errors import UserError
from autoselect.hardware import fingerprint
from autoselect.model import MoeProfile, load_profile, normalize_arch
from autoselect.options import CONFIRM_TOKENS, parse_int_list
from autoselect.vllm_flags import serve_flags
from autoselect.workload import Deployment, resolve_deployment
from db.records import Result

#: Above this many tokens per rank a case is one prefill request; at or below, that many decodes.
DECODE_MAX_TOKENS = 256
DEFAULT_KV_LEN = 4096
DEFAULT_ITERS = 20
DEFAULT_SAMPLES = 5
DEFAULT_TIMEOUT_S = 1800.0
#: vLLM warns about unstable timing above this spread of per-sample medians (percent).
STABLE_SPREAD_PCT = 0.5


class BadConfirmSetting(UserError):
    "A confirm setting (backends, kv length, iterations, samples, timeout) is out of range."


class ConfirmBackendIllegal(UserError):
    "A backend passed to confirm is illegal for the model on this deployment."


class ConfirmNeedsGpus(UserError):
    "confirm needs CUDA GPUs for every rank of the deployment."


class VllmLacksBenchForward(UserError):
    "The installed vLLM has no `vllm bench forward` (added in 0.33)."


class BadForwardOutput(UserError):
    "A `vllm bench forward --output-json` file is not in the format this autoselect reads."


# --------------------------------------------------------------------------------------
# The plan
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ForwardCase:
    """One ``--case`` of ``vllm bench forward``: its name and spec, and tokens per DP rank."""

    tokens_per_rank: int
    kv_len: int

    @property
    def name(self) -> str:
        """``decode32`` or ``prefill4096``."""
        return f"{'decode' if self.is_decode else 'prefill'}{self.tokens_per_rank}"

    @property
    def is_decode(self) -> bool:
        """Decode batches (one query token per request) up to :data:`DECODE_MAX_TOKENS`."""
        return self.tokens_per_rank <= DECODE_MAX_TOKENS

    @property
    def spec(self) -> str:
        """vLLM's ``NAME=[N*]Q[@K]`` syntax: T decodes over a KV of kv_len, or one T-token prefill."""
        if self.is_decode:
            return f"{self.name}={self.tokens_per_rank}*1@{self.kv_len}"
        return f"{self.name}={self.tokens_per_rank}"


@dataclass(frozen=True)
class ConfirmPlan:
    """Everything ``confirm`` will run, decided and validated before anything is started."""

    model: str
    profile: MoeProfile
    deployment: Deployment
    gpu_arch: str
    vllm_version: str
    backends: tuple[str, ...]
    cases: tuple[ForwardCase, ...]
    iters: int = DEFAULT_ITERS
    samples: int = DEFAULT_SAMPLES
    timeout_s: float = DEFAULT_TIMEOUT_S
    python: str = "python3"

    @property
    def dispatch_dtype(self) -> str:
        """The activation dtype the all2all carries on the plan's arch."""
        return self.profile.activation_dtype(self.gpu_arch)

    @property
    def max_model_len(self) -> int:
        """Room for the longest case (a decode's KV length or a prefill's tokens)."""
        return max(max(c.kv_len, c.tokens_per_rank) for c in self.cases)

    def serve_flags(self, backend: str) -> list[str]:
        """The `vllm serve` flags recommend would emit for ``backend`` on this deployment."""
        return serve_flags(backend, self.deployment, self.vllm_version)

    def argv(self, backend: str, output_json: str | os.PathLike) -> list[str]:
        """The launcher command for one backend: torchrun over every rank, or one process."""
        world = self.deployment.world_size
        launcher = [self.python, "-m", "vllm.entrypoints.cli.main"]
        if world > 1:
            launcher = [self.python, "-m", "torch.distributed.run", f"--nproc-per-node={world}",
                        "-m", "vllm.entrypoints.cli.main"]
        argv = launcher + ["bench", "forward", "--model", self.model, *self.serve_flags(backend)]
        for case in self.cases:
            argv += ["--case", case.spec]
        argv += ["--max-model-len", str(self.max_model_len), "--iters", str(self.iters),
                 "--samples", str(self.samples), "--output-json", str(output_json)]
        return argv

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary (commands with a placeholder output path)."""
        return {
            "model": self.model,
            "deployment": self.deployment.to_dict(),
            "gpu_arch": self.gpu_arch,
            "dispatch_dtype": self.dispatch_dtype,
            "vllm_version": self.vllm_version,
            "backends": list(self.backends),
            "cases": [c.spec for c in self.cases],
            "commands": {b: shlex.join(self.argv(b, "OUT.json")) for b in self.backends},
        }


def case_tokens(text: str | None) -> tuple[int, ...]:
    """``--tokens "32,256,4096"`` -> (32, 256, 4096), sorted and unique; None -> :data:`CONFIRM_TOKENS`.

    The integer-list grammar of :func:`autoselect.options.parse_int_list`.
    :raises autoselect.options.BadList: anything but a list of positive integers.
    """
    if text is None:
        return CONFIRM_TOKENS
    return tuple(sorted(set(parse_int_list(text, what="--tokens", example="32,256,4096"))))


def plan_confirm(model: str, *, backends: list[str] | None = None, tokens: str | None = None,
                 dp: int | None = None, tp: int | None = None, gpu_arch: str | None = None,
                 vllm_version: str | None = None, kv_len: int = DEFAULT_KV_LEN, iters: int = DEFAULT_ITERS,
                 samples: int = DEFAULT_SAMPLES, timeout_s: float = DEFAULT_TIMEOUT_S,
                 host=None, python: str = "python3") -> ConfirmPlan:
    """Validate every input and decide what to run (nothing is started or written).

    :param backends: ``--all2all-backend`` values; default: every backend the rules allow.
    :param host: the :class:`~autoselect.hardware.HostFingerprint` the run targets.
    :raises UserError: bad tokens, settings, deployment, arch, or a backend illegal for the model.
    """
    cases_tokens = case_tokens(tokens)
    for name, value, low in (("--kv-len", kv_len, 1), ("--iters", iters, 1), ("--samples", samples, 1)):
        if value < low:
            raise BadConfirmSetting(f"{name} {value} must be at least {low}")
    if not (timeout_s > 0 and math.isfinite(timeout_s)):
        raise BadConfirmSetting(f"--timeout {timeout_s} must be a positive number of seconds")
    arch = normalize_arch(gpu_arch) if gpu_arch else getattr(host, "gpu_arch", None)
    if arch is None:
        raise ConfirmNeedsGpus(
            "confirm runs vLLM on CUDA GPUs and this host has none; run it on the GPU node "
            "(or pass --gpu-arch with --dry-run to see the commands)"
        )
    profile = load_profile(model)
    deployment = resolve_deployment(dp, tp, None, getattr(host, "gpu_count", None) or None)
    # On a host without GPUs (a --dry-run with --gpu-arch) the hardware rules cannot be checked.
    rules_host = host if getattr(host, "device", None) == "cuda" else None
    target = resolve_target(profile, world_size=deployment.world_size, gpu_arch=arch, host=rules_host,
                            vllm_version=vllm_version)
    if backends is not None and not backends:
        raise BadConfirmSetting("--backends names no backend; pass e.g. allgather_reducescatter,deepep_low_latency "
                                "or leave it out for every legal one")
    if backends:
        chosen = []
        for backend in backends:
            rules.resolve(backend)  # an unknown name: UnknownBackend
            verdict = judge(target, backend)
            if not verdict.ok:
                raise ConfirmBackendIllegal(
                    f"{backend} cannot run {model} here: {'; '.join(verdict.reasons)}; "
                    "drop it from --backends"
                )
            chosen.append(rules.resolve(backend))
    else:
        chosen = legal_backends(target)
    cases = tuple(ForwardCase(t, max(kv_len, t)) for t in cases_tokens)
    return ConfirmPlan(model=model, profile=profile, deployment=deployment, gpu_arch=arch,
                       vllm_version=target.vllm_version, backends=tuple(dict.fromkeys(chosen)), cases=cases,
                       iters=iters, samples=samples, timeout_s=timeout_s, python=python)


def check_runnable(plan: ConfirmPlan, host, vllm=None) -> None:
    """Refuse, before anything is written, a run that cannot happen here.

    :param vllm: the :class:`~autoselect.bridge.VllmInfo` of the installed vLLM (None:
        check the GPUs only, before paying for vLLM's import).
    :raises ConfirmNeedsGpus: fewer CUDA GPUs than ranks.
    :raises VllmLacksBenchForward: a vLLM without ``vllm bench forward``.
    """
    gpus = getattr(host, "gpu_count", 0) if getattr(host, "device", "cpu") == "cuda" else 0
    if gpus < plan.deployment.world_size:
        raise ConfirmNeedsGpus(
            f"confirm needs {plan.deployment.world_size} CUDA GPU(s) for dp {plan.deployment.dp} x tp "
            f"{plan.deployment.tp} and this host has {gpus}; run it on the GPU node or lower --dp"
        )
    if vllm is not None and not vllm.has_bench_forward:
        raise VllmLacksBenchForward(
            f"{vllm.label()} has no `vllm bench forward`; install vLLM 0.33 or newer (pip install -U vllm)"
        )


# --------------------------------------------------------------------------------------
# Parsing vLLM's output
# --------------------------------------------------------------------------------------


def _shape_error(path: str, what: str) -> BadForwardOutput:
    return BadForwardOutput(
        f"{path}: {what}; expected `vllm bench forward --output-json` output (vLLM 0.33: a list of "
        "cases with case, median_us and ranks)"
    )


def parse_forward_output(data: Any, plan: ConfirmPlan, backend: str, *, source: str = "output",
                         versions: dict | None = None) -> list:
    """One e2e :class:`~db.records.Result` per case in a ``vllm bench forward`` JSON document.

    Latency is rank 0's ``latency_us`` (every replay is already the maximum over ranks).
    A non-finite forward output marks the row ``incorrect``.

    :raises BadForwardOutput: when the document is not in that format.
    """
    if not isinstance(data, list):
        raise _shape_error(source, "the top level is not a list")
    by_name = {c.name: c for c in plan.cases}
    results = []
    for entry in data:
        try:
            name, ranks = entry["case"], entry["ranks"]
            rank0 = ranks[0]
            latency = rank0["latency_us"]
            median = float(entry["median_us"])
            count = int(latency["count"])
        except (KeyError, IndexError, TypeError, ValueError) as e:
            raise _shape_error(source, f"a case lacks {e}") from None
        case = by_name.get(name)
        tokens = int(rank0.get("num_tokens") or (case.tokens_per_rank if case else 0))
        mean, std = float(latency.get("mean", median)), float(latency.get("std", 0.0))
        spread = float(latency.get("sample_spread_pct", 0.0))
        finite = rank0.get("finite", True)
        results.append(Result(
            backend=backend,
            world_size=plan.deployment.world_size,
            tokens_per_rank=tokens,
            hidden=plan.profile.hidden_size,
            top_k=plan.profile.top_k,
            experts=plan.profile.num_experts,
            dispatch_dtype=plan.dispatch_dtype,
            routing=str(rank0.get("routing", "balanced")),
            status="ok" if finite else "incorrect",
            error=None if finite else f"{name}: vllm bench forward produced non-finite outputs",
            kind="e2e",
            device="cuda",
            knobs={"vllm_args": plan.serve_flags(backend), "case": case.spec if case else name,
                   "timing_scope": rank0.get("timing_scope")},
            samples=count,
            latency_us_p50=median,
            latency_us_mean=mean,
            latency_us_min=latency.get("min"),
            latency_us_p90=latency.get("p90"),
            latency_stdrel=(std / mean) if mean else None,
            noise_stdrel=(1.2533 * std / math.sqrt(count) / median) if count and median else None,
            noise_target_met=spread <= STABLE_SPREAD_PCT,
            versions=dict(versions or {}),
            raw_samples_us=[float(x) for x in latency.get("samples_us", [])],
        ))
    return results


# --------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------


@dataclass
class BackendRun:
    """One backend's ``vllm bench forward`` run: its command, outcome and result rows."""

    backend: str
    command: str
    status: str  # "ok", "error", "timeout"
    elapsed_s: float
    results: list = field(default_factory=list)
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (results as dicts, raw samples left out)."""
        rows = []
        for r in self.results:
            d = r.to_dict()
            d.pop("raw_samples_us", None)
            rows.append(d)
        return {"backend": self.backend, "command": self.command, "status": self.status,
                "elapsed_s": round(self.elapsed_s, 3), "error": self.error, "results": rows}


@dataclass
class ConfirmReport:
    """What ``confirm`` ran and measured, and where it was stored."""

    plan: ConfirmPlan
    vllm_version: str | None
    runs: list[BackendRun]
    run_id: int | None = None
    db_path: str | None = None

    def winners(self) -> dict[int, str]:
        """Tokens per rank -> the backend with the lowest e2e median there (ok rows only)."""
        best: dict[int, tuple[float, str]] = {}
        for run in self.runs:
            for r in run.results:
                if r.status == "ok" and r.latency_us_p50 is not None:
                    if r.tokens_per_rank not in best or r.latency_us_p50 < best[r.tokens_per_rank][0]:
                        best[r.tokens_per_rank] = (r.latency_us_p50, r.backend)
        return {t: b for t, (_, b) in sorted(best.items())}

    def to_dict(self) -> dict[str, Any]:
        """The JSON ``confirm --format json`` prints."""
        return {"schema_version": 1, "plan": self.plan.to_dict(), "vllm_version": self.vllm_version,
                "run_id": self.run_id, "db": self.db_path,
                "runs": [r.to_dict() for r in self.runs],
                "winners": {str(t): b for t, b in self.winners().items()}}


def _tail(text: str | bytes | None) -> str:
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def run_backend(plan: ConfirmPlan, backend: str, *, versions: dict | None = None,
                env: dict | None = None, runner: Callable = subprocess.run) -> BackendRun:
    """Run ``vllm bench forward`` for one backend and parse what it wrote.

    A crash or a timeout is recorded (one ``error``/``timeout`` row per case), not raised:
    the other backends still run.
    """
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="autoselect-confirm-") as tmp:
        out = Path(tmp) / f"{backend}.json"
        argv = plan.argv(backend, out)
        command = shlex.join(argv)
        status, error, results = "ok", None, []
        try:
            proc = runner(argv, capture_output=True, text=True, timeout=plan.timeout_s,
                          env={**os.environ, **(env or {})})
            if proc.returncode != 0:
                status, error = "error", f"exit {proc.returncode}: {_tail(proc.stderr or proc.stdout)}"
            elif not out.exists():
                status, error = "error", f"no --output-json written: {_tail(proc.stderr or proc.stdout)}"
            else:
                try:
                    data = json.loads(out.read_text())
                except json.JSONDecodeError as e:
                    raise _shape_error(str(out), f"not JSON ({e.msg})") from None
                results = parse_forward_output(data, plan, backend, source=str(out), versions=versions)
        except subprocess.TimeoutExpired:
            status, error = "timeout", f"no answer within {plan.timeout_s:g} s"
    if status != "ok":
        results = [
            Result(backend=backend, world_size=plan.deployment.world_size, tokens_per_rank=c.tokens_per_rank,
                   hidden=plan.profile.hidden_size, top_k=plan.profile.top_k, experts=plan.profile.num_experts,
                   dispatch_dtype=plan.dispatch_dtype, routing="balanced", status=status, error=error,
                   kind="e2e", device="cuda", knobs={"vllm_args": plan.serve_flags(backend), "case": c.spec},
                   versions=dict(versions or {}))
            for c in plan.cases
        ]
    return BackendRun(backend, command, status, time.perf_counter() - started, results, error)


def run_confirm(plan: ConfirmPlan, *, store, host, vllm_version: str | None = None,
                command: str | None = None, runner: Callable = subprocess.run,
                progress: Callable[[dict], None] | None = None) -> ConfirmReport:
    """Run every backend of ``plan`` and store each result row as it arrives (kind ``e2e``).

    :param store: an open :class:`db.store.Store`.
    :param progress: called with ``{"event": "start"|"done", "backend": ..., "index": i, "total": n}``.
    """
    versions = dict(getattr(host, "versions", {}) or {})
    if vllm_version:
        versions["vllm"] = vllm_version
    runs: list[BackendRun] = []
    with store.run(host, trigger="confirm", command=command,
                   meta={"kind": "e2e", "tool": "vllm bench forward", "plan": plan.to_dict()}) as stored:
        for i, backend in enumerate(plan.backends):
            if progress:
                progress({"event": "start", "backend": backend, "index": i, "total": len(plan.backends)})
            run = run_backend(plan, backend, versions=versions, runner=runner)
            for result in run.results:
                store.add_result(stored.id, result)
            runs.append(run)
            if progress:
                progress({"event": "done", "backend": backend, "index": i, "total": len(plan.backends),
                          "status": run.status})
    return ConfirmReport(plan=plan, vllm_version=vllm_version, runs=runs, run_id=stored.id)


def confirm(model: str, *, db_path=None, backends: list[str] | None = None, tokens: str | None = None,
            dp: int | None = None, tp: int | None = None, gpu_arch: str | None = None,
            vllm_version: str | None = None, kv_len: int = DEFAULT_KV_LEN, iters: int = DEFAULT_ITERS,
            samples: int = DEFAULT_SAMPLES, timeout_s: float = DEFAULT_TIMEOUT_S, dry_run: bool = False,
            progress: Callable[[dict], None] | None = None) -> ConfirmReport:
    """``autoselect confirm`` from its flags: validate, check vLLM and GPUs, run, store.

    With ``dry_run`` only the plan is made (no vLLM, GPU or database needed).
    :raises UserError: bad input, no vLLM / no ``bench forward`` / too few GPUs (nothing written).
    """
    host = fingerprint()
    python = bridge.vllm_python()
    plan = plan_confirm(model, backends=backends, tokens=tokens, dp=dp, tp=tp, gpu_arch=gpu_arch,
                        vllm_version=vllm_version, kv_len=kv_len, iters=iters, samples=samples,
                        timeout_s=timeout_s, host=host, python=python or "python3")
    if dry_run:
        return ConfirmReport(plan=plan, vllm_version=None, runs=[])
    check_runnable(plan, host)
    vllm = bridge.vllm_info(python=bridge.require_vllm())
    check_runnable(plan, host, vllm)
    from db.store import Store  # heavy (sqlite_utils): only a run that measured pays for it

    with Store(db_path) as store:
        report = run_confirm(plan, store=store, host=host, vllm_version=vllm.version,
                             command=shlex.join(["autoselect", "confirm", "--model", model]), progress=progress)
        report.db_path = str(getattr(store, "path", db_path))
    return report
