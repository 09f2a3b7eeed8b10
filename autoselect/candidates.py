"""Which backends may run a model: one legality filter for every command.

``recommend`` (which backends to compare), ``tune`` (which to race), ``bench`` (which points to
measure or mark illegal) and ``confirm`` (which to run end to end) all judge a backend through
:func:`candidate_backends` over a :class:`Target`, so they all judge against the same vLLM
version: ``--vllm-version`` where the command has it, else the version
:func:`autoselect.bridge.target_version` resolves (the vllm of ``$AUTOSELECT_VLLM_PYTHON``,
else this environment's, else the newest the rules know), and never the host fingerprint's
own package list. The rules themselves are :func:`autoselect.rules.legal`'s; nothing here
re-implements one.
"""

from __future__ import annotations

from typing import Iterable, Mapping, NamedTuple

from autoselect import rules
from autoselect.bridge import SOURCE_FLAG, target_version
from autoselect.errors import UnknownBackend, UserError
from autoselect.hardware import HostFingerprint
from autoselect.model import GPU_ARCHS, MoeProfile, normalize_arch
from autoselect.rules import Verdict


class Target(NamedTuple):
    """What a backend is judged for: a model on an arch at an EP size under one vLLM version.

    ``gpu_arch`` None (a CPU host without ``--gpu-arch``) judges on every known arch: a backend is
    illegal only where it is illegal on all of them. ``host`` None leaves the hardware and package
    rules unchecked (a ``--device cpu`` run; ``legal`` says so in a warning).
    ``max_num_batched_tokens`` and ``environ`` feed the per-token kernel limits (vLLM's
    ``--max-num-batched-tokens``; an exported ``NVSHMEM_QP_DEPTH``). ``tensor_parallel_size``
    (the deployment's ``-tp``; None: unknown) judges the upstream reports that need TP > 1:
    with a known tp they apply or not, unknown they are worded as a condition.
    ``redundant_experts`` (EPLB's ``num_redundant_experts``) count as experts for the kernels.
    ``platform`` None is vLLM on GPUs; ``"cpu"`` (a host without GPUs) judges by the CPU
    platform's row (:data:`autoselect.rules.PLATFORMS`): no GPU arch, only what its communicator builds.
    ``serving_host``: ``host`` is the machine that will serve (:func:`serves`): its packages and
    NVLinks decide what it can run. False: the answer is for other GPUs than ``host``'s (a CPU
    machine planning for ``--gpu-arch sm90``), whose packages and links are not the serving host's:
    a backend is then legal or not by the rules alone, with what the serving host needs said
    beside it (:attr:`autoselect.rules.Verdict.requirements`).
    """

    profile: MoeProfile
    world_size: int
    vllm_version: str
    vllm_version_source: str = SOURCE_FLAG
    gpu_arch: str | None = None
    host: HostFingerprint | None = None
    max_num_batched_tokens: int | None = None
    environ: Mapping[str, str] | None = None
    tensor_parallel_size: int | None = None
    redundant_experts: int = 0
    platform: str | None = None
    serving_host: bool = True

    def with_token_budget(self, max_num_batched_tokens: int | None) -> "Target":
        """The same target under the token budget ``max_num_batched_tokens`` (per engine, so per rank)."""
        return self._replace(max_num_batched_tokens=max_num_batched_tokens)


class VllmWithoutBackendFlag(UserError):
    "A target vLLM release older than the --all2all-backend flag: there is no backend to choose."


def check_vllm_version(version: str) -> str:
    """``version`` when it is a release that has ``--all2all-backend``; the same refusal for every
    command that picks or measures a backend for a target vLLM (``recommend``, ``bench``,
    ``tune``, ``confirm``).

    :raises autoselect.rules.InvalidVllmVersion: a version that does not parse.
    :raises VllmWithoutBackendFlag: a release before :data:`autoselect.rules.FLAG_SINCE`.
    """
    if not rules.version_in(version, rules.FLAG_SINCE, None):
        raise VllmWithoutBackendFlag(f"vLLM {version} has no --all2all-backend flag (it arrived in "
                                     f"{rules.FLAG_SINCE}); pass a newer --vllm-version")
    return version


def serves(host: HostFingerprint | None, gpu_arch: str | None) -> bool:
    """True when ``host`` is the machine an answer for ``gpu_arch`` is for: its own GPUs' arch (or no
    arch asked, so the host's). A host without GPUs, or with another arch, only plans the answer:
    its packages and links are not the serving host's. Without a host nothing is judged of one."""
    if host is None or gpu_arch is None:
        return True
    return bool(host.gpu_arch) and normalize_arch(host.gpu_arch) == normalize_arch(gpu_arch)


def resolve_target(profile: MoeProfile, *, world_size: int, gpu_arch: str | None = None,
                   host: HostFingerprint | None = None, vllm_version: str | None = None,
                   vllm_version_source: str | None = None, max_num_batched_tokens: int | None = None,
                   environ: Mapping[str, str] | None = None, tensor_parallel_size: int | None = None,
                   redundant_experts: int = 0, platform: str | None = None, require_flag: bool = True,
                   problems: list[str] | None = None) -> Target:
    """A :class:`Target`, the vLLM version resolved as every command resolves it.

    :param gpu_arch: the target arch (any spelling); default ``host.gpu_arch``; None: every known arch.
    :param host: the host whose hardware rules apply, or None (unchecked); it serves the answer
        only when ``gpu_arch`` is its own arch (:func:`serves`).
    :param vllm_version: ``--vllm-version``; None: :func:`autoselect.bridge.target_version`.
    :param vllm_version_source: where an explicit ``vllm_version`` came from (default ``--vllm-version``).
    :param tensor_parallel_size: the deployment's ``-tp`` (None: unknown).
    :param redundant_experts: EPLB's redundant experts of the deployment.
    :param platform: None (GPUs) or a platform of :data:`autoselect.rules.PLATFORMS`.
    :param require_flag: refuse a release without ``--all2all-backend`` (everything that picks or
        measures a backend); False judges a backend the line itself names, whatever the release
        (``launch``: ``VLLM_ALL2ALL_BACKEND`` on a release before the flag).
    :param problems: collects a sentence for a ``$AUTOSELECT_VLLM_PYTHON`` that could not be read.
    :raises autoselect.rules.InvalidVllmVersion: an explicit version that does not parse.
    :raises VllmWithoutBackendFlag: a target release without --all2all-backend.
    """
    if vllm_version:
        version, source = target_version(vllm_version)
        source = vllm_version_source or source
    else:
        version, source = target_version(problems=problems)
    if require_flag:
        check_vllm_version(version)
    serving = serves(host, gpu_arch)
    gpu_arch = gpu_arch or (host.gpu_arch if host is not None else None)
    return Target(profile=profile, world_size=world_size, vllm_version=version, vllm_version_source=source,
                  gpu_arch=normalize_arch(gpu_arch) if gpu_arch else None, host=host,
                  max_num_batched_tokens=max_num_batched_tokens, environ=environ,
                  tensor_parallel_size=tensor_parallel_size, redundant_experts=redundant_experts,
                  platform=platform, serving_host=serving)


def judge(target: Target, backend: str) -> Verdict | None:
    """:func:`autoselect.rules.legal`'s verdict on ``backend`` for ``target``.

    None for a name the rules table does not know (a third-party benchmark adapter): it is
    measured unjudged, never recommended. Without a target arch the first arch that accepts the
    backend answers, else the first arch's verdict (its reasons); a platform without GPUs has no arch.
    """
    gpus = target.platform in (None, rules.CUDA)
    archs = ((target.gpu_arch,) if target.gpu_arch else GPU_ARCHS) if gpus else (None,)
    try:
        verdicts = [rules.legal(backend, target.profile, target.host, target.world_size, target.vllm_version,
                                gpu_arch=arch, max_num_batched_tokens=target.max_num_batched_tokens,
                                environ=target.environ, tensor_parallel_size=target.tensor_parallel_size,
                                redundant_experts=target.redundant_experts, platform=target.platform,
                                serving_host=target.serving_host)
                    for arch in archs]
    except UnknownBackend:
        return None
    return next((v for v in verdicts if v.ok), verdicts[0])


def candidate_backends(target: Target, backends: Iterable[str] | None = None) -> dict[str, Verdict | None]:
    """``{backend: verdict}`` for ``backends`` (default: every backend vLLM ``target.vllm_version``
    has an ``--all2all-backend`` value for, in the rules table's order), judged by :func:`judge`."""
    names = rules.recommendable_backends(target.vllm_version) if backends is None else list(backends)
    return {name: judge(target, name) for name in names}


def legal_backends(target: Target, backends: Iterable[str] | None = None) -> list[str]:
    """The backends :func:`candidate_backends` accepts (a verdict that is ok), in order."""
    return [name for name, verdict in candidate_backends(target, backends).items()
            if verdict is not None and verdict.ok]
