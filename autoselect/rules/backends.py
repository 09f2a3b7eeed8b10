"""The backend registry: one row per ``--all2all-backend`` value, and the queries on it.

A row (:class:`Capability`) is the one place a backend is declared: its name, how each release
spells it, its built-in benchmark adapter (``adapter``, the ``autoselect.backends`` entry point:
:data:`ADAPTERS` is what ``bench.backends.BUILTIN`` and pyproject.toml register), the vLLM
module whose prepare step decides what it sends (``prepare_finalize``), and every limit
``rules.legal`` checks. The per-backend tables that live beside the facts they hold
(``rules/wire.py``'s wire dtypes, required for every backend with an adapter; optional rows in
knobs, budgets, reports, emit, the report's style and, for a published backend, the reference)
are held to this one by ``tests/test_backend_registry.py``, which names what is missing.
:data:`BASELINES` are the benchmark-only exchanges (``reference_*``), which vLLM does not have.

Every version below was verified in the released vLLM wheels/sdists from PyPI
(``vllm/config/parallel.py``, ``vllm/envs.py``, ``vllm/engine/arg_utils.py`` and
``fused_moe/all2all_utils.py`` of each release from 0.11.0 to 0.34.0): the first release whose
code carries the PR's change. Sources (PR number, merge date) are recorded on each row.
:data:`DEPRECATIONS` holds the values a release still accepts but warns about, and
:data:`HIDDEN_VALUES` the values vLLM's config takes that its command line does not offer.
``scripts/read_release.py`` reads the value set, the CLI removals and the deprecation warnings
from a release's source and compares them with these tables.
"""

from __future__ import annotations

from typing import NamedTuple

from autoselect.errors import UnknownBackend, UserError  # UnknownBackend: shared by several commands
from autoselect.rules.limits import (
    DEEPEP_HT_MAX_LOCAL_EXPERTS,
    DEEPEP_HT_ROW_BYTES,
    DEEPEP_HT_WORLD_SIZES,
    DEEPEP_LL_SLOTS_MULTIPLE_OF,
    DEEPEP_LL_TOKENS_PER_RANK,
    DEEPEP_WORLD_SIZE_GROUPING,
    Limit,
)
from autoselect.rules.serve_options import FLAG_SINCE
from autoselect.rules.versions import NEWEST_VLLM, parse_version, version_in

#: What the newest releases run without --all2all-backend (per release: selection.default_backend).
DEFAULT_BACKEND = "allgather_reducescatter"


class BackendUnknownToVersion(UserError):
    "The backend has no --all2all-backend spelling in the vLLM version asked for."


class Spelling(NamedTuple):
    """How vLLM spells a backend in a version range, and where that came from."""

    value: str
    since: str | None  # None: not researched (known to be present in NEWEST_VLLM)
    until: str | None = None
    source: str = ""


class Capability(NamedTuple):
    """One all2all backend: its names, its benchmark adapter and everything autoselect checks about it."""

    backend: str
    mechanism: str
    spellings: tuple[Spelling, ...]
    #: the built-in benchmark adapter, ``module:Class`` (its ``autoselect.backends`` entry point);
    #: None: known to vLLM, checked, never benchmarked nor recommended (:attr:`recommendable`)
    adapter: str | None = None
    #: the module of vLLM's ``fused_moe/prepare_finalize/`` (0.32.0 on) whose prepare step decides what
    #: the backend sends (the wire dtype): what ``scripts/read_release.py`` reads for it
    prepare_finalize: str | None = None
    activation_dtypes: frozenset | None = None  # None: vLLM's prepare step adapts to any dtype
    experts_divisible_by_ep: bool = False
    experts_multiple_of: int | None = None
    top_k_allowed: frozenset | None = None
    top_k_max: int | None = None
    hidden_sizes: tuple[int, ...] | None = None  # supported sizes; vLLM rounds up to the next
    block_fp8_hidden_multiple: int | None = None  # fp8_block128 dispatch needs hidden % this == 0
    max_world_size: int | None = None
    world_sizes: Limit | None = None  # value: the EP sizes the kernels run at (beyond 1)
    world_size_grouping: Limit | None = None  # value n: fewer than n ranks or a multiple of n
    max_local_experts: Limit | None = None  # value: most experts one rank holds
    max_row_bytes: Limit | None = None  # value: a RowBytes
    max_tokens_per_rank: Limit | None = None  # the kernel limit on tokens per rank; value: a QueueDepth
    slots_multiple_of: Limit | None = None  # value n: EP size x max tokens per rank % n == 0
    needs_all_nvlinks: bool = False  # every P2P NVLink of each GPU up (at world size > 1)
    needs_fabric_across_nodes: bool = False  # beyond one node only over an MNNVL fabric
    archs: frozenset = frozenset({"sm90", "sm100"})
    package: str | None = None  # key in HostFingerprint.versions
    install_hint: str = ""
    replaced_by: str | None = None  # removed upstream: what vLLM runs instead
    removed_in: str | None = None
    removal_source: str = ""

    @property
    def recommendable(self) -> bool:
        """autoselect benchmarks it (it has an adapter) and so may recommend it."""
        return self.adapter is not None

    def spelling(self, vllm_version: str) -> Spelling | None:
        """The spelling vLLM ``vllm_version`` uses for this backend, or None if it has none."""
        for s in self.spellings:
            if s.since is None or version_in(vllm_version, s.since, s.until):
                return s
        return None

_FI_HINT = "pip install flashinfer-python (vLLM pins it)"
#: The AMD Instinct archs MoRI runs on (0.34.0 all2all.py:986-988: on_gfx942() or on_gfx950()).
_ROCM = frozenset({"gfx942", "gfx950"})
_DEEPEP_HINT = "install DeepEP from github.com/deepseek-ai/DeepEP (not a vLLM dependency)"
_FLAG = "PR #26732 (merged 2025-10-13; first in v0.11.1) added --all2all-backend"
_PARSER = "first in the --all2all-backend choices of the vLLM {} wheel"

#: backend -> Capability. Canonical names are the current flag values.
BACKENDS: dict[str, Capability] = {
    c.backend: c
    for c in (
        Capability(
            "allgather_reducescatter",
            "all-gather for dispatch, reduce-scatter for combine (vLLM's default)",
            (Spelling("allgather_reducescatter", FLAG_SINCE, None, _FLAG),),
            adapter="bench.backends.allgather_reducescatter:AllgatherReducescatter",
            prepare_finalize="naive_dp_ep",
        ),
        Capability(
            "flashinfer_nvlink_one_sided",
            "FlashInfer MoE A2A one-sided NVLink kernels (TRT-LLM MoeAlltoAll up to v0.32, "
            "flashinfer.moe_ep NVLinkOneSidedAlltoAll from v0.33)",
            (Spelling("flashinfer_nvlink_one_sided", "0.18.0", None,
                      "PR #36022 (merged 2026-03-04; first in v0.18.0) added it, nvfp4-only"),),
            adapter="bench.backends.flashinfer_nvlink_one_sided:FlashinferNvlinkOneSided",
            prepare_finalize="flashinfer_nvlink_one_sided",
            activation_dtypes=frozenset({"nvfp4"}),
            top_k_allowed=frozenset({1, 2, 4, 6, 8, 10, 12, 14, 16, 18, 22}),
            max_world_size=64,
            needs_all_nvlinks=True,
            needs_fabric_across_nodes=True,
            package="flashinfer",
            install_hint=_FI_HINT,
        ),
        Capability(
            "flashinfer_nvlink_two_sided",
            "FlashInfer two-sided all-to-all-v over NVLink (MnnvlMoe up to v0.33, "
            "flashinfer.moe_ep NVLinkTwoSidedAlltoAll from v0.34)",
            (
                Spelling("flashinfer_all2allv", FLAG_SINCE, "0.18.0",
                         "PR #21003 (2025-09) added it as flashinfer_all2allv"),
                Spelling("flashinfer_nvlink_two_sided", "0.18.0", None,
                         "PR #36022 (merged 2026-03-04; first in v0.18.0) renamed it"),
            ),
            adapter="bench.backends.flashinfer_nvlink_two_sided:FlashinferNvlinkTwoSided",
            prepare_finalize="flashinfer_nvlink_two_sided",
            experts_divisible_by_ep=True,
            experts_multiple_of=4,
            top_k_max=32,
            needs_all_nvlinks=True,
            needs_fabric_across_nodes=True,
            package="flashinfer",
            install_hint=_FI_HINT,
        ),
        Capability(
            "deepep_high_throughput",
            "DeepEP normal (high-throughput) kernels",
            (Spelling("deepep_high_throughput", FLAG_SINCE, None, _FLAG),),
            adapter="bench.backends.deepep_high_throughput:DeepepHighThroughput",
            prepare_finalize="deepep_ht",
            # fp16 models fail: vLLM asserts a bf16 expert output before Buffer.combine (deepep_ht.py
            # _finalize); every other dtype crosses as bf16 or (block fp8) fp8 + fp32 scales.
            activation_dtypes=frozenset({"bf16", "fp8", "fp8_block128", "nvfp4", "mxfp8", "mxfp4"}),
            experts_divisible_by_ep=True,
            top_k_max=32,  # DeepEP 2.1 intranode.cu/internode.cu: EP_DEVICE_ASSERT(num_topk <= 32)
            block_fp8_hidden_multiple=128,
            world_sizes=DEEPEP_HT_WORLD_SIZES,  # at most 160 ranks
            world_size_grouping=DEEPEP_WORLD_SIZE_GROUPING,
            max_local_experts=DEEPEP_HT_MAX_LOCAL_EXPERTS,
            max_row_bytes=DEEPEP_HT_ROW_BYTES,
            package="deep_ep",
            install_hint=_DEEPEP_HINT,
        ),
        Capability(
            "deepep_low_latency",
            "DeepEP low-latency kernels (masked layout, CUDA-graph friendly)",
            (Spelling("deepep_low_latency", FLAG_SINCE, None, _FLAG),),
            adapter="bench.backends.deepep_low_latency:DeepepLowLatency",
            prepare_finalize="deepep_ll",
            # fp16 models fail: low_latency_dispatch asserts bf16 input (csrc/legacy/buffer.hpp).
            activation_dtypes=frozenset({"bf16", "fp8", "fp8_block128", "nvfp4", "mxfp8", "mxfp4"}),
            experts_divisible_by_ep=True,
            top_k_max=11,  # DeepEP 2.1 internode_ll.cu dispatch/combine: kNumMaxTopK = 11
            # DeepEP 2.1 csrc/kernels/legacy/launch.cuh:113-134 SWITCH_HIDDEN ('Unsupported hidden');
            # vLLM deepep_ll.py SUPPORTED_HIDDEN_SIZES pads up to the next one.
            hidden_sizes=(2048, 2560, 3072, 4096, 5120, 6144, 7168, 8192),
            block_fp8_hidden_multiple=128,
            world_size_grouping=DEEPEP_WORLD_SIZE_GROUPING,
            max_tokens_per_rank=DEEPEP_LL_TOKENS_PER_RANK,
            slots_multiple_of=DEEPEP_LL_SLOTS_MULTIPLE_OF,
            package="deep_ep",
            install_hint=_DEEPEP_HINT,
        ),
        # Known to vLLM 0.33.0 but not benchmarked by autoselect: checked, never recommended.
        Capability("deepep_v2", "DeepEP v2", (Spelling("deepep_v2", "0.24.0", None, _PARSER.format("0.24.0")),),
                   prepare_finalize="deepep_v2", package="deep_ep", install_hint=_DEEPEP_HINT),
        Capability("nixl_ep", "NIXL EP kernels", (Spelling("nixl_ep", "0.18.0", None, _PARSER.format("0.18.0")),),
                   prepare_finalize="nixl_ep"),
        Capability("moonep", "MoonEP balanced EP (NVLink)", (Spelling("moonep", "0.31.0", None, _PARSER.format("0.31.0")),),
                   prepare_finalize="moonep"),
        # MoRI is ROCm's (AMD Instinct): vLLM builds its manager only on gfx942/gfx950
        # (0.34.0 distributed/device_communicators/all2all.py:986-988); a CUDA GPU fails at start-up.
        Capability("mori", "MoRI EP (ROCm): one value before the v0.23.0 split, and again from v0.34.0, where it "
                           "picks MoRI EPv2 or EPv1 and the inter-node kernel itself",
                   (Spelling("mori", "0.15.0", "0.23.0", _PARSER.format("0.15.0") + "; split in v0.23.0"),
                    Spelling("mori", "0.34.0", None, "0.34.0 vllm/config/parallel.py:54 (All2AllBackend), :239-242 "
                                                     "(docstring); resolved by resolve_mori_all2all, parallel.py:"
                                                     "1296-1324, from platforms/rocm.py:1232-1242")),
                   prepare_finalize="mori", archs=_ROCM),
        Capability("mori_high_throughput", "MoRI EP (ROCm; InterNodeV1 across nodes)",
                   (Spelling("mori_high_throughput", "0.23.0", None, _PARSER.format("0.23.0")),), archs=_ROCM),
        Capability("mori_low_latency", "MoRI EP low latency (ROCm; InterNodeV1LL across nodes)",
                   (Spelling("mori_low_latency", "0.23.0", None, _PARSER.format("0.23.0")),), archs=_ROCM),
        # Removed upstream: still accepted by the parser, silently replaced.
        Capability(
            "pplx", "pplx-kernels (removed)", (Spelling("pplx", FLAG_SINCE, None, _FLAG),),
            replaced_by="allgather_reducescatter", removed_in="0.17.0",
            removal_source="PR #33724 removed pplx (first release without it: v0.17.0)",
        ),
        Capability(
            "naive", "broadcast-based all2all (removed)", (Spelling("naive", FLAG_SINCE, None, _FLAG),),
            replaced_by="allgather_reducescatter", removed_in="0.19.0",
            removal_source="PR #33728 maps naive to allgather_reducescatter (first in v0.19.0)",
        ),
    )
}

class Baseline(NamedTuple):
    """A benchmark-only exchange measured beside vLLM's backends: no flag value, never recommended."""

    name: str  # reference_*: resolve() passes the prefix through, flag_value() refuses it
    mechanism: str
    adapter: str  # module:Class, as Capability.adapter


#: name -> :class:`Baseline`.
BASELINES: dict[str, Baseline] = {
    b.name: b
    for b in (
        Baseline("reference_all_to_all", "all_to_all_single with per-rank splits (runs on gloo and NCCL)",
                 "bench.backends.reference_all_to_all:ReferenceAllToAll"),
        Baseline("reference_allgather_fused", "vLLM's default's bytes packed in one all_gather, then its "
                 "reduce_scatter: the fused lower end of its calls (runs on gloo and NCCL)",
                 "bench.backends.reference_allgather_fused:ReferenceAllgatherFused"),
    )
}

#: Every built-in benchmark adapter, name -> ``module:Class``: the backends with one in table
#: order, then the baselines. ``bench.backends.BUILTIN`` is this; pyproject.toml's
#: ``autoselect.backends`` entry points must list the same (tests/test_backend_registry.py).
ADAPTERS: dict[str, str] = {c.backend: c.adapter for c in BACKENDS.values() if c.adapter is not None} | {
    b.name: b.adapter for b in BASELINES.values()}

#: Old flag values that name a current backend: value -> (backend, deprecated since, source).
ALIASES = {
    "flashinfer_all2allv": ("flashinfer_nvlink_two_sided", "0.18.0",
                            "PR #36022 renamed it to flashinfer_nvlink_two_sided (v0.18.0)"),
}

#: Every --all2all-backend value some vLLM release accepted.
ALL_FLAG_VALUES = frozenset(s.value for c in BACKENDS.values() for s in c.spellings) | frozenset(ALIASES)


class Deprecation(NamedTuple):
    """A value a release still accepts and runs, with a warning that it is deprecated."""

    value: str
    since: str
    instead: str  # what the warning says to use
    source: str
    note: str = ""  # what the value runs meanwhile


#: value -> :class:`Deprecation`. vLLM logs the warning when it builds the all2all manager.
DEPRECATIONS = {
    d.value: d
    for d in (
        Deprecation("flashinfer_all2allv", "0.18.0", "flashinfer_nvlink_two_sided",
                    "PR #36022 renamed it (v0.18.0); 0.34.0 distributed/device_communicators/cuda_communicator.py:"
                    "278-283 ('flashinfer_all2allv' is deprecated and has been renamed)",
                    "it runs flashinfer_nvlink_two_sided"),
        Deprecation("mori_high_throughput", "0.34.0", "mori",
                    "0.34.0 distributed/device_communicators/cuda_communicator.py:236-247 ('is deprecated and will be "
                    "removed in a future release. Use 'mori''), config/parallel.py:235-238",
                    "within one node every MoRI value runs the same IntraNode kernel (0.34.0 all2all.py:990-995; "
                    "the same in 0.32.0)"),
        Deprecation("mori_low_latency", "0.34.0", "mori",
                    "0.34.0 distributed/device_communicators/cuda_communicator.py:236-247 ('is deprecated and will be "
                    "removed in a future release. Use 'mori''), config/parallel.py:235-238",
                    "within one node every MoRI value runs the same IntraNode kernel (0.34.0 all2all.py:990-995; "
                    "the same in 0.32.0)"),
    )
}


def deprecation(value: str, vllm_version: str) -> Deprecation | None:
    """The :data:`DEPRECATIONS` row of ``value`` when ``vllm_version`` warns about it, else None."""
    d = DEPRECATIONS.get(value)
    return d if d is not None and version_in(vllm_version, d.since, None) else None


class HiddenValue(NamedTuple):
    """A value of vLLM's ``all2all_backend`` config field that the command line does not offer."""

    value: str
    since: str
    bound_by: str  # what sets it
    source: str


#: Values in vLLM's All2AllBackend type that ``vllm serve --all2all-backend`` refuses ('invalid choice').
HIDDEN_VALUES = (
    HiddenValue("passthrough", "0.32.0", "a --moe-backend that dispatches and combines itself (rules.MOE_BACKENDS)",
                "0.32.0 config/parallel.py:58 (All2AllBackend), engine/arg_utils.py:1127 removes it from the "
                "choices; 0.34.0 parallel.py:60, arg_utils.py:1173-1176"),
)


def parser_choices(vllm_version=None) -> list[str]:
    """The ``--all2all-backend`` choices of ``vllm_version`` (default NEWEST_VLLM), sorted."""
    version = vllm_version or NEWEST_VLLM
    return sorted(v for v in ALL_FLAG_VALUES if value_known_to(v, version))


def value_known_to(value: str, vllm_version: str) -> bool:
    """True when vLLM ``vllm_version``'s parser accepts ``--all2all-backend value``."""
    if not version_in(vllm_version, FLAG_SINCE, None):
        return False
    if value in ALIASES and version_in(vllm_version, ALIASES[value][1], None):
        return True
    return any(s.value == value and (s.since is None or version_in(vllm_version, s.since, s.until))
               for c in BACKENDS.values() for s in c.spellings)


def acted_on(backend: str | None, vllm_version: str) -> str | None:
    """The backend vLLM acts on for the value ``backend`` on ``vllm_version``: a backend removed by
    then is already its replacement (``pplx``, ``naive`` -> ``allgather_reducescatter``, before a
    ``--moe-backend`` binding or EPLB looks at it); any other value as given (None stays None)."""
    cap = BACKENDS.get(backend) if backend is not None else None
    if cap is not None and cap.replaced_by and version_in(vllm_version, cap.removed_in, None):
        return cap.replaced_by
    return backend


def resolve(value: str) -> str:
    """The canonical backend for a flag value (``flashinfer_all2allv`` -> two-sided).

    :raises UnknownBackend: for a value autoselect does not know.
    """
    if value in BACKENDS:
        return value
    if value in ALIASES:
        return ALIASES[value][0]
    if value.startswith("reference_"):
        return value
    raise UnknownBackend(
        f"unknown all2all backend {value!r}; vLLM {NEWEST_VLLM} accepts: {', '.join(parser_choices())}"
    )


def recommendable_backends(vllm_version) -> list[str]:
    """The backends autoselect may recommend on ``vllm_version`` (canonical names, table order).

    Empty before v0.11.1, which had no ``--all2all-backend`` flag.
    """
    version = vllm_version or NEWEST_VLLM
    parse_version(version)
    return [b for b, c in BACKENDS.items() if c.recommendable and c.spelling(version) is not None]


def flag_value(backend, vllm_version) -> str:
    """How ``--all2all-backend`` spells ``backend`` on ``vllm_version``.

    ``flashinfer_nvlink_two_sided`` is ``flashinfer_all2allv`` before v0.18.0.
    :raises BackendUnknownToVersion: when that version has no spelling for it.
    """
    version = vllm_version or NEWEST_VLLM
    canonical = resolve(backend)
    if canonical.startswith("reference_"):
        raise BackendUnknownToVersion(f"{backend} is a benchmark-only baseline, not a vLLM backend")
    s = BACKENDS[canonical].spelling(version)
    if s is None:
        firsts = [x.since for x in BACKENDS[canonical].spellings if x.since]
        raise BackendUnknownToVersion(
            f"vLLM {version} has no --all2all-backend value for {canonical}"
            + (f" (first in v{min(firsts, key=parse_version)})" if firsts else "")
            + "; upgrade vLLM or pick another backend"
        )
    return s.value
