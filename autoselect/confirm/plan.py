"""What ``confirm`` will run: the ``vllm bench forward`` cases and commands, decided before anything starts.

:func:`plan_confirm` validates every input and picks the backends (every one the rules allow for
the model, through :func:`autoselect.candidates.legal_backends`, unless ``--backends`` names
some); :class:`ConfirmPlan` spells each backend's command line with the flags ``recommend``
would emit; :func:`check_runnable` refuses, before anything is written, a run this host cannot do.
"""

from __future__ import annotations

import math
import os
import shlex
from dataclasses import dataclass
from typing import Any

from autoselect import rules
from autoselect.candidates import judge, legal_backends, resolve_target
from autoselect.errors import UserError
from autoselect.model import MoeProfile, load_profile, normalize_arch
from autoselect.options import (CONFIRM_ITERS, CONFIRM_KV_LEN, CONFIRM_SAMPLES, CONFIRM_TIMEOUT_S, CONFIRM_TOKENS,
                                parse_int_list)
from autoselect.vllm_flags import serve_flags
from autoselect.workload import Deployment, resolve_deployment

#: Above this many tokens per rank a case is one prefill request; at or below, that many decodes.
DECODE_MAX_TOKENS = 256


class BadConfirmSetting(UserError):
    "A confirm setting (backends, kv length, iterations, samples, timeout) is out of range."


class ConfirmBackendIllegal(UserError):
    "A backend passed to confirm is illegal for the model on this deployment."


class ConfirmNeedsGpus(UserError):
    "confirm needs CUDA GPUs for every rank of the deployment."


class VllmLacksBenchForward(UserError):
    "The installed vLLM has no `vllm bench forward` (added in 0.33)."


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
    iters: int = CONFIRM_ITERS
    samples: int = CONFIRM_SAMPLES
    timeout_s: float = CONFIRM_TIMEOUT_S
    python: str = "python3"

    @property
    def activation_dtype(self) -> str:
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
            "activation_dtype": self.activation_dtype,
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
                 vllm_version: str | None = None, kv_len: int = CONFIRM_KV_LEN, iters: int = CONFIRM_ITERS,
                 samples: int = CONFIRM_SAMPLES, timeout_s: float = CONFIRM_TIMEOUT_S,
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
                            vllm_version=vllm_version, tensor_parallel_size=deployment.tp)
    chosen = _chosen_backends(model, target, backends)
    cases = tuple(ForwardCase(t, max(kv_len, t)) for t in cases_tokens)
    return ConfirmPlan(model=model, profile=profile, deployment=deployment, gpu_arch=arch,
                       vllm_version=target.vllm_version, backends=tuple(dict.fromkeys(chosen)), cases=cases,
                       iters=iters, samples=samples, timeout_s=timeout_s, python=python)


def _chosen_backends(model: str, target, backends: list[str] | None) -> list[str]:
    """The backends ``--backends`` names (canonical names, each legal for ``target``), else every legal one.

    :raises BadConfirmSetting: an empty list; :raises ConfirmBackendIllegal: an illegal backend.
    """
    if backends is not None and not backends:
        raise BadConfirmSetting("--backends names no backend; pass e.g. allgather_reducescatter,deepep_low_latency "
                                "or leave it out for every legal one")
    if not backends:
        return legal_backends(target)
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
    return chosen


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

