""":func:`legal`: every rule of the tables evaluated for one backend, every reason returned."""

from __future__ import annotations

from typing import NamedTuple

# InvalidWorldSize and GpuArchRequired are shared by several commands (autoselect.errors)
from autoselect.errors import GpuArchRequired, InvalidWorldSize, UserError
from autoselect.hardware import VERSION_DISTRIBUTIONS
from autoselect.model import MoeProfile, normalize_arch
from autoselect.rules.backends import ALIASES, BACKENDS, Capability, deprecation, recommendable_backends, resolve
from autoselect.rules.budgets import CHUNK_SIZE, CHUNKING_SWITCH, CHUNKING_SWITCH_SOURCE, Budget, dispatch_budget
from autoselect.rules.limits import DEEPEP_NVL_PEERS, Limit
from autoselect.rules.one_sided import one_sided_consequence, one_sided_in_short
from autoselect.rules.platforms import CUDA, PLATFORMS, platform_reason
from autoselect.rules.reports import reports_for
from autoselect.rules.selection import IGNORED, IGNORED_WARNED, selection_era
from autoselect.rules.sentences import Sentence, detail_of, text_of
from autoselect.rules.versions import NEWEST_VLLM, parse_version, version_in


class InvalidTokensPerRank(UserError):
    "The per-rank token maximum (vLLM's --max-num-batched-tokens) is not a positive integer."


class InvalidRedundantExperts(UserError):
    "The number of EPLB redundant experts is not a non-negative integer."


class Verdict(NamedTuple):
    """Whether a backend may be used for a model / host / world size / vLLM version, and why.

    ``reasons`` are one sentence each; ``details`` the same reasons with their sources (one per
    reason, in order; a reason without more to say is its own detail). ``unavailable``: every
    reason is the serving host's (a package, its NVLinks): the backend is legal for the model,
    this host cannot run it. ``requirements``: what the serving host must have, when the answer
    is for another machine than the one whose fingerprint was given (:func:`legal`'s
    ``serving_host`` False): its packages and links are then not reasons.
    """

    backend: str
    ok: bool
    reasons: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    details: tuple[str, ...] = ()
    unavailable: bool = False
    requirements: tuple[str, ...] = ()

    def detail(self, i: int) -> str:
        """Reason ``i`` with its sources."""
        return self.details[i] if i < len(self.details) else self.reasons[i]

    def to_dict(self) -> dict:
        """A JSON-ready dict (``details`` and ``requirements`` only where they say more)."""
        out = {"backend": self.backend, "ok": self.ok, "reasons": list(self.reasons),
               "warnings": list(self.warnings)}
        if any(self.detail(i) != r for i, r in enumerate(self.reasons)):
            out["details"] = [self.detail(i) for i in range(len(self.reasons))]
        if self.requirements:
            out["requirements"] = list(self.requirements)
        return out


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


#: The warning every ``reference_*`` baseline gets: it is benchmarked, never served.
REFERENCE_BASELINE = "benchmark-only baseline: vLLM has no such backend; never recommended"


def _checked_inputs(backend, host, world_size, vllm_version, gpu_arch, max_num_batched_tokens,
                    redundant_experts, arch_required=True) -> tuple[str, str, str | None]:
    """``(version, canonical backend, arch)`` of a :func:`legal` question, or its bad-input error
    (checked in this order: version, world size, tokens per rank, redundant experts, backend, arch;
    the arch only where it is required: a GPU platform)."""
    version = vllm_version or NEWEST_VLLM
    parse_version(version)
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise InvalidWorldSize(f"world size must be a positive integer (dp x tp), got {world_size!r}")
    if max_num_batched_tokens is not None and (isinstance(max_num_batched_tokens, bool)
                                               or not isinstance(max_num_batched_tokens, int)
                                               or max_num_batched_tokens < 1):
        raise InvalidTokensPerRank(f"tokens per rank must be a positive integer (--max-num-batched-tokens), "
                                   f"got {max_num_batched_tokens!r}")
    if isinstance(redundant_experts, bool) or not isinstance(redundant_experts, int) or redundant_experts < 0:
        raise InvalidRedundantExperts(f"redundant experts must be a non-negative integer, got {redundant_experts!r}")
    canonical = resolve(backend)
    arch = gpu_arch or (getattr(host, "gpu_arch", None) if host is not None else None)
    if not arch and not arch_required:
        return version, canonical, None
    if not arch:
        raise GpuArchRequired(
            "no GPU architecture: pass --gpu-arch sm90|sm100 (the host fingerprint has no GPU)"
        )
    return version, canonical, normalize_arch(arch)


def _selection(backend: str, canonical: str, version: str) -> tuple[Capability, list[str], list[str]]:
    """``(capability, reasons, warnings)`` of telling ``version`` to run ``backend``: whether it
    knows the value, old names, and the backend a removed one silently becomes (its capability
    is the one every later rule reads)."""
    reasons: list[str] = []
    warnings: list[str] = []
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
    elif (old := deprecation(backend, version)) is not None:
        warnings.append(f"{backend} is deprecated in vLLM {version}: use {old.instead} ({old.source}); {old.note}")
    if cap.replaced_by and version_in(version, cap.removed_in, None):
        warnings.append(f"{canonical} was removed ({cap.removal_source}); vLLM {version} silently "
                        f"runs {cap.replaced_by} instead")
        cap = BACKENDS[cap.replaced_by]
    return cap, reasons, warnings


class _Case(NamedTuple):
    """One :func:`legal` question as the shape rules read it: the backend's capability (after
    any silent replacement), the model, its dispatch dtype on ``arch``, and the EP size."""

    cap: Capability
    profile: MoeProfile
    arch: str
    dtype: str
    version: str
    world_size: int
    redundant_experts: int

    @property
    def experts(self) -> int:
        """The physical experts the kernels see: routed + EPLB redundant."""
        return self.profile.num_experts + self.redundant_experts

    @property
    def counted(self) -> str:
        """``256 experts`` or ``264 experts (256 routed + 8 redundant)``."""
        if not self.redundant_experts:
            return f"{self.experts} experts"
        return f"{self.experts} experts ({self.profile.num_experts} routed + {self.redundant_experts} redundant)"


def _every_rank_holds_an_expert(c: _Case) -> str | None:
    if c.world_size <= c.experts:
        return None
    idle = c.world_size - c.experts
    return (f"EP size {c.world_size} is larger than the {c.counted}: {idle} rank{'s' if idle > 1 else ''} "
            f"would hold no expert; vLLM does not check this, autoselect refuses it: every rank "
            f"needs an expert (lower -dp/-tp to at most {c.experts} ranks)")


def _activation_dtype(c: _Case) -> str | Sentence | None:
    if c.cap.activation_dtypes is None or c.dtype in c.cap.activation_dtypes:
        return None
    accepted = "/".join(sorted(c.cap.activation_dtypes))
    needs = f"{c.cap.backend} needs {accepted} activations; {c.profile.model} dispatches {c.dtype} on {c.arch}"
    if c.cap.backend != "flashinfer_nvlink_one_sided":
        return needs
    return Sentence(f"{needs}: {one_sided_in_short(c.dtype, c.version)}",
                    f"{needs}: {one_sided_consequence(c.dtype, c.version)}")


def _experts_divide_over_ep(c: _Case) -> str | None:
    if c.world_size > 1 and c.cap.experts_divisible_by_ep and c.experts % c.world_size:
        return f"{c.cap.backend} needs the {c.counted} to divide evenly over EP size {c.world_size}"
    return None


def _experts_multiple_of(c: _Case) -> str | None:
    if not c.cap.experts_multiple_of or not c.experts % c.cap.experts_multiple_of:
        return None
    number = c.counted if c.redundant_experts else c.experts
    return (f"{c.cap.backend} needs the number of experts ({number}) to be a "
            f"multiple of {c.cap.experts_multiple_of}")


def _top_k_allowed(c: _Case) -> str | None:
    if c.cap.top_k_allowed is None or c.profile.top_k in c.cap.top_k_allowed:
        return None
    return (f"{c.cap.backend} supports top_k in {{{', '.join(map(str, sorted(c.cap.top_k_allowed)))}}}, "
            f"not {c.profile.top_k}")


def _top_k_max(c: _Case) -> str | None:
    if c.cap.top_k_max is not None and c.profile.top_k > c.cap.top_k_max:
        return f"{c.cap.backend} supports top_k <= {c.cap.top_k_max}, not {c.profile.top_k}"
    return None


def _hidden_size_supported(c: _Case) -> str | None:
    if c.cap.hidden_sizes is None or _round_up(c.profile.hidden_size, c.cap.hidden_sizes) is not None:
        return None
    return f"{c.cap.backend} supports hidden sizes up to {max(c.cap.hidden_sizes)}, not {c.profile.hidden_size}"


def _block_fp8_hidden(c: _Case) -> str | None:
    multiple = c.cap.block_fp8_hidden_multiple
    if multiple and c.dtype == "fp8_block128" and c.profile.hidden_size % multiple:
        return f"{c.cap.backend} fp8 block dispatch needs hidden % {multiple} == 0, not {c.profile.hidden_size}"
    return None


def _max_world_size(c: _Case) -> str | None:
    if c.cap.max_world_size is not None and c.world_size > c.cap.max_world_size:
        return f"{c.cap.backend} supports at most {c.cap.max_world_size} ranks, not {c.world_size}"
    return None


#: The capability rules on the model's shape and the EP size, in the order their reasons are
#: listed: each returns the reason a :class:`_Case` breaks it, or None.
SHAPE_RULES = (
    _every_rank_holds_an_expert,
    _activation_dtype,
    _experts_divide_over_ep,
    _experts_multiple_of,
    _top_k_allowed,
    _top_k_max,
    _hidden_size_supported,
    _block_fp8_hidden,
    _max_world_size,
)


def _padding_warnings(c: _Case) -> list[str]:
    """The hidden size the backend pads to, when it is not the model's."""
    rounded = _round_up(c.profile.hidden_size, c.cap.hidden_sizes) if c.cap.hidden_sizes is not None else None
    if rounded is None or rounded == c.profile.hidden_size:
        return []
    return [f"{c.cap.backend} pads hidden size {c.profile.hidden_size} to {rounded}"]


def _host_findings(cap: Capability, host, world_size: int) -> tuple[list[str], list[str]]:
    """``(reasons, warnings)`` of the host's NVLinks, fabric and packages (no host: unchecked)."""
    if host is None:
        if cap.needs_all_nvlinks or cap.package:
            return [], [f"no host fingerprint: NVLink and package requirements of {cap.backend} unchecked"]
        return [], []
    reasons: list[str] = []
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
    return reasons, []


def serving_host_requirements(backend: str, world_size: int) -> list[str]:
    """What ``backend`` needs of a serving host the rules cannot see (an answer for another machine
    than the one planning it): its package and, across an all2all, every NVLink up."""
    cap = BACKENDS[resolve(backend)]
    out = []
    if cap.package:
        name = VERSION_DISTRIBUTIONS.get(cap.package, (cap.package,))[0]
        out.append(f"needs {name} on the serving host ({cap.install_hint})")
    if cap.needs_all_nvlinks and world_size > 1:
        out.append("needs every NVLink of each GPU up on the serving host")
    return out


def _all2all_warnings(c: _Case, tensor_parallel_size, role, settings) -> list[str]:
    """World size 1 runs no all2all; above it, the upstream reports that apply."""
    if c.world_size == 1:
        return ["world size 1: there is no all2all to run, the backend changes nothing"]
    return [n.text for n in reports_for(c.cap.backend, c.version, dtype=c.dtype, arch=c.arch,
                                        tensor_parallel_size=tensor_parallel_size, role=role, settings=settings)]


def legal(backend, profile, host, world_size, vllm_version, *, gpu_arch=None, max_num_batched_tokens=None,
          environ=None, tensor_parallel_size=None, role=None, redundant_experts=0, settings=None,
          platform=None, serving_host=True) -> Verdict:
    """Every reason ``backend`` cannot serve ``profile`` at ``world_size`` (EP size) on ``vllm_version``.

    :param backend: an ``--all2all-backend`` value (old spellings are resolved) or ``reference_*``.
    :param profile: an :class:`autoselect.model.MoeProfile`.
    :param host: an :class:`autoselect.hardware.HostFingerprint`, or None (hardware and package
        rules then go unchecked, with a warning).
    :param world_size: the EP group size (dp x tp).
    :param vllm_version: e.g. ``"0.33.0"``; None means :data:`NEWEST_VLLM`.
    :param gpu_arch: the target arch; defaults to ``host.gpu_arch``; required without a host.
    :param max_num_batched_tokens: the line's ``--max-num-batched-tokens`` (None: not set). A
        batched backend's dispatch buffer comes from it or from ``VLLM_MOE_DP_CHUNK_SIZE``,
        depending on the release (:func:`autoselect.rules.budgets.dispatch_budget`).
    :param environ: the serving environment, for limits an environment variable moves
        (``NVSHMEM_QP_DEPTH``, ``VLLM_MOE_DP_CHUNK_SIZE``); None: every such variable unset.
    :param tensor_parallel_size: ``-tp`` (None: unknown), for upstream reports that need TP > 1.
    :param role: ``"prefill"``, ``"decode"`` or ``"both"`` (None: unknown), for role-bound reports.
    :param redundant_experts: EPLB's ``num_redundant_experts``; the kernels see routed + redundant.
    :param settings: the line's ``--enforce-eager`` / ``--enable-dbo`` / async EPLB
        (:data:`autoselect.rules.reports.SETTINGS` keys: True, False or None for unknown), for the
        upstream reports that need one; None: a deployment with none of them on.
    :param platform: None or ``"cuda"`` (GPUs: every rule above), or a platform of
        :data:`autoselect.rules.platforms.PLATFORMS` (``"cpu"``): its communicator's row decides
        which backends run at all, no GPU arch is needed, and the GPU rules (dtype, kernels, NVLinks)
        do not apply.
    :param serving_host: ``host`` is the machine that will serve (its packages and NVLinks decide
        whether it can run the backend); False: the answer is for another machine (``host`` only
        plans it), so ``host`` is not read at all: the verdict lists what the serving host needs
        (``requirements``, :func:`serving_host_requirements`), and ``gpu_arch`` is required.
    :raises UnknownBackend, InvalidVllmVersion, InvalidWorldSize, GpuArchRequired,
        InvalidTokensPerRank, InvalidQueueDepth, InvalidChunkSize, InvalidRedundantExperts: bad input.
    """
    if platform not in (None, CUDA) and platform not in PLATFORMS:
        raise ValueError(f"unknown vLLM platform {platform!r}; known: {CUDA}, {', '.join(PLATFORMS)}")
    gpus = platform in (None, CUDA)
    host = host if serving_host else None  # a machine planning an answer for another decides nothing
    version, canonical, arch = _checked_inputs(backend, host, world_size, vllm_version, gpu_arch,
                                               max_num_batched_tokens, redundant_experts, arch_required=gpus)
    if canonical.startswith("reference_"):
        return Verdict(backend, True, (), (REFERENCE_BASELINE,))
    if not gpus:
        return _platform_verdict(backend, canonical, profile, world_size, version, platform, redundant_experts)
    # The steps in the order their reasons and warnings are listed.
    cap, reasons, warnings = _selection(backend, canonical, version)
    case = _Case(cap, profile, arch, profile.activation_dtype(arch), version, world_size, redundant_experts)
    reasons += [reason for rule in SHAPE_RULES if (reason := rule(case))]
    warnings += _padding_warnings(case)
    budget = dispatch_budget(cap.backend, version, max_num_batched_tokens=max_num_batched_tokens, environ=environ)
    reasons += _kernel_limit_reasons(cap, profile, world_size, arch, case.dtype, budget, case.experts, environ)
    if arch not in cap.archs:
        reasons.append(f"{cap.backend} does not run on {arch} (only on {', '.join(sorted(cap.archs))})")
    requirements: list[str] = []
    if serving_host:
        host_reasons, host_warnings = _host_findings(cap, host, world_size)
    else:
        host_reasons, host_warnings = [], []
        requirements = serving_host_requirements(cap.backend, world_size)
    unavailable = bool(host_reasons) and not reasons  # legal for the model; this host cannot run it
    reasons += host_reasons
    warnings += host_warnings + _all2all_warnings(case, tensor_parallel_size, role, settings)
    return Verdict(backend, not reasons, tuple(map(text_of, reasons)), tuple(warnings),
                   details=tuple(map(detail_of, reasons)), unavailable=unavailable,
                   requirements=tuple(requirements))


def _platform_verdict(backend: str, canonical: str, profile, world_size: int, version: str, platform: str,
                      redundant_experts: int) -> Verdict:
    """:func:`legal` on a platform without GPUs: the release must know the value, the platform's
    communicator must build it (after a removed backend's silent replacement), and every rank needs
    an expert; nothing of the GPU kernels applies."""
    cap, reasons, warnings = _selection(backend, canonical, version)
    case = _Case(cap, profile, platform, "", version, world_size, redundant_experts)
    if (reason := platform_reason(platform, cap.backend)) is not None:
        reasons.append(reason)
    if (reason := _every_rank_holds_an_expert(case)) is not None:
        reasons.append(reason)
    if world_size == 1:
        warnings.append("world size 1: there is no all2all to run, the backend changes nothing")
    return Verdict(backend, not reasons, tuple(reasons), tuple(warnings))


def legal_alternatives(profile, host, world_size, vllm_version, *, gpu_arch=None, exclude=(),
                       max_num_batched_tokens=None, environ=None, redundant_experts=0, platform=None) -> list[str]:
    """The recommendable backends that :func:`legal` accepts, in table order."""
    return [
        b for b in recommendable_backends(vllm_version)
        if b not in exclude and legal(b, profile, host, world_size, vllm_version, gpu_arch=gpu_arch,
                                      max_num_batched_tokens=max_num_batched_tokens, environ=environ,
                                      redundant_experts=redundant_experts, platform=platform).ok
    ]
