"""Step 1 of the pipeline: what the answer is for, resolved once and frozen.

Every later step (evidence, judging, deciding, flags) reads the :class:`RecommendTarget`: the
model and its dispatch dtype on the target arch, the deployment, the host (class) whose
measurements count, the workload, the legality target (:class:`autoselect.candidates.Target`,
which carries the vLLM version), and the software versions a measurement is fresh against.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Mapping, NamedTuple

from autoselect import reference, rules
from autoselect.candidates import Target, resolve_target
from autoselect.errors import GpuArchRequired
from autoselect.hardware import HostFingerprint, is_reference_class
from autoselect.model import MoeProfile, normalize_arch
from autoselect.rules.batch_defaults import TokenBudget
from autoselect.rules.wire import Wire, wire_of
from autoselect.workload import Deployment, WorkloadSpec, workload_from_kind

#: Version keys compared between a measurement and the target for the staleness warning.
STALENESS_KEYS = ("vllm", "flashinfer", "driver")


class RecommendTarget(NamedTuple):
    """What one recommendation is for (see the module docstring)."""

    profile: MoeProfile
    deployment: Deployment
    host_class: str | None
    host: HostFingerprint | None
    gpu_arch: str
    activation_dtype: str
    workload: WorkloadSpec
    legality: Target
    max_num_batched_tokens: int | None = None  # the per-engine budget the user set, if any
    max_workspace_gib: float | None = None
    #: the versions of :data:`STALENESS_KEYS` the answer targets (None: unknown, never stale)
    versions: Mapping[str, str | None] = MappingProxyType({})
    #: the token budget per engine the answer assumes: the user's, else vLLM's default for the GPU
    budget: TokenBudget | None = None

    @property
    def world_size(self) -> int:
        """The EP size the all2all spans."""
        return self.deployment.world_size

    @property
    def vllm_version(self) -> str:
        """The vLLM version flags are judged and spelled for."""
        return self.legality.vllm_version

    @property
    def gpu_memory_mib(self) -> int | None:
        """The smallest GPU memory of the host (one-sided workspace sizing), None when unknown."""
        return gpu_memory_mib(self.host)

    def wire(self, backend: str) -> "Wire | None":
        """What ``backend`` sends for this model on this target: behind the expert kernel vLLM runs
        (:func:`autoselect.rules.wire.wire_of`; EPLB when the deployment has redundant experts)."""
        return wire_of(backend, self.profile.weight_quant, self.gpu_arch, self.vllm_version, self.legality.environ,
                       activation=self.activation_dtype, ep_size=self.world_size,
                       eplb=self.legality.redundant_experts > 0)


def gpu_memory_mib(host: HostFingerprint | None) -> int | None:
    """The smallest GPU memory of ``host`` in MiB (None without GPUs or host)."""
    sizes = [g.memory_total_mib for g in (host.gpus if host is not None else []) if g.memory_total_mib]
    return min(sizes) if sizes else None


def default_budget(host: HostFingerprint | None, host_class: str | None, gpu_arch: str | None, vllm_version: str,
                   deployment: Deployment, max_num_batched_tokens: int | None = None) -> rules.TokenBudget:
    """The token budget per engine an answer assumes and where it came from: ``--max-num-batched-tokens``,
    else vLLM's default for the smallest GPU memory of ``host`` (a reference class's: its system's
    GPUs), else for the smallest data-center GPU of ``gpu_arch`` (:func:`autoselect.rules.token_budget`)."""
    if is_reference_class(host_class):
        where = f"{host_class}'s GPU memory"
    elif host is not None and host.host_class:
        where = f"host class {host.host_class}'s GPUs"
    else:
        where = "this machine's GPUs"
    gpus = host.gpus if host is not None else []
    name = gpus[0].name if gpus and getattr(gpus[0], "name", None) else None
    return rules.token_budget(rules.DEFAULT_BACKEND, vllm_version, gpu_memory_mib=gpu_memory_mib(host),
                              gpu_arch=gpu_arch, gpu_name=name, max_num_batched_tokens=max_num_batched_tokens,
                              data_parallel_size=deployment.dp, memory_from=where)


def resolve(profile: MoeProfile, *, deployment: Deployment, host_class: str | None = None,
            host: HostFingerprint | None = None, gpu_arch: str | None = None, vllm_version: str | None = None,
            vllm_version_source: str | None = None, workload: WorkloadSpec | str | None = None,
            max_num_batched_tokens: int | None = None, max_workspace_gib: float | None = None) -> RecommendTarget:
    """The :class:`RecommendTarget` of :func:`autoselect.selector.recommend`'s arguments.

    Defaults: the host's class and arch, the vLLM version every command resolves
    (:func:`autoselect.candidates.resolve_target`), the ``mixed`` workload. A ``workload`` kind
    (``"prefill"``) is built with the answer's token budget (:func:`default_budget`). A reference class
    (``ref-h200_sxm-x8``) answers for a machine of its system: its arch, and (without ``host``) the
    host it stands for (:func:`autoselect.reference.host.reference_host`).

    :raises GpuArchRequired: no arch given and the host has none (a CPU host).
    :raises GpuArchNotOfReference, ReferenceWorldSizeUnavailable, UnknownReferenceClass: a reference
        class asked for another arch, a world size it cannot describe, or one that does not exist.
    """
    if host_class is None and host is not None:
        host_class = host.host_class
    of_reference = is_reference_class(host_class)
    if of_reference:
        ref = reference.get_class(host_class)
        gpu_arch = ref.check_arch(normalize_arch(gpu_arch) if gpu_arch else None)
        ref.check_world_size(deployment.world_size)
        host = host if host is not None else reference.reference_host(ref)
    gpu_arch = gpu_arch or (host.gpu_arch if host is not None else None)
    if not gpu_arch:
        raise GpuArchRequired(
            "the target host has no GPU architecture (a CPU host?); pass --gpu-arch sm90|sm100 "
            "or --host-class of a GPU host in the database"
        )
    gpu_arch = normalize_arch(gpu_arch)
    legality = resolve_target(profile, world_size=deployment.world_size, gpu_arch=gpu_arch, host=host,
                              vllm_version=vllm_version, vllm_version_source=vllm_version_source,
                              max_num_batched_tokens=max_num_batched_tokens, tensor_parallel_size=deployment.tp)
    budget = default_budget(host, host_class, gpu_arch, legality.vllm_version, deployment, max_num_batched_tokens)
    if workload is None or isinstance(workload, str):  # a --workload kind: its prefill step is this budget
        workload = workload_from_kind(workload or "mixed", deployment, max_num_batched_tokens=budget.tokens)
    versions = {  # a reference class has no installed versions: its packages are the serving host's
        "vllm": legality.vllm_version,
        "flashinfer": (host.versions or {}).get("flashinfer") if host and not of_reference else None,
        "driver": host.driver_version if host and not of_reference else None,
    }
    return RecommendTarget(profile=profile, deployment=deployment, host_class=host_class, host=host,
                           gpu_arch=gpu_arch, activation_dtype=profile.activation_dtype(gpu_arch), workload=workload,
                           legality=legality, max_num_batched_tokens=max_num_batched_tokens,
                           max_workspace_gib=max_workspace_gib, versions=versions, budget=budget)
