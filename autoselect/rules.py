"""Which all2all backend is legal for which model, host and vLLM version: tables, not if-chains.

Three tables hold every rule:

* :data:`BACKENDS` — one :class:`Capability` row per ``--all2all-backend`` value autoselect
  knows: accepted activation dtypes, expert / top-k / hidden-size constraints, world-size
  limit, the DeepEP kernel limits (:class:`Limit` rows, each with the source lines that impose
  it: EP sizes, experts per rank, row bytes, tokens per rank), hardware and package
  requirements, ``--enable-dbo`` support, the vLLM versions that know the value and how it is
  spelled there.
* :data:`ONE_SIDED_ERAS` — what upstream vLLM does with a non-nvfp4 model on
  ``flashinfer_nvlink_one_sided`` in each version range (silent corruption, startup error,
  accepted). autoselect keeps one-sided **nvfp4-only in every version**: the hard rule of
  ``docs/facts.md``; the eras only decide how bad the consequence is when it is broken.
* :data:`FLAG_HISTORY` — when ``--all2all-backend`` and ``VLLM_ALL2ALL_BACKEND`` came and went.

Every version below was verified in the released vLLM wheels from PyPI (``vllm/config/parallel.py``,
``vllm/envs.py``, ``vllm/engine/arg_utils.py`` and ``fused_moe/all2all_utils.py`` of each release
from 0.11.0 to 0.33.0, read out of the wheel archives): the first release whose code carries the
PR's change. Sources (PR number, merge date) are recorded on each row.

:func:`legal` evaluates every rule and returns every reason, not just the first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from autoselect.errors import UserError

DEFAULT_BACKEND = "allgather_reducescatter"
#: Newest vLLM release the tables were checked against.
NEWEST_VLLM = "0.33.0"
#: Oldest vLLM with the ``--all2all-backend`` flag (PR #26732).
FLAG_SINCE = "0.11.1"


class UnknownBackend(UserError):
    "The backend name is not an --all2all-backend value autoselect knows."


class InvalidVllmVersion(UserError):
    "The vLLM version string could not be parsed."


class BackendUnknownToVersion(UserError):
    "The backend has no --all2all-backend spelling in the vLLM version asked for."


class InvalidWorldSize(UserError):
    "The world size (EP size) is not a positive integer."


class GpuArchRequired(UserError):
    "Neither a host fingerprint nor a GPU architecture was given, so arch rules cannot run."


class InvalidTokensPerRank(UserError):
    "The per-rank token maximum (vLLM's --max-num-batched-tokens) is not a positive integer."


class InvalidQueueDepth(UserError):
    "NVSHMEM_QP_DEPTH is set to something other than a positive integer."


# --------------------------------------------------------------------------------------
# Versions
# --------------------------------------------------------------------------------------

_VERSION = re.compile(r"^v?(\d+)(?:\.(\d+))?(?:\.(\d+))?(?:\.(\d+))?(?:\.?(rc|dev|a|b|post)\.?(\d*))?(?:\+.*)?$")


def parse_version(v: str) -> tuple:
    """A sortable key for a vLLM version: ``0.11.1`` < ``0.19.1rc1`` < ``0.19.1`` < ``0.19.1.post1``.

    Accepts a leading ``v``, a fourth component (``0.10.1.1``), ``rcN``/``devN``/``postN`` and a
    local suffix (``+cu130``). :raises InvalidVllmVersion: for anything else.
    """
    m = _VERSION.match(str(v).strip())
    if not m:
        raise InvalidVllmVersion(f"cannot read vLLM version {v!r}; use a release number such as {NEWEST_VLLM}")
    nums = tuple(int(x or 0) for x in m.group(1, 2, 3, 4))
    tag, n = m.group(5), int(m.group(6) or 0)
    # dev < a < b < rc < final < post
    rank = {"dev": -4, "a": -3, "b": -2, "rc": -1, None: 0, "post": 1}[tag]
    return nums + (rank, n)


def version_in(version: str, since: str | None, until: str | None) -> bool:
    """True when ``since <= version < until`` (None = unbounded). Pre-releases count as the release."""
    key = parse_version(version)[:4]
    if since is not None and key < parse_version(since)[:4]:
        return False
    if until is not None and key >= parse_version(until)[:4]:
        return False
    return True


# --------------------------------------------------------------------------------------
# The capability table
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Spelling:
    """How vLLM spells a backend in a version range, and where that came from."""

    value: str
    since: str | None  # None: not researched (known to be present in NEWEST_VLLM)
    until: str | None = None
    source: str = ""


@dataclass(frozen=True)
class Capability:
    """Everything autoselect checks about one all2all backend."""

    backend: str
    mechanism: str
    spellings: tuple[Spelling, ...]
    recommendable: bool = True  # autoselect benchmarks it and may recommend it
    dispatch_dtypes: frozenset | None = None  # None: vLLM's prepare step adapts to any dtype
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
    max_tokens_per_rank: Limit | None = None  # value: a QueueDepth
    slots_multiple_of: Limit | None = None  # value n: EP size x max tokens per rank % n == 0
    needs_all_nvlinks: bool = False  # every P2P NVLink of each GPU up (at world size > 1)
    needs_fabric_across_nodes: bool = False  # beyond one node only over an MNNVL fabric
    archs: frozenset = frozenset({"sm90", "sm100"})
    package: str | None = None  # key in HostFingerprint.versions
    install_hint: str = ""
    supports_dbo: bool = False
    replaced_by: str | None = None  # removed upstream: what vLLM runs instead
    removed_in: str | None = None
    removal_source: str = ""
    notes: tuple[str, ...] = ()  # open upstream reports worth a warning

    def spelling(self, vllm_version: str) -> Spelling | None:
        """The spelling vLLM ``vllm_version`` uses for this backend, or None if it has none."""
        for s in self.spellings:
            if s.since is None or version_in(vllm_version, s.since, s.until):
                return s
        return None


@dataclass(frozen=True)
class Limit:
    """One kernel limit as data: its value, the upstream lines that impose it, and where it applies.

    ``intranode_only``: the limit belongs to DeepEP's intranode (NVLink) kernels, which run when
    the EP group has at most :data:`DEEPEP_NVL_PEERS` ranks; beyond that the internode kernels
    run and the limit does not apply.
    """

    value: object
    source: str
    intranode_only: bool = False


@dataclass(frozen=True)
class RowBytes:
    """The largest dispatched activation row a kernel copies, per GPU arch, and how vLLM sizes a row.

    A row is ``hidden`` values padded up so its bf16 form is a multiple of ``pad_bf16_bytes``
    (vLLM pads the layer's hidden size), times the bytes one value takes on the wire.
    """

    max_bytes: dict  # gpu arch -> most bytes in one row (an arch not listed: no limit)
    pad_bf16_bytes: int
    value_bytes: dict  # dispatch dtype -> bytes per value on the wire; any other dtype crosses as bf16 (2)

    def padded_hidden(self, hidden: int) -> int:
        """``hidden`` after vLLM's padding."""
        return -(-2 * hidden // self.pad_bf16_bytes) * self.pad_bf16_bytes // 2

    def row_bytes(self, dtype: str, hidden: int) -> int:
        """Bytes of one dispatched row of a ``dtype`` model with ``hidden`` values."""
        return self.padded_hidden(hidden) * self.value_bytes.get(dtype, 2)


@dataclass(frozen=True)
class QueueDepth:
    """A per-rank token cap that follows from an NVSHMEM queue-pair depth.

    The kernel needs ``depth >= (max_tokens + 1) * 2``; the depth is ``env`` when set, else
    ``default``.
    """

    env: str
    default: int

    def depth(self, environ=None) -> int:
        """The queue-pair depth ``environ`` sets (``default`` when unset).

        :raises InvalidQueueDepth: when the variable is not a positive integer.
        """
        raw = (environ or {}).get(self.env)
        if raw is None:
            return self.default
        try:
            depth = int(str(raw).strip())
        except ValueError:
            depth = 0
        if depth < 1:
            raise InvalidQueueDepth(f"{self.env}={raw!r} is not a positive integer; unset it (DeepEP "
                                    f"uses {self.default}) or set a number such as {self.default}")
        return depth

    def max_tokens(self, environ=None) -> int:
        """The most tokens per rank that depth allows."""
        return self.depth(environ) // 2 - 1

    def depth_for(self, tokens: int) -> int:
        """The smallest depth that allows ``tokens`` per rank."""
        return (tokens + 1) * 2


#: DeepEP's NVLink domain: EP groups of at most this many ranks run the intranode kernels
#: (DeepEP 2.1 csrc/kernels/legacy/compiled.cuh:5 LEGACY_NUM_MAX_NVL_PEERS = 8; the buffer's
#: num_rdma_ranks is max(1, num_ranks / 8), csrc/legacy/buffer.hpp).
DEEPEP_NVL_PEERS = 8

# The limits below were read from github.com/deepseek-ai/DeepEP 2.1 at commit dd758ca
# (2026-07-14); its pre-V2 API, deep_ep/buffers/legacy.py, is what vLLM's deepep_high_throughput
# and deepep_low_latency call. Line numbers are that commit's.

#: DeepEP high-throughput EP sizes: the dispatch/combine config tables (used whenever vLLM passes
#: no config; vLLM passes one only for sizes in its own list, all of them in these tables) and the
#: kernels' rank switches (intranode launch.cuh SWITCH_RANKS 2/4/8, internode SWITCH_RDMA_RANKS).
DEEPEP_HT_WORLD_SIZES = Limit(
    frozenset({2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 144, 160}),
    "DeepEP 2.1 deep_ep/buffers/legacy.py:245-258 get_dispatch_config: 'Unsupported number of EP ranks'",
)
#: Every DeepEP buffer (both modes): fewer ranks than one NVLink domain, or whole domains.
DEEPEP_WORLD_SIZE_GROUPING = Limit(
    DEEPEP_NVL_PEERS,
    "DeepEP 2.1 csrc/legacy/buffer.hpp:114: num_ranks < 8 or num_ranks % 8 == 0",
)
#: High-throughput intranode notify_dispatch runs one 128-thread block over the local experts.
DEEPEP_HT_MAX_LOCAL_EXPERTS = Limit(
    128,
    "DeepEP 2.1 csrc/kernels/legacy/intranode.cu:167-168 notify_dispatch: num_experts / num_ranks <= 128",
    intranode_only=True,
)
#: High-throughput intranode dispatch copies each row through shared memory in two halves
#: (half_hidden_bytes + 8 <= kNumTMABytesPerWarp = 8192, so a row is at most 16368 bytes). The
#: copy is compiled unless DISABLE_SM90_FEATURES, which DeepEP 2.1's setup.py:130-139 refuses
#: ('Not implemented'), so every build for sm90 and for sm100 has it. vLLM pads the hidden size so
#: a bf16 row is a multiple of 512 bytes (deepep_ht.py maybe_roundup_layer_hidden_size) and sends
#: block-fp8 models' rows as fp8 (1 byte a value), every other dtype as bf16.
DEEPEP_HT_ROW_BYTES = Limit(
    RowBytes({"sm90": 2 * (8192 - 8), "sm100": 2 * (8192 - 8)}, 512, {"fp8_block128": 1}),
    "DeepEP 2.1 csrc/kernels/legacy/intranode.cu:304, 577 dispatch: half_hidden_bytes + 8 <= 8192",
    intranode_only=True,
)
#: Low-latency dispatch and combine: NVSHMEM_QP_DEPTH (1024 unless set, legacy.py:113) >=
#: (max tokens + 1) * 2, so 511 tokens per rank by default. vLLM's max tokens per rank is
#: --max-num-batched-tokens (moe.max_num_tokens), lowered to 256 for this backend when absent.
DEEPEP_LL_TOKENS_PER_RANK = Limit(
    QueueDepth("NVSHMEM_QP_DEPTH", 1024),
    "DeepEP 2.1 deep_ep/buffers/legacy.py:609: nvshmem_qp_depth >= (num_max_dispatch_tokens_per_rank + 1) * 2",
)
#: Low-latency dispatch: the received slots (ranks x max tokens) are a TMA row count.
DEEPEP_LL_SLOTS_MULTIPLE_OF = Limit(
    4,
    "DeepEP 2.1 csrc/legacy/buffer.hpp:1526: 'TMA requires the number of tokens to be multiple of 4'",
)

_FI_HINT = "pip install flashinfer-python (vLLM pins it)"
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
        ),
        Capability(
            "flashinfer_nvlink_one_sided",
            "FlashInfer MoE A2A one-sided NVLink kernels (TRT-LLM MoeAlltoAll)",
            (Spelling("flashinfer_nvlink_one_sided", "0.18.0", None,
                      "PR #36022 (merged 2026-03-04; first in v0.18.0) added it, nvfp4-only"),),
            dispatch_dtypes=frozenset({"nvfp4"}),
            top_k_allowed=frozenset({1, 2, 4, 6, 8, 10, 12, 14, 16, 18, 22}),
            max_world_size=64,
            needs_all_nvlinks=True,
            needs_fabric_across_nodes=True,
            package="flashinfer",
            install_hint=_FI_HINT,
            notes=("open upstream report #40373: accuracy drop with one-sided on prefill (P/D)",),
        ),
        Capability(
            "flashinfer_nvlink_two_sided",
            "FlashInfer MnnvlMoe two-sided all-to-all-v over NVLink",
            (
                Spelling("flashinfer_all2allv", FLAG_SINCE, "0.18.0",
                         "PR #21003 (2025-09) added it as flashinfer_all2allv"),
                Spelling("flashinfer_nvlink_two_sided", "0.18.0", None,
                         "PR #36022 (merged 2026-03-04; first in v0.18.0) renamed it"),
            ),
            experts_divisible_by_ep=True,
            experts_multiple_of=4,
            top_k_max=32,
            needs_all_nvlinks=True,
            needs_fabric_across_nodes=True,
            package="flashinfer",
            install_hint=_FI_HINT,
            notes=("open upstream report #39722: gibberish with two-sided on GB200/arm64",),
        ),
        Capability(
            "deepep_high_throughput",
            "DeepEP normal (high-throughput) kernels",
            (Spelling("deepep_high_throughput", FLAG_SINCE, None, _FLAG),),
            # fp16 models fail: vLLM asserts a bf16 expert output before Buffer.combine (deepep_ht.py
            # _finalize); every other dtype crosses as bf16 or (block fp8) fp8 + fp32 scales.
            dispatch_dtypes=frozenset({"bf16", "fp8", "fp8_block128", "nvfp4", "mxfp8", "mxfp4"}),
            experts_divisible_by_ep=True,
            top_k_max=32,  # DeepEP 2.1 intranode.cu/internode.cu: EP_DEVICE_ASSERT(num_topk <= 32)
            block_fp8_hidden_multiple=128,
            world_sizes=DEEPEP_HT_WORLD_SIZES,  # at most 160 ranks
            world_size_grouping=DEEPEP_WORLD_SIZE_GROUPING,
            max_local_experts=DEEPEP_HT_MAX_LOCAL_EXPERTS,
            max_row_bytes=DEEPEP_HT_ROW_BYTES,
            package="deep_ep",
            install_hint=_DEEPEP_HINT,
            supports_dbo=True,
        ),
        Capability(
            "deepep_low_latency",
            "DeepEP low-latency kernels (masked layout, CUDA-graph friendly)",
            (Spelling("deepep_low_latency", FLAG_SINCE, None, _FLAG),),
            # fp16 models fail: low_latency_dispatch asserts bf16 input (csrc/legacy/buffer.hpp).
            dispatch_dtypes=frozenset({"bf16", "fp8", "fp8_block128", "nvfp4", "mxfp8", "mxfp4"}),
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
            supports_dbo=True,
        ),
        # Known to vLLM 0.33.0 but not benchmarked by autoselect: checked, never recommended.
        Capability("deepep_v2", "DeepEP v2", (Spelling("deepep_v2", "0.24.0", None, _PARSER.format("0.24.0")),),
                   recommendable=False, package="deep_ep", install_hint=_DEEPEP_HINT),
        Capability("nixl_ep", "NIXL EP kernels", (Spelling("nixl_ep", "0.18.0", None, _PARSER.format("0.18.0")),),
                   recommendable=False, supports_dbo=True),
        Capability("moonep", "MoonEP balanced EP (NVLink)", (Spelling("moonep", "0.31.0", None, _PARSER.format("0.31.0")),),
                   recommendable=False),
        Capability("mori", "MoRI EP (ROCm), before the split into two modes",
                   (Spelling("mori", "0.15.0", "0.23.0", _PARSER.format("0.15.0") + "; split in v0.23.0"),),
                   recommendable=False),
        Capability("mori_high_throughput", "MoRI EP (ROCm)",
                   (Spelling("mori_high_throughput", "0.23.0", None, _PARSER.format("0.23.0")),), recommendable=False),
        Capability("mori_low_latency", "MoRI EP low latency (ROCm)",
                   (Spelling("mori_low_latency", "0.23.0", None, _PARSER.format("0.23.0")),), recommendable=False),
        # Removed upstream: still accepted by the parser, silently replaced.
        Capability(
            "pplx", "pplx-kernels (removed)", (Spelling("pplx", FLAG_SINCE, None, _FLAG),),
            recommendable=False, replaced_by="allgather_reducescatter", removed_in="0.17.0",
            removal_source="PR #33724 removed pplx (first release without it: v0.17.0)",
        ),
        Capability(
            "naive", "broadcast-based all2all (removed)", (Spelling("naive", FLAG_SINCE, None, _FLAG),),
            recommendable=False, replaced_by="allgather_reducescatter", removed_in="0.19.0",
            removal_source="PR #33728 maps naive to allgather_reducescatter (first in v0.19.0)",
        ),
    )
}

#: Old flag values that name a current backend: value -> (backend, deprecated since, source).
ALIASES = {
    "flashinfer_all2allv": ("flashinfer_nvlink_two_sided", "0.18.0",
                            "PR #36022 renamed it to flashinfer_nvlink_two_sided (v0.18.0)"),
}

#: Every --all2all-backend value some vLLM release accepted.
ALL_FLAG_VALUES = frozenset(s.value for c in BACKENDS.values() for s in c.spellings) | frozenset(ALIASES)


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


#: The parser choices of NEWEST_VLLM (vllm serve --help): anything else exits with status 2.
PARSER_CHOICES = frozenset(parser_choices(NEWEST_VLLM))


# --------------------------------------------------------------------------------------
# The one-sided constraint, era by era
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OneSidedEra:
    """What upstream vLLM does with one-sided and a given dispatch dtype in a version range."""

    since: str
    until: str | None
    upstream_accepts: frozenset  # dtypes upstream dispatches correctly
    consequence: str  # what happens to any other dtype: "silent_corruption" | "startup_error"
    source: str


#: Upstream history of ``flashinfer_nvlink_one_sided`` dtypes. autoselect ignores the relaxations.
ONE_SIDED_ERAS = (
    OneSidedEra("0.18.0", "0.20.0", frozenset({"nvfp4"}), "silent_corruption",
                "PR #36022 (v0.18.0): workspace sized for nvfp4 payloads, no dtype check"),
    OneSidedEra("0.20.0", "0.20.1", frozenset({"nvfp4"}), "startup_error",
                "PR #39717 (merged 2026-04-13; only in v0.20.0): ValueError for non-nvfp4 quant_dtype"),
    OneSidedEra("0.20.1", "0.29.0", frozenset({"nvfp4", "bf16", "fp16", "mxfp8"}), "startup_error",
                "PR #40960 (merged 2026-04-27; first in v0.20.1): bf16 and mxfp8 dispatch"),
    OneSidedEra("0.29.0", None, frozenset({"nvfp4", "bf16", "fp16", "mxfp8", "fp8_block128"}), "startup_error",
                "PR #51924 (merged 2026-08-12; first in v0.29.0): DeepSeek block-fp8 dispatch"),
)

#: Why autoselect keeps one-sided nvfp4-only although upstream relaxed it.
ONE_SIDED_POLICY = (
    "autoselect treats flashinfer_nvlink_one_sided as nvfp4-only in every vLLM version: its "
    "workspace was sized for nvfp4 payloads (PR #39717) and the later bf16/mxfp8/block-fp8 "
    "paths (PRs #40960, #51924) still have open accuracy reports (#40373, #42118)"
)


def one_sided_era(vllm_version: str) -> OneSidedEra | None:
    """The :data:`ONE_SIDED_ERAS` row for ``vllm_version`` (None before one-sided existed)."""
    for era in ONE_SIDED_ERAS:
        if version_in(vllm_version, era.since, era.until):
            return era
    return None


def one_sided_consequence(dtype: str, vllm_version: str) -> str:
    """What putting a ``dtype`` model on one-sided does on ``vllm_version``, in words."""
    era = one_sided_era(vllm_version)
    if era is None:
        return f"vLLM {vllm_version} has no flashinfer_nvlink_one_sided (added in v0.18.0, PR #36022)"
    if dtype in era.upstream_accepts:
        first = next(e for e in ONE_SIDED_ERAS if dtype in e.upstream_accepts)
        return (f"vLLM {vllm_version} accepts {dtype} here ({first.source}), but autoselect keeps "
                f"one-sided nvfp4-only (open reports #40373, #42118)")
    if era.consequence == "silent_corruption":
        return (f"on vLLM {vllm_version} this would SILENTLY CORRUPT output: the workspace is sized "
                f"for nvfp4 and nothing checks the dtype (fixed to an error by PR #39717, v0.20.0)")
    return f"on vLLM {vllm_version} this would fail at startup ({era.source})"


# --------------------------------------------------------------------------------------
# Flag history and the default
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FlagEvent:
    """One change to how vLLM is told its all2all backend."""

    what: str
    version: str
    source: str


FLAG_HISTORY = (
    FlagEvent("--all2all-backend added; VLLM_ALL2ALL_BACKEND deprecated", FLAG_SINCE,
              "PR #26732, merged 2025-10-13"),
    FlagEvent("VLLM_ALL2ALL_BACKEND removed (vLLM only warns it is unknown)", "0.16.0",
              "PR #33535, merged 2026-02-02"),
    FlagEvent("default briefly flashinfer_nvlink_one_sided on main, reverted; every release keeps "
              "allgather_reducescatter (checked 0.15.0-0.33.0)", "0.28.0",
              "PR #53311 merged 2026-08-21, reverted by PR #53952; PR #54268 (GB200/GB300 only) open"),
)
ENV_VAR_REMOVED_IN = "0.16.0"

#: Backends that support dual-batch overlap / micro-batching on CUDA (an assert in vLLM).
DBO_BACKENDS = tuple(b for b, c in BACKENDS.items() if c.supports_dbo)
#: Backends that lower the default --max-num-batched-tokens to 256 (batched DP MoE).
BATCHED_BACKENDS = ("deepep_low_latency", "nixl_ep")


# --------------------------------------------------------------------------------------
# Queries
# --------------------------------------------------------------------------------------


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


def known_to(backend: str, vllm_version: str) -> bool:
    """True when vLLM ``vllm_version`` has an ``--all2all-backend`` spelling for ``backend``."""
    return BACKENDS[resolve(backend)].spelling(vllm_version) is not None


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


# --------------------------------------------------------------------------------------
# legal()
# --------------------------------------------------------------------------------------


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
                          max_tokens_per_rank: int | None, environ) -> list[str]:
    """One reason per DeepEP kernel limit (:class:`Limit` fields of ``cap``) the deployment breaks."""
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
    if _limit_applies(local, world_size) and profile.num_experts // world_size > local.value:
        out.append(f"{name} intranode (EP <= {DEEPEP_NVL_PEERS}) handles at most {local.value} experts per rank, not "
                   f"{profile.num_experts // world_size} ({profile.num_experts} experts over EP {world_size}); "
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
    if _limit_applies(tokens, world_size) and max_tokens_per_rank is not None:
        depth = tokens.value
        most = depth.max_tokens(environ)
        if max_tokens_per_rank > most:
            out.append(f"{name} dispatches at most {most} tokens per rank with {depth.env}="
                       f"{depth.depth(environ)}, not {max_tokens_per_rank}: lower --max-num-batched-tokens "
                       f"to {most} or set {depth.env} to at least {depth.depth_for(max_tokens_per_rank)} "
                       f"({tokens.source})")
    slots = cap.slots_multiple_of
    if _limit_applies(slots, world_size) and max_tokens_per_rank is not None \
            and (world_size * max_tokens_per_rank) % slots.value:
        out.append(f"{name} needs EP size x tokens per rank to be a multiple of {slots.value}, not "
                   f"{world_size} x {max_tokens_per_rank} = {world_size * max_tokens_per_rank}: make "
                   f"--max-num-batched-tokens a multiple of {slots.value} ({slots.source})")
    return out


def legal(backend, profile, host, world_size, vllm_version, *, gpu_arch=None, max_tokens_per_rank=None,
          environ=None) -> Verdict:
    """Every reason ``backend`` cannot serve ``profile`` at ``world_size`` (EP size) on ``vllm_version``.

    :param backend: an ``--all2all-backend`` value (old spellings are resolved) or ``reference_*``.
    :param profile: an :class:`autoselect.model.MoeProfile`.
    :param host: an :class:`autoselect.hardware.HostFingerprint`, or None (hardware and package
        rules then go unchecked, with a warning).
    :param world_size: the EP group size (dp x tp).
    :param vllm_version: e.g. ``"0.33.0"``; None means :data:`NEWEST_VLLM`.
    :param gpu_arch: the target arch; defaults to ``host.gpu_arch``; required without a host.
    :param max_tokens_per_rank: the most tokens one rank dispatches at once, vLLM's
        ``--max-num-batched-tokens``; None: vLLM's default for the backend (256 for
        deepep_low_latency), which every per-token rule allows, so they go unchecked.
    :param environ: the serving environment, for limits an environment variable moves
        (``NVSHMEM_QP_DEPTH``); None: every such variable unset.
    :raises UnknownBackend, InvalidVllmVersion, InvalidWorldSize, GpuArchRequired,
        InvalidTokensPerRank, InvalidQueueDepth: bad input.
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
    if spelling is None:
        first = min((s.since for s in cap.spellings if s.since), key=parse_version, default=None)
        reasons.append(f"vLLM {version} has no --all2all-backend value for {canonical}"
                       + (f" (first in v{first})" if first else ""))
    elif spelling.since is None:
        warnings.append(f"autoselect does not know which vLLM release introduced {canonical} "
                        f"(present in {NEWEST_VLLM})")
    if backend in ALIASES and version_in(version, ALIASES[backend][1], None):
        warnings.append(f"{backend} is the deprecated old name; use {canonical} ({ALIASES[backend][2]})")
    if cap.replaced_by and version_in(version, cap.removed_in, None):
        warnings.append(f"{canonical} was removed ({cap.removal_source}); vLLM {version} silently "
                        f"runs {cap.replaced_by} instead")
        cap = BACKENDS[cap.replaced_by]

    dtype = profile.activation_dtype(arch)
    if cap.dispatch_dtypes is not None and dtype not in cap.dispatch_dtypes:
        accepted = "/".join(sorted(cap.dispatch_dtypes))
        reasons.append(
            f"{cap.backend} needs {accepted} activations; {profile.model} dispatches {dtype} on {arch}"
            + (f": {one_sided_consequence(dtype, version)}" if cap.backend == "flashinfer_nvlink_one_sided" else "")
        )
    if world_size > 1 and cap.experts_divisible_by_ep and profile.num_experts % world_size:
        reasons.append(f"{cap.backend} needs the {profile.num_experts} experts to divide evenly over "
                       f"EP size {world_size}")
    if cap.experts_multiple_of and profile.num_experts % cap.experts_multiple_of:
        reasons.append(f"{cap.backend} needs the number of experts ({profile.num_experts}) to be a "
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
    reasons.extend(_kernel_limit_reasons(cap, profile, world_size, arch, dtype, max_tokens_per_rank, environ))
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
    warnings.extend(cap.notes)
    return Verdict(backend, not reasons, tuple(reasons), tuple(warnings))


def legal_alternatives(profile, host, world_size, vllm_version, *, gpu_arch=None, exclude=(),
                       max_tokens_per_rank=None, environ=None) -> list[str]:
    """The recommendable backends that :func:`legal` accepts, in table order."""
    return [
        b for b in recommendable_backends(vllm_version)
        if b not in exclude and legal(b, profile, host, world_size, vllm_version, gpu_arch=gpu_arch,
                                      max_tokens_per_rank=max_tokens_per_rank, environ=environ).ok
    ]
