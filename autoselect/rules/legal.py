""":func:`legal`: every rule of the tables evaluated for one backend, every reason returned."""

from __future__ import annotations

from dataclasses import dataclass

# InvalidWorldSize and GpuArchRequired are shared by several commands (autoselect.errors)
from autoselect.errors import GpuArchRequired, InvalidWorldSize, UserError
from autoselect.rules.backends import ALIASES, BACKENDS, Capability, recommendable_backends, resolve
from autoselect.rules.budgets import CHUNK_SIZE, CHUNKING_SWITCH, CHUNKING_SWITCH_SOURCE, Budget, dispatch_budget
from autoselect.rules.limits import DEEPEP_NVL_PEERS, Limit
from autoselect.rules.one_sided import one_sided_consequence
from autoselect.rules.reports import reports_for
from autoselect.rules.selection import IGNORED, IGNORED_WARNED, selection_era
from autoselect.rules.versions import NEWEST_VLLM, parse_version, version_in


class InvalidTokensPerRank(UserError):
    "The per-rank token maximum (vLLM's --max-num-batched-tokens) is not a positive integer."


class InvalidRedundantExperts(UserError):
    "The number of EPLB redundant experts is not a non-negative integer."


@dataclass(frozen=True)
class Verdict:
    """Whether a backend may be used for a model / host / world size / vLLM version, and why."""

    backend: str
    ok: bool
    reasons: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        """A JSON-ready dict."""
        return {"backend": self.backend, "ok": self.ok, "reasons": list(self.reasons),
                "warnings": list(self.warnings)}


def _round_up(hidden: int, sizes: tuple[int, ...]) -> int | None:
    return next((s for s in sizes if s >= hidden), None)


def _sizes(sizes) -> str:
    """``2, 4, 8 within a node or 16, 24 across nodes`` for a set of DeepEP EP sizes."""
    within = [str(n) for n in sorted(sizes) if n <= DEEPEP_NVL_PEERS]
    across = [str(n) for n in sorted(sizes) if n > DEEPEP_NVL_PEERS]
    parts = [f"{', '.join(within)} within a node"] if within else []
    return " or ".join(parts + ([f"{', '.join(across)} across nodes"] if across else []))


def _limit_applies(limit: Limit | None, world_size: int) -> bool:
    """True when ``limit`` is set and binds at ``world_size`` (there is an all2all, and an
    intranode-only limit only while the group fits one NVLink domain)."""
    return (limit is not None and world_size > 1
            and (not limit.intranode_only or world_size <= DEEPEP_NVL_PEERS))


def _kernel_limit_reasons(cap: Capability, profile, world_size: int, arch: str, dtype: str,
                          budget: Budget | None, experts: int, environ) -> list[str]:
    """One reason per DeepEP kernel limit (:class:`Limit` fields of ``cap``) the deployment breaks.

    ``budget``: the dispatch buffer the per-token limits apply to (None: the backend has none);
    ``experts``: the physical experts (routed + EPLB redundant) the kernels see.
    """
    out: list[str] = []
    name = cap.backend
    if _limit_applies(cap.world_sizes, world_size) and world_size not in cap.world_sizes.value:
        out.append(f"{name} runs at EP sizes {_sizes(cap.world_sizes.value)}, not {world_size} "
                   f"({cap.world_sizes.source})")
    grouping = cap.world_size_grouping
    if _limit_applies(grouping, world_size) and world_size >= grouping.value and world_size % grouping.value:
        out.append(f"{name} needs fewer than {grouping.value} ranks or a multiple of {grouping.value}, "
                   f"not {world_size} ({grouping.source})")
    local = cap.max_local_experts
    if _limit_applies(local, world_size) and experts // world_size > local.value:
        out.append(f"{name} intranode (EP <= {DEEPEP_NVL_PEERS}) handles at most {local.value} experts per rank, not "
                   f"{experts // world_size} ({experts} experts over EP {world_size}); "
                   f"use more ranks ({local.source})")
    rows = cap.max_row_bytes
    if _limit_applies(rows, world_size) and arch in rows.value.max_bytes:
        limit, row = rows.value.max_bytes[arch], rows.value.row_bytes(dtype, profile.hidden_size)
        if row > limit:
            wire = "fp8" if rows.value.value_bytes.get(dtype, 2) == 1 else "bf16"
            out.append(f"{name} intranode (EP <= {DEEPEP_NVL_PEERS}) dispatches rows of at most {limit} bytes "
                       f"on {arch}: a {wire} row of hidden "
                       f"{rows.value.padded_hidden(profile.hidden_size)} is {row} bytes ({rows.source})")
    tokens = cap.max_tokens_per_rank
    if _limit_applies(tokens, world_size) and budget is not None:
        depth = tokens.value
        most = depth.max_tokens(environ)
        if budget.tokens > most:
            out.append(f"{name} dispatches at most {most} tokens per rank with {depth.env}="
                       f"{depth.depth(environ)}, not {budget.tokens} ({budget.describe()}): lower "
                       f"{budget.setting} to {most} or set {depth.env} to at least "
                       f"{depth.depth_for(budget.tokens)} ({tokens.source})")
    slots = cap.slots_multiple_of
    if _limit_applies(slots, world_size) and budget is not None and (world_size * budget.tokens) % slots.value:
        out.append(f"{name} needs EP size x tokens per rank to be a multiple of {slots.value}, not "
                   f"{world_size} x {budget.tokens} = {world_size * budget.tokens} ({budget.describe()}): make "
                   f"{budget.setting} a multiple of {slots.value} ({slots.source})")
    if world_size > 1 and budget is not None and budget.overruns and cap.max_tokens_per_rank is not None:
        batch = "--max-num-batched-tokens (vLLM's default)" if budget.per_call is None else \
            f"--max-num-batched-tokens {budget.per_call}"
        out.append(f"{CHUNKING_SWITCH}=0 turns off vLLM's MoE chunking: batches up to {batch} reach a "
                   f"{name} buffer sized for {budget.describe()}; set --max-num-batched-tokens to at most "
                   f"{budget.tokens}, raise {CHUNK_SIZE}, or drop {CHUNKING_SWITCH}=0 ({CHUNKING_SWITCH_SOURCE})")
    return out


def _known_to(cap: Capability, value: str, version: str) -> bool:
    """True when ``version`` can be told to run ``cap``: by the flag, or by VLLM_ALL2ALL_BACKEND."""
    if cap.spelling(version) is not None:
        return True
    era = selection_era(version)
    return era.variable not in (IGNORED, IGNORED_WARNED) and value in era.variable_values


def legal(backend, profile, host, world_size, vllm_version, *, gpu_arch=None, max_tokens_per_rank=None,
          environ=None, tensor_parallel_size=None, role=None, redundant_experts=0) -> Verdict:
    """Every reason ``backend`` cannot serve ``profile`` at ``world_size`` (EP size) on ``vllm_version``.

    :param backend: an ``--all2all-backend`` value (old spellings are resolved) or ``reference_*``.
    :param profile: an :class:`autoselect.model.MoeProfile`.
    :param host: an :class:`autoselect.hardware.HostFingerprint`, or None (hardware and package
        rules then go unchecked, with a warning).
    :param world_size: the EP group size (dp x tp).
    :param vllm_version: e.g. ``"0.33.0"``; None means :data:`NEWEST_VLLM`.
    :param gpu_arch: the target arch; defaults to ``host.gpu_arch``; required without a host.
    :param max_tokens_per_rank: the line's ``--max-num-batched-tokens`` (None: not set). A
        batched backend's dispatch buffer comes from it or from ``VLLM_MOE_DP_CHUNK_SIZE``,
        depending on the release (:func:`autoselect.rules.budgets.dispatch_budget`).
    :param environ: the serving environment, for limits an environment variable moves
        (``NVSHMEM_QP_DEPTH``, ``VLLM_MOE_DP_CHUNK_SIZE``); None: every such variable unset.
    :param tensor_parallel_size: ``-tp`` (None: unknown), for upstream reports that need TP > 1.
    :param role: ``"prefill"``, ``"decode"`` or ``"both"`` (None: unknown), for role-bound reports.
    :param redundant_experts: EPLB's ``num_redundant_experts``; the kernels see routed + redundant.
    :raises UnknownBackend, InvalidVllmVersion, InvalidWorldSize, GpuArchRequired,
        InvalidTokensPerRank, InvalidQueueDepth, InvalidChunkSize, InvalidRedundantExperts: bad input.
    """
    from autoselect.model import normalize_arch

    version = vllm_version or NEWEST_VLLM
    parse_version(version)
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise InvalidWorldSize(f"world size must be a positive integer (dp x tp), got {world_size!r}")
    if max_tokens_per_rank is not None and (isinstance(max_tokens_per_rank, bool)
                                            or not isinstance(max_tokens_per_rank, int) or max_tokens_per_rank < 1):
        raise InvalidTokensPerRank(f"tokens per rank must be a positive integer (--max-num-batched-tokens), "
                                   f"got {max_tokens_per_rank!r}")
    if isinstance(redundant_experts, bool) or not isinstance(redundant_experts, int) or redundant_experts < 0:
        raise InvalidRedundantExperts(f"redundant experts must be a non-negative integer, got {redundant_experts!r}")
    canonical = resolve(backend)
    arch = gpu_arch or (getattr(host, "gpu_arch", None) if host is not None else None)
    if not arch:
        raise GpuArchRequired(
            "no GPU architecture: pass --gpu-arch sm90|sm100 (the host fingerprint has no GPU)"
        )
    arch = normalize_arch(arch)
    reasons: list[str] = []
    warnings: list[str] = []

    if canonical.startswith("reference_"):
        return Verdict(backend, True, (), ("benchmark-only baseline: vLLM has no such backend; never recommended",))

    cap = BACKENDS[canonical]
    spelling = cap.spelling(version)
    if not _known_to(cap, backend, version):
        first = min((s.since for s in cap.spellings if s.since), key=parse_version, default=None)
        reasons.append(f"vLLM {version} has no --all2all-backend value for {canonical}"
                       + (f" (first in v{first})" if first else ""))
    elif spelling is not None and spelling.since is None:
        warnings.append(f"autoselect does not know which vLLM release introduced {canonical} "
                        f"(present in {NEWEST_VLLM})")
    if backend in ALIASES and version_in(version, ALIASES[backend][1], None):
        warnings.append(f"{backend} is the deprecated old name; use {canonical} ({ALIASES[backend][2]})")
    if cap.replaced_by and version_in(version, cap.removed_in, None):
        warnings.append(f"{canonical} was removed ({cap.removal_source}); vLLM {version} silently "
                        f"runs {cap.replaced_by} instead")
        cap = BACKENDS[cap.replaced_by]

    dtype = profile.activation_dtype(arch)
    experts = profile.num_experts + redundant_experts
    counted = (f"{experts} experts ({profile.num_experts} routed + {redundant_experts} redundant)"
               if redundant_experts else f"{experts} experts")
    if world_size > experts:
        idle = world_size - experts
        reasons.append(f"EP size {world_size} is larger than the {counted}: {idle} rank{'s' if idle > 1 else ''} "
                       f"would hold no expert; vLLM does not check this, autoselect refuses it: every rank "
                       f"needs an expert (lower -dp/-tp to at most {experts} ranks)")
    if cap.dispatch_dtypes is not None and dtype not in cap.dispatch_dtypes:
        accepted = "/".join(sorted(cap.dispatch_dtypes))
        reasons.append(
            f"{cap.backend} needs {accepted} activations; {profile.model} dispatches {dtype} on {arch}"
            + (f": {one_sided_consequence(dtype, version)}" if cap.backend == "flashinfer_nvlink_one_sided" else "")
        )
    if world_size > 1 and cap.experts_divisible_by_ep and experts % world_size:
        reasons.append(f"{cap.backend} needs the {counted} to divide evenly over EP size {world_size}")
    if cap.experts_multiple_of and experts % cap.experts_multiple_of:
        number = counted if redundant_experts else experts
        reasons.append(f"{cap.backend} needs the number of experts ({number}) to be a "
                       f"multiple of {cap.experts_multiple_of}")
    if cap.top_k_allowed is not None and profile.top_k not in cap.top_k_allowed:
        reasons.append(f"{cap.backend} supports top_k in {{{', '.join(map(str, sorted(cap.top_k_allowed)))}}}, "
                       f"not {profile.top_k}")
    if cap.top_k_max is not None and profile.top_k > cap.top_k_max:
        reasons.append(f"{cap.backend} supports top_k <= {cap.top_k_max}, not {profile.top_k}")
    if cap.hidden_sizes is not None:
        rounded = _round_up(profile.hidden_size, cap.hidden_sizes)
        if rounded is None:
            reasons.append(f"{cap.backend} supports hidden sizes up to {max(cap.hidden_sizes)}, "
                           f"not {profile.hidden_size}")
        elif rounded != profile.hidden_size:
            warnings.append(f"{cap.backend} pads hidden size {profile.hidden_size} to {rounded}")
    if cap.block_fp8_hidden_multiple and dtype == "fp8_block128" and profile.hidden_size % cap.block_fp8_hidden_multiple:
        reasons.append(f"{cap.backend} fp8 block dispatch needs hidden % {cap.block_fp8_hidden_multiple} == 0, "
                       f"not {profile.hidden_size}")
    if cap.max_world_size is not None and world_size > cap.max_world_size:
        reasons.append(f"{cap.backend} supports at most {cap.max_world_size} ranks, not {world_size}")
    budget = dispatch_budget(cap.backend, version, max_num_batched_tokens=max_tokens_per_rank, environ=environ)
    reasons.extend(_kernel_limit_reasons(cap, profile, world_size, arch, dtype, budget, experts, environ))
    if arch not in cap.archs:
        reasons.append(f"{cap.backend} does not run on {arch}")

    if host is None:
        if cap.needs_all_nvlinks or cap.package:
            warnings.append(f"no host fingerprint: NVLink and package requirements of {cap.backend} unchecked")
    else:
        gpu_count = int(getattr(host, "gpu_count", 0) or 0)
        if cap.needs_all_nvlinks and world_size > 1 and not getattr(host, "all_nvlinks_up", False):
            reasons.append(f"{cap.backend} needs every NVLink of each GPU up; "
                           f"{getattr(host, 'hostname', 'the host')} has links down or none (PCIe-only?)")
        if cap.needs_fabric_across_nodes and gpu_count and world_size > gpu_count and not getattr(host, "fabric", None):
            reasons.append(f"{cap.backend} beyond one node ({world_size} > {gpu_count} GPUs) needs an MNNVL fabric; "
                           f"the host reports none")
        versions = getattr(host, "versions", None) or {}
        if cap.package and not versions.get(cap.package):
            reasons.append(f"{cap.package} is not installed on {getattr(host, 'hostname', 'the host')}: "
                           f"{cap.install_hint}")
    if world_size == 1:
        warnings.append("world size 1: there is no all2all to run, the backend changes nothing")
    if world_size > 1:
        warnings.extend(n.text for n in reports_for(cap.backend, version, dtype=dtype, arch=arch,
                                                   tensor_parallel_size=tensor_parallel_size, role=role))
    return Verdict(backend, not reasons, tuple(reasons), tuple(warnings))


def legal_alternatives(profile, host, world_size, vllm_version, *, gpu_arch=None, exclude=(),
                       max_tokens_per_rank=None, environ=None, redundant_experts=0) -> list[str]:
    """The recommendable backends that :func:`legal` accepts, in table order."""
    return [
        b for b in recommendable_backends(vllm_version)
        if b not in exclude and legal(b, profile, host, world_size, vllm_version, gpu_arch=gpu_arch,
                                      max_tokens_per_rank=max_tokens_per_rank, environ=environ,
                                      redundant_experts=redundant_experts).ok
    ]
