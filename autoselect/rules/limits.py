"""DeepEP kernel limits as data: each value with the DeepEP source line that imposes it."""

from __future__ import annotations

from typing import NamedTuple

from autoselect.errors import UserError


class InvalidQueueDepth(UserError):
    "NVSHMEM_QP_DEPTH is set to something other than a positive integer."


def env_positive_int(environ, name: str, error: type[UserError], hint: str) -> int | None:
    """The positive integer ``environ[name]`` holds, None when unset.

    :raises error: the value is not a positive integer (``hint`` says what to do instead).
    """
    raw = (environ or {}).get(name)
    if raw is None:
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        value = 0
    if value < 1:
        raise error(f"{name}={raw!r} is not a positive integer; {hint}")
    return value


class Limit(NamedTuple):
    """One kernel limit as data: its value, the upstream lines that impose it, and where it applies.

    ``intranode_only``: the limit belongs to DeepEP's intranode (NVLink) kernels, which run when
    the EP group has at most :data:`DEEPEP_NVL_PEERS` ranks; beyond that the internode kernels
    run and the limit does not apply.
    """

    value: object
    source: str
    intranode_only: bool = False


class RowBytes(NamedTuple):
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


class QueueDepth(NamedTuple):
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
        depth = env_positive_int(environ, self.env, InvalidQueueDepth,
                                 f"unset it (DeepEP uses {self.default}) or set a number such as {self.default}")
        return self.default if depth is None else depth

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
