"""The benchmark point: payload layout, synthetic experts, byte counts (routing: :mod:`bench.routing`).

A :class:`BenchPoint` (one shape at one token count per rank) is deterministic from its seed:
every rank can regenerate any token's payload bytes and routing without talking to the others,
which is what lets the correctness gate check delivery bit-exactly on the receiving side.

Payload layout per token (``autoselect/payload.py``): the activation values (``x``, e.g.
``2H`` bytes for bf16, ``ceil(H/2)`` for nvfp4), their block scales (``x_sf``, e.g.
``ceil(H/16)`` fp8 scales for nvfp4; none for bf16/fp16/fp8), the int32 expert ids and the
fp32 routing weights (``4·top_k`` each).
Every tensor a backend sees is ``uint8``/``int32``/``float32``: quantized values are opaque
bytes, so fp8/fp4 never reach a collective library that cannot handle them (gloo).

Payload bytes are hashes of (seed, token, byte), except ``fp8_block128``, whose rows are
*quantization-stable* (:func:`fp8_block128_rows`): fp8 e4m3 codes without NaN, every
128-element block holding one element of magnitude 448 (the largest finite e4m3 value), and
power-of-two fp32 block scales. Their bf16 source (:attr:`DispatchBatch.x_bf16`,
``value · scale``, exact in bf16) quantizes back to exactly these bytes under DeepEP's
low-latency cast (``amax/448`` → scale, ``x·448/amax`` → e4m3), so a backend that
quantizes inside its dispatch kernel can be checked bit-exactly too.

Global token ids: rank ``r`` owns tokens ``r*T .. r*T+T-1`` (``T = tokens_per_rank``).

Synthetic experts (owned by the harness): expert ``e`` multiplies its input by
``c_e = b_e / 4`` with ``b_e`` in {1, 2, 3}; routing weights are ``w = a / 16`` with small
integers ``a``; the expert input is decoded from the token's value bytes, one 4-bit nibble
per element as ``±2^(n-4)``. With these choices every partial sum a backend can form is an
integer multiple of ``x/64`` below ``256·x/64``, exactly representable in bf16, so the
expected combine output ``sum_k w_k · c_{e_k} · x`` is exact under any summation order and
the gate can demand bit-exact results.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from autoselect.errors import UserError
from autoselect.payload import (
    ACTIVATION_DTYPES,
    combine_bytes_per_token,
    dispatch_bytes_per_token,
    quant_bytes,
)
from bench.routing import load_routing_file, parse_routing

#: Tokens per chunk when generating payload bytes (bounds temporary int64 memory).
_GEN_CHUNK_TOKENS = 1024
_M32 = 0xFFFFFFFF

#: Largest payload table (every token's value and scale bytes) a :class:`BenchPoint` keeps per
#: device instead of hashing the rows again for each use (:meth:`BenchPoint.payload_table`).
PAYLOAD_TABLE_MAX_BYTES = 32 << 20

#: Elements per fp32 scale in the ``fp8_block128`` payload.
FP8_BLOCK = 128
#: The fp8 e4m3 (``float8_e4m3fn``) code of +448, its largest finite value; ``| 0x80`` is -448.
#: ``0x7F`` and ``0xFF`` are NaN.
E4M3_MAX_CODE = 0x7E
#: ``fp8_block128`` block scales are ``2**s`` with ``s`` in this inclusive range (5 hash bits).
FP8_BLOCK_SCALE_EXPONENTS = (-16, 15)


class ImpossibleShape(UserError):
    "The benchmark shape is impossible (tokens, top_k, experts, world size, dtype)."


# --------------------------------------------------------------------------------------
# Byte counts and bandwidth: one small function each.


def dispatch_bytes(dtype: str, hidden: int, top_k: int) -> int:
    """Bytes one token carries in dispatch: activation values + scales + ``8·top_k``.

    bf16/fp16 ``2H``; fp8 ``H``; fp8_block128 ``H + 4·ceil(H/128)``; mxfp8 ``H + ceil(H/32)``;
    nvfp4 ``ceil(H/2) + ceil(H/16)``; mxfp4 ``ceil(H/2) + ceil(H/32)``; plus int32 ids and
    fp32 weights (``4·top_k`` each). The harness's 4-byte token index is not counted.
    """
    return dispatch_bytes_per_token(dtype, hidden, top_k)


def combine_bytes(hidden: int) -> int:
    """Bytes one token's expert output carries back in combine: ``2H`` (bf16)."""
    return combine_bytes_per_token(hidden)


def algbw_gbps(bytes_per_rank: float, time_us: float) -> float:
    """Algorithm bandwidth in decimal GB/s, nccl-tests' ``algbw = S/t``.

    ``S`` is the logical bytes one rank moves in one round trip (:meth:`BenchPoint.bytes_per_rank`):
    its tokens' dispatch rows once per distinct destination rank, its own rank included (DeepEP /
    TensorRT-LLM "logical" accounting), plus the bf16 expert outputs sent back in combine, averaged
    over ranks. ``t`` is the round-trip time (dispatch + combine).
    """
    if not time_us or time_us <= 0:
        return 0.0
    return bytes_per_rank / (time_us * 1e-6) / 1e9


def busbw_gbps(algbw: float, world_size: int) -> float:
    """Bus bandwidth, nccl-tests' all-to-all convention ``busbw = algbw·(n−1)/n``.

    The ``(n−1)/n`` factor removes the share of ``S`` that stays on the local rank under uniform
    routing, so busbw compares with the per-GPU link rate (450 GB/s per direction on NVLink 4);
    0 at world size 1."""
    if world_size <= 0:
        return 0.0
    return algbw * (world_size - 1) / world_size


# --------------------------------------------------------------------------------------
# Deterministic bytes.


def _hash_bytes(token_ids, nbytes: int, seed: int, salt: int):
    """``uint8 [N, nbytes]``: byte ``j`` of token ``g`` as a hash of (seed, salt, g, j), mixed in place."""
    import torch

    n = token_ids.shape[0]
    out = torch.empty((n, nbytes), dtype=torch.uint8, device=token_ids.device)
    if n == 0 or nbytes == 0:
        return out
    cols = torch.arange(nbytes, dtype=torch.int64, device=token_ids.device) * 0x85EBCA77
    base = (seed * 0x27D4EB2F + salt * 0x165667B1) & _M32
    v = torch.empty((min(n, _GEN_CHUNK_TOKENS), nbytes), dtype=torch.int64, device=token_ids.device)
    shifted = torch.empty_like(v)
    for start in range(0, n, _GEN_CHUNK_TOKENS):
        g = token_ids[start : start + _GEN_CHUNK_TOKENS].to(torch.int64)
        h, t = v[: g.shape[0]], shifted[: g.shape[0]]
        torch.add(cols[None, :], g[:, None] * 0x9E3779B1 + base, out=h).bitwise_and_(_M32)
        for mult, shift in ((0x2C1B3C6D, 15), (0x297A2D39, 12), (None, 15)):  # xorshift-multiply rounds
            h.bitwise_xor_(torch.bitwise_right_shift(h, shift, out=t))
            if mult:
                h.mul_(mult).bitwise_and_(_M32)
        out[start : start + g.shape[0]] = h.to(torch.uint8)  # the low byte
    return out


def fp8_block128_rows(token_ids, hidden: int, seed: int):
    """Quantization-stable ``fp8_block128`` payload rows: ``(x uint8 [N, H], x_sf uint8 [N, 4·ceil(H/128)])``.

    ``x`` holds fp8 e4m3 codes: hash bytes with the NaN codes ``0x7F``/``0xFF`` turned into
    ±448 (``^ 1``), then in every block of 128 elements (the last one may be shorter) one
    element, at a hashed position with a hashed sign, set to ±448. So each block's largest
    magnitude is exactly 448. ``x_sf`` holds one fp32 scale per block, ``2**s`` with a hashed
    ``s`` in :data:`FP8_BLOCK_SCALE_EXPONENTS`, little-endian. Everything is a function of
    (seed, token), like every other payload.

    Why: ``value · 2**s`` is exact in bf16 (3 mantissa bits, exponents far from the limits),
    and a block-128 cast of those bf16 rows finds ``amax = 448 · 2**s``, whose fp32
    ``amax · (1/448)`` is exactly ``2**s`` and ``448 / amax`` exactly ``2**-s``, so it returns
    these very codes and scales (DeepEP low-latency, with or without power-of-two/UE8M0 scales).
    """
    import torch

    n, blocks = token_ids.shape[0], -(-hidden // FP8_BLOCK)
    codes = _hash_bytes(token_ids, hidden, seed, salt=1)
    codes = torch.where((codes & 0x7F) == 0x7F, codes ^ 1, codes)
    control = _hash_bytes(token_ids, 2 * blocks, seed, salt=2).to(torch.int64)
    place, exponent = control[:, 0::2], control[:, 1::2]
    start = torch.arange(blocks, dtype=torch.int64, device=codes.device) * FP8_BLOCK
    length = (hidden - start).clamp(max=FP8_BLOCK)
    column = start + (place & 0x7F) % length
    codes.scatter_(1, column, (E4M3_MAX_CODE | (place & 0x80)).to(torch.uint8))
    low, high = FP8_BLOCK_SCALE_EXPONENTS
    s = low + exponent % (high - low + 1)
    scale_bits = ((s + 127) << 23).to(torch.int32)  # the fp32 bit pattern of 2**s
    return codes, scale_bits.contiguous().view(torch.uint8).reshape(n, 4 * blocks)


def fp8_block128_to_bf16(x, x_sf, hidden: int):
    """The bf16 rows ``[N, H]`` an ``fp8_block128`` payload encodes: each e4m3 value times its block's fp32 scale.

    Exact for :func:`fp8_block128_rows` payloads (see there); this is what a backend that
    quantizes inside its dispatch kernel (DeepEP low latency, ``use_fp8=True``) is given.
    """
    import torch

    values = x[:, :hidden].contiguous().view(torch.float8_e4m3fn).to(torch.float32)
    scales = x_sf.contiguous().view(torch.float32)
    per_element = scales.repeat_interleave(FP8_BLOCK, dim=1)[:, :hidden]
    return (values * per_element).to(torch.bfloat16)


def decode_expert_input(x_bytes, hidden: int):
    """The synthetic expert input ``bf16 [N, H]`` decoded from value bytes.

    Element ``j`` is nibble ``j`` of the row (low nibble first): bit 3 is the sign and
    bits 0-2 the exponent, value ``±2^(n-4)``. Exact in bf16.
    """
    import torch

    nib = hidden
    nbytes = (nib + 1) // 2
    raw = x_bytes[:, :nbytes].to(torch.int32)
    nibbles = torch.stack((raw & 0xF, raw >> 4), dim=2).reshape(raw.shape[0], -1)[:, :nib]
    mag = torch.pow(2.0, (nibbles & 7).to(torch.float32) - 4.0)
    val = torch.where((nibbles & 8) != 0, -mag, mag)
    return val.to(torch.bfloat16)


#: Rows decoded at a time by :func:`scaled_expert_input`: the int32 nibbles and the fp32 rows
#: of a whole receive buffer (16384 tokens x 8 ranks x hidden 7168) would take ~16 GB.
DECODE_CHUNK_ROWS = 8192


def scaled_expert_input(x_bytes, scale, hidden: int):
    """``bf16 [N, H]``: row ``i`` of :func:`decode_expert_input` times ``scale[i]`` (fp32), in chunks.

    The same numbers as decoding everything at once (each row is computed alone), with the
    temporaries bounded by :data:`DECODE_CHUNK_ROWS` rows.
    """
    import torch

    out = torch.empty((x_bytes.shape[0], hidden), dtype=torch.bfloat16, device=x_bytes.device)
    for start in range(0, x_bytes.shape[0], DECODE_CHUNK_ROWS):
        stop = start + DECODE_CHUNK_ROWS
        x_in = decode_expert_input(x_bytes[start:stop], hidden).to(torch.float32)
        out[start:stop] = (x_in * scale[start:stop, None].to(torch.float32)).to(torch.bfloat16)
    return out


# --------------------------------------------------------------------------------------
# The benchmark point.


@dataclass
class DispatchBatch:
    """One rank's dispatch input: the tensors a backend moves (all on the rank's device).

    ``x`` ``uint8 [T, value_bytes]``, ``x_sf`` ``uint8 [T, scale_bytes]`` or None,
    ``topk_ids`` ``int32 [T, top_k]``, ``topk_weights`` ``float32 [T, top_k]``,
    ``token_index`` ``int32 [T]`` (global token ids, for backends whose rows arrive out of
    order), ``dtype`` the activation dtype the bytes encode.
    """

    x: object
    x_sf: object | None
    topk_ids: object
    topk_weights: object
    token_index: object
    dtype: str | None = None

    @property
    def num_tokens(self) -> int:
        """Tokens in this batch."""
        return int(self.x.shape[0])

    @functools.cached_property
    def x_bf16(self):
        """``bf16 [T, H]`` source rows of an ``fp8_block128`` batch (None for other dtypes), built on first use.

        A backend that takes bf16 and quantizes to fp8 with per-128 scales inside its
        dispatch (DeepEP low latency) sends these; its cast reproduces ``x`` and ``x_sf``
        exactly (:func:`fp8_block128_rows`).
        """
        if self.dtype != "fp8_block128":
            return None
        return fp8_block128_to_bf16(self.x, self.x_sf, int(self.x.shape[1]))


@dataclass
class BenchPoint:
    """One benchmark shape: tokens per rank, model shape, dtype, routing and seed."""

    tokens_per_rank: int
    hidden: int
    top_k: int
    experts: int
    world_size: int
    dtype: str
    routing: str = "uniform"
    seed: int = 0
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self):
        validate_shape(self.tokens_per_rank, self.hidden, self.top_k, self.experts, self.world_size, self.dtype)
        self.routing_spec = parse_routing(self.routing)

    # -- layout -------------------------------------------------------------------------
    @property
    def value_bytes(self) -> int:
        """Activation value bytes per token (``x``)."""
        return quant_bytes(self.dtype, self.hidden)[0]

    @property
    def scale_bytes(self) -> int:
        """Activation scale bytes per token (``x_sf``); 0 for bf16/fp16/fp8."""
        return quant_bytes(self.dtype, self.hidden)[1]

    @property
    def dispatch_bytes_per_token(self) -> int:
        """Dispatch bytes per token (see :func:`dispatch_bytes`)."""
        return dispatch_bytes(self.dtype, self.hidden, self.top_k)

    @property
    def combine_bytes_per_token(self) -> int:
        """Combine bytes per token (see :func:`combine_bytes`)."""
        return combine_bytes(self.hidden)

    @property
    def total_tokens(self) -> int:
        """Tokens over all ranks."""
        return self.tokens_per_rank * self.world_size

    # -- experts ------------------------------------------------------------------------
    def expert_range(self, rank: int) -> tuple[int, int]:
        """``[first, last)`` experts owned by ``rank``: contiguous, ranks below the remainder own one more."""
        base, rem = divmod(self.experts, self.world_size)
        first = rank * base + min(rank, rem)
        return first, first + base + (1 if rank < rem else 0)

    def expert_owner(self, ids):
        """The rank owning each expert id (tensor in, tensor out)."""
        import torch

        base, rem = divmod(self.experts, self.world_size)
        big = rem * (base + 1)
        ids = ids.to(torch.int64)
        return torch.where(ids < big, ids // (base + 1), rem + (ids - big) // max(base, 1))

    def expert_scale_numerators(self, device="cpu"):
        """``int64 [experts]``: ``b_e`` in {1, 2, 3}; expert ``e`` scales its input by ``b_e/4``."""
        import torch

        key = ("b", str(device))
        if key not in self._cache:
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + 17)
            self._cache[key] = torch.randint(1, 4, (self.experts,), generator=g).to(device)
        return self._cache[key]

    @property
    def max_weight_numerator(self) -> int:
        """Largest ``a`` in ``w = a/16``, chosen so ``top_k · a · b <= 256`` keeps sums exact."""
        return max(1, min(15, 256 // (3 * self.top_k)))

    # -- routing ------------------------------------------------------------------------
    def global_routing(self, device="cpu"):
        """``(topk_ids int32 [W*T, k], weight numerators int64 [W*T, k])`` for every token."""
        import torch

        key = ("routing", str(device))
        if key in self._cache:
            return self._cache[key]
        n, k, e = self.total_tokens, self.top_k, self.experts
        g = torch.Generator().manual_seed(self.seed * 7_919 + 1)
        spec = self.routing_spec
        if spec.kind == "uniform":
            ids = torch.rand((n, e), generator=g).topk(k, dim=1).indices
        elif spec.kind == "zipf":
            perm = torch.randperm(e, generator=g)
            ranks = torch.arange(1, e + 1, dtype=torch.float64)
            p = torch.empty(e, dtype=torch.float64)
            p[perm] = ranks.pow(-spec.exponent)
            ids = torch.multinomial(p.float().expand(n, e), k, replacement=False, generator=g)
        else:
            table = load_routing_file(spec.path, k, e)
            ids = table[torch.arange(n) % table.shape[0]]
        gw = torch.Generator().manual_seed(self.seed * 104_729 + 3)
        a = torch.randint(1, self.max_weight_numerator + 1, (n, k), generator=gw)
        result = (ids.to(torch.int32).to(device), a.to(device))
        self._cache[key] = result
        return result

    def destinations(self, device="cpu"):
        """``bool [W*T, W]``: which ranks own at least one of each token's experts."""
        import torch

        key = ("dest", str(device))
        if key not in self._cache:
            ids, _ = self.global_routing(device)
            owner = self.expert_owner(ids)
            dest = torch.zeros((ids.shape[0], self.world_size), dtype=torch.bool, device=ids.device)
            dest.scatter_(1, owner, True)
            self._cache[key] = dest
        return self._cache[key]

    def bytes_per_rank(self) -> int:
        """Logical bytes one rank moves per round trip (``S`` of :func:`algbw_gbps`).

        ``(token, destination rank)`` pairs over all ranks (each token once per distinct
        rank owning one of its experts, own rank included), times dispatch + combine bytes
        per token, divided by the world size.
        """
        pairs = int(self.destinations().sum())
        per_token = self.dispatch_bytes_per_token + self.combine_bytes_per_token
        return round(pairs * per_token / self.world_size)

    # -- payloads -----------------------------------------------------------------------
    def payload_rows(self, token_ids):
        """``(x uint8 [N, value_bytes], x_sf uint8 [N, scale_bytes] | None)`` for global ids.

        Hash bytes for every dtype but ``fp8_block128``, whose rows are quantization-stable
        (:func:`fp8_block128_rows`). Rows of a table generated once per device
        (:meth:`payload_table`) when it is small, else generated for these ids; always a new
        tensor (an adapter cannot alter what the gate compares against).
        """
        import torch

        table = self.payload_table(token_ids.device)
        if table is None:
            return self.generate_rows(token_ids)
        idx = token_ids.to(torch.int64)
        x, sf = table
        return x.index_select(0, idx), None if sf is None else sf.index_select(0, idx)

    def payload_table(self, device):
        """Every token's payload rows, generated once, or None above :data:`PAYLOAD_TABLE_MAX_BYTES`.

        Hashing them from the seed for each gate, batch and expected combine cost more than a short
        point's timing (~0.25 s at 256 tokens per rank, hidden 1024, on a loaded 2-core machine).
        """
        import torch

        key = ("table", str(device))
        if key not in self._cache:
            size = self.total_tokens * (self.value_bytes + self.scale_bytes)
            self._cache[key] = None if size > PAYLOAD_TABLE_MAX_BYTES else self.generate_rows(
                torch.arange(self.total_tokens, dtype=torch.int64, device=device))
        return self._cache[key]

    def generate_rows(self, token_ids):
        """The payload rows of ``token_ids``, generated from the seed (see :meth:`payload_rows`)."""
        if self.dtype == "fp8_block128":
            return fp8_block128_rows(token_ids, self.hidden, self.seed)
        x = _hash_bytes(token_ids, self.value_bytes, self.seed, salt=1)
        sf = _hash_bytes(token_ids, self.scale_bytes, self.seed, salt=2) if self.scale_bytes else None
        return x, sf

    def batch(self, rank: int, device="cpu") -> DispatchBatch:
        """The dispatch input of ``rank`` (deterministic from the seed)."""
        import torch

        t = self.tokens_per_rank
        token_index = torch.arange(rank * t, (rank + 1) * t, dtype=torch.int32, device=device)
        x, sf = self.payload_rows(token_index)
        ids, a = self.global_routing(device)
        rows = slice(rank * t, (rank + 1) * t)
        weights = a[rows].to(torch.float32) / 16.0
        return DispatchBatch(x=x, x_sf=sf, topk_ids=ids[rows].contiguous(),
                             topk_weights=weights.contiguous(), token_index=token_index, dtype=self.dtype)

    # -- synthetic experts --------------------------------------------------------------
    def expert_output(self, rank: int, x_bytes, topk_ids, topk_weights, valid=None, expert=None):
        """What this rank's experts return for received rows: ``bf16 [R, H]``.

        Row ``i`` is ``x_i · sum_{k: owner(e_k)=rank} w_k · c_{e_k}`` (weights applied,
        reduced over the rank's local experts, as vLLM's experts do before combine); with
        ``expert`` (per-slot layouts) it is the unweighted ``c_{expert_i} · x_i``.
        Invalid rows (``valid`` False) and ids outside this rank's experts contribute zero.
        """
        import torch

        first, last = self.expert_range(rank)
        b = self.expert_scale_numerators(x_bytes.device)
        if expert is not None:
            e = expert.to(torch.int64)
            local = (e >= first) & (e < last)
            s = torch.where(local, b[e.clamp(0, self.experts - 1)].to(torch.float32) / 4.0, 0.0)
        else:
            ids = topk_ids.to(torch.int64)
            local = (ids >= first) & (ids < last)
            scale = torch.where(local, b[ids.clamp(0, self.experts - 1)].to(torch.float32), 0.0)
            s = (topk_weights.to(torch.float32) * scale / 4.0).sum(dim=1)
        if valid is not None:
            s = torch.where(valid, s, 0.0)
        return scaled_expert_input(x_bytes, s, self.hidden)

    def expected_combine(self, rank: int, device="cpu"):
        """The exact combine result of ``rank``'s tokens: ``sum_k w_k · c_{e_k} · x``, bf16.

        Computed once per (rank, device) from a batch of its own (never an adapter's); each call
        returns a copy, so no caller can alter what the next gate expects."""
        import torch

        key = ("expected", rank, str(device))
        if key not in self._cache:
            batch = self.batch(rank, device)
            ids = batch.topk_ids.to(torch.int64)
            b = self.expert_scale_numerators(ids.device)
            s = (batch.topk_weights * b[ids].to(torch.float32) / 4.0).sum(dim=1)
            self._cache[key] = scaled_expert_input(batch.x, s, self.hidden)
        return self._cache[key].clone()


def validate_shape(tokens_per_rank, hidden, top_k, experts, world_size, dtype) -> None:
    """Raise :class:`ImpossibleShape` unless the shape can be benchmarked."""
    if dtype not in ACTIVATION_DTYPES:
        raise ImpossibleShape(f"unknown activation dtype {dtype!r}; use one of {', '.join(ACTIVATION_DTYPES)}")
    for name, value in (("tokens per rank", tokens_per_rank), ("hidden size", hidden),
                        ("top_k", top_k), ("experts", experts), ("world size", world_size)):
        if not isinstance(value, int) or value < 1:
            raise ImpossibleShape(f"{name} must be a positive integer, got {value!r}")
    if top_k > experts:
        raise ImpossibleShape(f"top_k {top_k} is larger than the number of experts {experts}; lower --top-k")
    if experts < world_size:
        raise ImpossibleShape(f"{experts} experts cannot be spread over {world_size} ranks; "
                              "every rank needs at least one expert (lower --world-size)")
    if top_k * 3 > 256:
        raise ImpossibleShape(f"top_k {top_k} is above 85, which the exact synthetic experts cannot cover")
