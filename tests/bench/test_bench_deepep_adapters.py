"""The DeepEP adapters without DeepEP: availability reasons, shape plans, handle decoding, rules rows.

deep_ep needs a CUDA build and is not installed here, so nothing below calls it; no stand-in
for it exists either. What is tested is the adapters' own logic: why they are unavailable,
which shapes and dtypes they refuse (with the reason DeepEP's or vLLM's source gives), how
vLLM pads the hidden size, and how DeepEP's handles (laid out as DeepEP documents and tests
them) are decoded into the token indices the correctness gate checks. The GPU run is
``perf/deepep_gpu_check.sh``.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from autoselect import rules
from autoselect.model import MoeProfile
from autoselect.payload import ACTIVATION_DTYPES
from autoselect.rules.budgets import CHUNK_SIZE
from autoselect.rules.wire import wire_dtype
from bench import backends
from bench.backends import BenchContext
from bench.backends import deepep_common as common
from bench.backends.deepep_high_throughput import DeepepHighThroughput
from bench.backends.deepep_low_latency import DeepepLowLatency
from bench.measure.gate import check_dispatch
from bench.synthetic import BenchPoint
from support.fp8_cast import deepep_ll_cast

HAVE_DEEP_EP = common._has_module("deep_ep")


def _ctx(device="cuda", world_size=8, nvlinks=True, rank=0):
    return BenchContext(rank=rank, world_size=world_size, device=device, torch_device=torch.device("cpu"),
                        nvlinks_all_up=nvlinks)


# --------------------------------------------------------------------------------------
# Importing and availability


def test_both_adapters_import_and_load_through_the_registry_without_deep_ep():
    code = ("import sys; from bench import backends; "
            "a = backends.load('deepep_high_throughput'); b = backends.load('deepep_low_latency'); "
            "print(a.name, b.name, a.supports_cuda_graph, b.supports_cuda_graph, 'deep_ep' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["deepep_high_throughput", "deepep_low_latency", "False", "True", "False"]


@pytest.mark.parametrize("adapter", [DeepepHighThroughput(), DeepepLowLatency()], ids=lambda a: a.name)
def test_on_cpu_both_adapters_are_unavailable_because_deepep_needs_cuda(adapter):
    assert adapter.unavailable_reason(_ctx("cpu", world_size=2)) == "needs CUDA GPUs (DeepEP kernels); this run is on CPU"


@pytest.mark.skipif(HAVE_DEEP_EP, reason="deep_ep is installed here")
@pytest.mark.parametrize("adapter", [DeepepHighThroughput(), DeepepLowLatency()], ids=lambda a: a.name)
def test_on_cuda_without_deep_ep_both_adapters_say_how_to_install_it(adapter):
    assert adapter.unavailable_reason(_ctx("cuda", world_size=8)) == (
        "deep_ep not installed (build it from github.com/deepseek-ai/DeepEP; not a vLLM dependency)")


@pytest.mark.parametrize("world_size", [1, 3, 6, 16])
def test_high_throughput_runs_only_at_the_rank_counts_its_intranode_kernels_exist_for(world_size):
    assert DeepepHighThroughput().unavailable_reason(_ctx(world_size=world_size)) == (
        f"DeepEP intranode kernels exist for 2, 4, 8 ranks only (launch.cuh SWITCH_RANKS), not {world_size}; "
        "beyond 8 ranks DeepEP needs its internode RDMA path")


def test_high_throughput_needs_nvlink_between_the_gpus():
    assert DeepepHighThroughput().unavailable_reason(_ctx(world_size=4, nvlinks=False)) == (
        "DeepEP intranode kernels need every GPU pair connected by NVLink; links are down here")


@pytest.mark.parametrize("world_size", [9, 12])
def test_low_latency_refuses_rank_counts_above_8_that_are_not_multiples_of_8(world_size):
    assert DeepepLowLatency().unavailable_reason(_ctx(world_size=world_size)) == (
        f"DeepEP buffers take fewer than 8 ranks or a multiple of 8, not {world_size} "
        "(csrc/legacy/buffer.hpp asserts num_ranks < 8 or num_ranks % 8 == 0)")


# --------------------------------------------------------------------------------------
# What crosses the wire, per dtype


def test_the_wire_table_covers_every_activation_dtype_for_both_backends():
    for backend in (common.HIGH_THROUGHPUT, common.LOW_LATENCY):
        assert set(common.WIRE[backend]) == set(ACTIVATION_DTYPES)
    assert [d for d, why in common.WIRE[common.HIGH_THROUGHPUT].items() if why is None] == ["bf16", "fp8_block128"]
    assert [d for d, why in common.WIRE[common.LOW_LATENCY].items() if why is None] == ["bf16", "fp8_block128"]


@pytest.mark.parametrize("backend", [common.HIGH_THROUGHPUT, common.LOW_LATENCY])
@pytest.mark.parametrize("activation", ["bf16", "fp8", "fp8_block128", "nvfp4", "mxfp4"])
def test_every_payload_vllm_sends_through_deepep_by_default_is_one_the_adapters_carry(backend, activation):
    # the sweep hands each adapter its wire dtype (autoselect.rules.wire): none of these is refused
    wire = wire_dtype(backend, activation, "0.34.0")
    assert common.WIRE[backend][wire.dtype] is None


@pytest.mark.parametrize("dtype", ["fp8", "nvfp4", "mxfp4"])
def test_high_throughput_refuses_bytes_vllm_never_sends_through_it(dtype):
    with pytest.raises(common.DeepepCannotRun) as err:
        common.ht_plan(dtype, 7168, 8, 256, 8)
    assert str(err.value) == (f"deepep_high_throughput cannot carry {dtype} payloads: vLLM never sends {dtype} "
                              "through deepep_high_throughput (it quantizes after the dispatch)")


def test_low_latency_nvfp4_dispatch_is_a_path_the_adapter_does_not_drive():
    wire = wire_dtype(common.LOW_LATENCY, "nvfp4", "0.34.0", {"VLLM_DEEPEPLL_NVFP4_DISPATCH": "1"})
    assert wire.dtype == "nvfp4"
    with pytest.raises(common.DeepepCannotRun) as err:
        common.ll_plan(wire.dtype, 7168, 8, 256, 8, 128)
    assert "VLLM_DEEPEPLL_NVFP4_DISPATCH=1" in str(err.value)


@pytest.mark.parametrize("gpu_major, round_scale, ue8m0", [(9, False, False), (10, True, True), (12, False, False)])
def test_low_latency_block_fp8_uses_deepeps_in_kernel_cast_with_vllms_scale_format_for_the_gpu(
        gpu_major, round_scale, ue8m0):
    plan = common.ll_plan("fp8_block128", 7168, 8, 256, 8, 128, gpu_major=gpu_major)
    assert plan == common.LlPlan(7168, 256, fp8=True, round_scale=round_scale, ue8m0=ue8m0)
    assert plan.scales == 56


def test_low_latency_block_fp8_pads_2880_to_3072_with_24_scales_and_bf16_stays_unquantized():
    plan = common.ll_plan("fp8_block128", 2880, 4, 128, 8, 16, gpu_major=10)
    assert (plan.hidden, plan.scales, plan.fp8) == (3072, 24, True)
    assert common.ll_plan("bf16", 2880, 4, 128, 8, 16, gpu_major=10) == common.LlPlan(3072, 256)
    assert all(h % 512 == 0 for h in common.LL_HIDDEN_SIZES)  # buffer.hpp asserts hidden % 512 for fp8


@pytest.mark.parametrize("dtype", ["fp8", "mxfp8", "mxfp4"])
def test_low_latency_refuses_bytes_vllm_never_sends_through_it(dtype):
    with pytest.raises(common.DeepepCannotRun, match=rf"vLLM never sends {dtype} through deepep_low_latency"):
        common.ll_plan(dtype, 7168, 8, 256, 8, 128)


def test_low_latency_takes_bf16_only_not_fp16():
    with pytest.raises(common.DeepepCannotRun, match=r"low_latency_dispatch takes bf16 only"):
        common.ll_plan("fp16", 4096, 8, 64, 8, 16)


# --------------------------------------------------------------------------------------
# Shape plans (vLLM's padding, DeepEP's limits)


@pytest.mark.parametrize("hidden, padded", [(7168, 7168), (2880, 3072), (2048, 2048), (5000, 5120), (256, 256)])
def test_high_throughput_pads_hidden_to_a_512_byte_bf16_row_like_vllm(hidden, padded):
    assert common.ht_plan("bf16", hidden, 8, 64, 8) == common.HtPlan(padded, fp8=False)


def test_high_throughput_block_fp8_plan_has_one_fp32_scale_per_128_padded_values():
    plan = common.ht_plan("fp8_block128", 7168, 8, 256, 8)
    assert (plan.hidden, plan.row_bytes, plan.scales) == (7168, 7168, 56)


def test_high_throughput_bf16_rows_over_8184_bytes_trip_the_sm90_shared_memory_copy():
    with pytest.raises(common.DeepepCannotRun) as err:
        common.ht_plan("bf16", 8192, 8, 256, 8)
    assert str(err.value) == (
        "deepep_high_throughput on an SM90 build copies each row in two halves of at most 8184 bytes "
        "(intranode.cu dispatch: half_hidden_bytes + 8 <= kNumTMABytesPerWarp); a bf16 row of hidden "
        "8192 is 16384 bytes")
    assert common.ht_plan("bf16", 8192, 8, 256, 8, sm90_tma=False).hidden == 8192
    assert common.ht_plan("bf16", 7936, 8, 256, 8).hidden == 7936
    assert common.ht_plan("fp8_block128", 8192, 8, 256, 8).row_bytes == 8192


def test_high_throughput_refuses_more_than_128_experts_per_rank():
    with pytest.raises(common.DeepepCannotRun, match=r"at most 128 experts per rank, not 192 \(intranode.cu"):
        common.ht_plan("bf16", 7168, 8, 384, 2)
    assert common.ht_plan("bf16", 7168, 8, 384, 4).hidden == 7168


def test_high_throughput_block_fp8_needs_hidden_a_multiple_of_128():
    with pytest.raises(common.DeepepCannotRun, match=r"hidden 2880 is not a multiple of 128"):
        common.ht_plan("fp8_block128", 2880, 4, 128, 8)


@pytest.mark.parametrize("plan, top_k, limit", [(lambda k: common.ht_plan("bf16", 4096, k, 64, 8), 33, 32),
                                                (lambda k: common.ll_plan("bf16", 4096, k, 64, 8, 16), 12, 11)])
def test_top_k_above_the_kernel_limit_is_refused(plan, top_k, limit):
    with pytest.raises(common.DeepepCannotRun, match=rf"supports top_k <= {limit}, not {top_k}"):
        plan(top_k)
    plan(limit)


def test_experts_that_do_not_divide_over_the_ranks_are_refused():
    with pytest.raises(common.DeepepCannotRun, match=r"needs the 60 experts to divide evenly over 8 ranks"):
        common.ll_plan("bf16", 4096, 8, 60, 8, 16)


@pytest.mark.parametrize("hidden, padded", [(2048, 2048), (2880, 3072), (7000, 7168), (1024, 2048)])
def test_low_latency_pads_hidden_to_the_next_compiled_size_like_vllm(hidden, padded):
    assert common.ll_plan("bf16", hidden, 8, 64, 8, 16).hidden == padded


def test_low_latency_refuses_hidden_above_8192():
    with pytest.raises(common.DeepepCannotRun, match=r"hidden sizes up to 8192, not 12288"):
        common.ll_plan("bf16", 12288, 8, 64, 8, 16)


@pytest.mark.parametrize("world_size, experts, tokens, max_tokens", [
    (8, 64, 1, 256), (8, 64, 256, 256), (8, 64, 301, 301), (8, 64, 511, 511), (4, 64, 509, 509),
    (2, 64, 301, 302), (3, 48, 301, 304), (3, 48, 257, 260)])
def test_low_latency_slots_are_vllms_256_tokens_or_the_batch_rounded_only_as_far_as_ranks_x_slots_needs(
        world_size, experts, tokens, max_tokens):
    # buffer.hpp:1526 asks (ranks * max_tokens) % 4 == 0, not max_tokens % 4 == 0: at EP 8, 511
    # tokens per rank run with the default NVSHMEM_QP_DEPTH (1024 >= (511 + 1) * 2), as the rules say
    plan = common.ll_plan("bf16", 4096, 8, experts, world_size, tokens, qp_depth=2048)
    assert plan.max_tokens == max_tokens
    assert (world_size * plan.max_tokens) % 4 == 0
    if (max_tokens + 1) * 2 <= 1024:
        assert common.ll_plan("bf16", 4096, 8, experts, world_size, tokens).max_tokens == max_tokens
    else:
        with pytest.raises(common.DeepepCannotRun):
            common.ll_plan("bf16", 4096, 8, experts, world_size, tokens)


def test_low_latency_runs_unpadded_exactly_where_the_rules_accept_the_token_budget():
    # the rules judge the dispatch buffer of the smallest deployment, max(tokens, 256)
    # (rules.smallest_deployment, as bench.sweep.legality does); where they accept it the adapter
    # must run with that very num_max_dispatch_tokens_per_rank, as vLLM does
    for world_size in (2, 3, 4, 5, 6, 7, 8):
        experts = 8 * world_size
        profile = MoeProfile.from_shape(4096, experts, 8, "bf16")
        for tokens in range(250, 530):
            batched, sized = rules.smallest_deployment("deepep_low_latency", rules.NEWEST_VLLM, tokens)
            budget = int(sized.get(CHUNK_SIZE, batched))
            verdict = rules.legal("deepep_low_latency", profile, None, world_size, None, gpu_arch="sm90",
                                  max_num_batched_tokens=budget)
            if verdict.ok:
                plan = common.ll_plan("bf16", 4096, 8, experts, world_size, tokens)
                assert plan.max_tokens == budget, (world_size, tokens)


def test_low_latency_beyond_the_nvshmem_queue_depth_says_which_depth_is_needed():
    with pytest.raises(common.DeepepCannotRun) as err:
        common.ll_plan("bf16", 4096, 8, 64, 8, 1024)
    assert str(err.value) == (
        "deepep_low_latency dispatches at most 511 tokens per rank with NVSHMEM_QP_DEPTH=1024 (legacy.py "
        "asserts qp_depth >= (max_tokens + 1) * 2), not 1024; set NVSHMEM_QP_DEPTH to at least 2050")


def test_vllm_buffer_size_follows_VLLM_DEEPEP_BUFFER_SIZE_MB(monkeypatch):
    assert common.vllm_buffer_bytes() == 1024 * 1024 * 1024
    monkeypatch.setenv("VLLM_DEEPEP_BUFFER_SIZE_MB", "2048")
    assert common.vllm_buffer_bytes() == 2 * 1024 ** 3


# --------------------------------------------------------------------------------------
# Handles -> token indices, checked by the real correctness gate


def _ht_handle_for(w: BenchPoint, rank: int):
    """What DeepEP's intranode dispatch hands rank ``rank``: rows grouped by source rank (in
    token order within a source), the rank prefix matrix and each row's source index."""
    dest = w.destinations()
    t = w.tokens_per_rank
    counts = torch.tensor([[int(dest[s * t:(s + 1) * t, d].sum()) for d in range(w.world_size)]
                           for s in range(w.world_size)], dtype=torch.int32)
    prefix = counts.cumsum(dim=0).to(torch.int32)  # [src][dst]: rows up to and including src
    src_idx = torch.cat([dest[s * t:(s + 1) * t, rank].nonzero().flatten() for s in range(w.world_size)])
    return prefix, src_idx.to(torch.int32)


def _bare(cls, w: BenchPoint, rank: int, plan):
    """An adapter as ``setup`` leaves it, minus the DeepEP buffer (only ``_received`` is called)."""
    adapter = cls()
    adapter.ctx, adapter.w, adapter.plan, adapter.torch = _ctx(world_size=w.world_size, rank=rank), w, plan, torch
    adapter.first_expert = w.expert_range(rank)[0]
    return adapter


@pytest.mark.parametrize("dtype, hidden", [("bf16", 256), ("bf16", 2880), ("fp8_block128", 2944)])
def test_high_throughput_received_rows_map_back_to_the_tokens_the_gate_expects(dtype, hidden):
    w = BenchPoint(16, hidden, 4, 16, 4, dtype, seed=3)
    plan = common.ht_plan(dtype, hidden, 4, 16, 4)
    for rank in range(w.world_size):
        prefix, src_idx = _ht_handle_for(w, rank)
        token = common.ht_token_index(prefix, src_idx, rank, w.tokens_per_rank)
        ids, a = w.global_routing()
        x, sf = w.payload_rows(token)
        first = w.expert_range(rank)[0]
        mine = w.expert_owner(ids[token]) == rank
        # as DeepEP returns them: padded rows, local expert ids (-1 elsewhere), weight 0 elsewhere
        local_ids = torch.where(mine, ids[token].to(torch.int64) - first, -1)
        weights = torch.where(mine, a[token].float() / 16, 0.0)
        if plan.fp8:
            recv_x = (common.widen(x, plan.hidden).view(torch.float8_e4m3fn),
                      common.widen(sf.view(torch.float32), plan.scales))
        else:
            recv_x = common.widen(x.view(torch.bfloat16), plan.hidden)
        handle = (prefix, None, None, src_idx, None, None)
        adapter = _bare(DeepepHighThroughput, w, rank, plan)
        received = common.LazyReceived(lambda: adapter._received(recv_x, local_ids, weights, handle))  # noqa: B023
        assert check_dispatch(w, rank, received) is None


def test_high_throughput_inputs_are_vllms_padded_fp8_rows_and_block_scales_built_once_per_batch():
    w = BenchPoint(4, 2944, 4, 16, 4, "fp8_block128", seed=2)
    plan = common.ht_plan("fp8_block128", 2944, 4, 16, 4)
    adapter = _bare(DeepepHighThroughput, w, 0, plan)
    adapter.index_dtype, adapter.cache = torch.int64, {}
    batch = w.batch(0)
    (values, scales), idx = adapter._inputs(batch)
    assert (values.dtype, tuple(values.shape), scales.dtype, tuple(scales.shape)) == (
        torch.float8_e4m3fn, (4, 3072), torch.float32, (4, 24))
    assert torch.equal(values.view(torch.uint8)[:, :2944], batch.x)
    assert int(values.view(torch.uint8)[:, 2944:].count_nonzero()) == 0
    assert torch.equal(scales[:, :23].contiguous().view(torch.uint8), batch.x_sf)
    assert (idx.dtype, idx.tolist()) == (torch.int64, batch.topk_ids.tolist())
    assert adapter._inputs(batch)[0][0] is values
    assert adapter._inputs(w.batch(0))[0][0] is not values


def test_low_latency_inputs_are_bf16_rows_padded_to_the_compiled_hidden():
    w = BenchPoint(4, 2880, 4, 16, 4, "bf16", seed=2)
    adapter = _bare(DeepepLowLatency, w, 0, common.ll_plan("bf16", 2880, 4, 16, 4, 4))
    adapter.index_dtype, adapter.cache = torch.int64, {}
    batch = w.batch(0)
    x, idx, weights = adapter._inputs(batch)
    assert (x.dtype, tuple(x.shape)) == (torch.bfloat16, (4, 3072))
    assert torch.equal(x.view(torch.uint8)[:, :5760], batch.x)
    assert torch.equal(weights, batch.topk_weights) and idx.dtype == torch.int64


def test_low_latency_fp8_inputs_are_the_bf16_source_rows_padded_with_zeros():
    w = BenchPoint(4, 2880, 4, 16, 4, "fp8_block128", seed=2)
    adapter = _bare(DeepepLowLatency, w, 0, common.ll_plan("fp8_block128", 2880, 4, 16, 4, 4))
    adapter.index_dtype, adapter.cache = torch.int64, {}
    batch = w.batch(0)
    x, idx, _ = adapter._inputs(batch)
    assert (x.dtype, tuple(x.shape)) == (torch.bfloat16, (4, 3072))
    assert torch.equal(x[:, :2880], batch.x_bf16) and int(x[:, 2880:].count_nonzero()) == 0
    assert adapter._inputs(batch)[0] is x


def test_a_source_index_off_by_one_is_caught_by_the_gate():
    w = BenchPoint(8, 256, 2, 8, 2, "bf16", seed=1)
    prefix, src_idx = _ht_handle_for(w, 0)
    token = common.ht_token_index(prefix, src_idx, 0, w.tokens_per_rank)
    x, _ = w.payload_rows(token)
    ids, a = w.global_routing()
    wrong = token.clone()
    wrong[0] = (wrong[0] + 1) % w.total_tokens
    received = common.LazyReceived(lambda: {"x": x, "topk_ids": ids[token], "topk_weights": a[token].float() / 16,
                                            "token_index": wrong})
    assert check_dispatch(w, 0, received) is not None


def test_high_throughput_row_ranges_follow_the_rank_prefix_column_of_the_receiver():
    prefix = torch.tensor([[3, 1], [5, 4]], dtype=torch.int32)  # rank 0 gets 3 rows from 0, 2 from 1
    src_idx = torch.tensor([0, 2, 5, 1, 3], dtype=torch.int32)
    assert common.ht_token_index(prefix, src_idx, 0, 8).tolist() == [0, 2, 5, 9, 11]
    src_idx1 = torch.tensor([7, 0, 4, 6], dtype=torch.int32)  # rank 1: 1 row from 0, 3 from 1
    assert common.ht_token_index(prefix, src_idx1, 1, 8).tolist() == [7, 8, 12, 14]


def _pack(count: int, begin: int) -> int:
    """DeepEP's pack2<int, int64_t>(count, begin): count in the low word, begin in the high word."""
    return (begin << 32) | count


def test_low_latency_slots_decode_from_packed_layout_ranges_in_arrival_order():
    # 2 local experts, 2 source ranks, 4 slots per rank; ranks arrive in any order (atomicAdd).
    layout = torch.tensor([[_pack(2, 1), _pack(1, 0)],   # expert 0: rank 1 first (slot 0), rank 0 at 1-2
                           [_pack(0, 0), _pack(3, 0)]],  # expert 1: nothing from rank 0, slots 0-2 from rank 1
                          dtype=torch.int64)
    src_info = torch.tensor([[3, 0, 2, 9, 9, 9, 9, 9], [1, 2, 3, 9, 9, 9, 9, 9]], dtype=torch.int32)
    token, valid = common.ll_slot_tokens(layout, src_info, tokens_per_rank=4)
    assert valid.tolist() == [[True, True, True] + [False] * 5, [True, True, True] + [False] * 5]
    assert token[valid].tolist() == [7, 0, 2, 5, 6, 7]
    assert token[~valid].unique().tolist() == [-1]


def _ll_dispatch_as_deepep_writes_it(w: BenchPoint, rank: int, plan):
    """``(recv_x, handle)`` of a low-latency dispatch to ``rank``, laid out as DeepEP's kernel writes them.

    Every source rank's input is what the adapter hands DeepEP (``_inputs``: padded bf16 rows);
    with ``plan.fp8`` it goes through DeepEP's block cast (tests/support/fp8_cast.py) and the
    scales land where internode_ll.cu stores them: ``recv_x_scales[token * pack_elems + pack *
    slots * pack_elems + elem]`` in a ``[local, packs, slots]`` tensor that buffer.hpp returns
    transposed (fp32, one per pack; UE8M0: four exponent bytes per int32 pack).
    """
    t, ranks = w.tokens_per_rank, w.world_size
    ids, _ = w.global_routing()
    first, last = w.expert_range(rank)
    local, slots, blocks = last - first, ranks * plan.max_tokens, plan.hidden // 128
    layout = torch.zeros((local, ranks), dtype=torch.int64)
    src_info = torch.full((local, slots), 99, dtype=torch.int32)
    values = torch.zeros((local, slots, plan.hidden), dtype=torch.float8_e4m3fn if plan.fp8 else torch.bfloat16)
    per_pack = 4 if plan.ue8m0 else 1
    storage = torch.zeros((local, blocks // per_pack, slots, per_pack),
                          dtype=torch.uint8 if plan.ue8m0 else torch.float32)
    for e in range(local):
        begin = 0
        for src in reversed(range(ranks)):  # arrival order differs from rank order
            sender = _bare(DeepepLowLatency, w, src, plan)
            sender.index_dtype, sender.cache = torch.int64, {}
            x = sender._inputs(w.batch(src))[0]
            mine = (ids[src * t:(src + 1) * t] == first + e).any(dim=1).nonzero().flatten()
            layout[e, src] = _pack(len(mine), begin)
            src_info[e, begin:begin + len(mine)] = mine.to(torch.int32)
            slot = torch.arange(begin, begin + len(mine))
            if plan.fp8:
                codes, scales = deepep_ll_cast(x[mine], round_scale=plan.round_scale, use_ue8m0=plan.ue8m0)
                values[e, slot] = codes.view(torch.float8_e4m3fn)
                for j in range(blocks):
                    storage[e, j // per_pack, slot, j % per_pack] = scales[:, j]
            else:
                values[e, slot] = x[mine]
            begin += len(mine)
    handle = (src_info, layout, plan.max_tokens, plan.hidden, w.experts)
    if not plan.fp8:
        return values, handle
    packed = storage.view(torch.int32) if plan.ue8m0 else storage
    return (values, packed.reshape(local, blocks // per_pack, slots).transpose(1, 2)), handle


@pytest.mark.parametrize("dtype, hidden, gpu_major", [("bf16", 2048, 9), ("bf16", 2880, 9),
                                                      ("fp8_block128", 7168, 9), ("fp8_block128", 2880, 9),
                                                      ("fp8_block128", 7168, 10), ("fp8_block128", 2880, 10)])
def test_low_latency_received_slots_pass_the_gate_and_a_lost_slot_fails_it(dtype, hidden, gpu_major):
    w = BenchPoint(8, hidden, 4, 8, 2, dtype, seed=5)
    plan = common.ll_plan(dtype, hidden, 4, 8, 2, 8, gpu_major=gpu_major)
    for rank in range(w.world_size):
        recv_x, handle = _ll_dispatch_as_deepep_writes_it(w, rank, plan)
        if plan.fp8:
            assert recv_x[1].dtype == (torch.int32 if plan.ue8m0 else torch.float32)
            assert not recv_x[1].is_contiguous()  # column-major, as DeepEP returns it
        fields = _bare(DeepepLowLatency, w, rank, plan)._received(recv_x, handle)
        local = w.expert_range(rank)[1] - w.expert_range(rank)[0]
        assert fields["x"].shape == (local * 2 * plan.max_tokens, w.value_bytes)
        assert check_dispatch(w, rank, common.LazyReceived(lambda f=fields: f)) is None
        dropped = dict(fields, valid=fields["valid"].clone())
        dropped["valid"][int(fields["valid"].nonzero()[0])] = False
        assert "never arrived" in check_dispatch(w, rank, common.LazyReceived(lambda f=dropped: f))


@pytest.mark.parametrize("gpu_major", [9, 10])
def test_low_latency_fp8_scales_read_in_storage_order_fail_the_gate(gpu_major):
    # forgetting that DeepEP's scales are a transposed view scrambles them across slots
    w = BenchPoint(8, 7168, 4, 8, 2, "fp8_block128", seed=5)
    plan = common.ll_plan("fp8_block128", 7168, 4, 8, 2, 8, gpu_major=gpu_major)
    (values, scales), handle = _ll_dispatch_as_deepep_writes_it(w, 0, plan)
    storage_order = scales.transpose(1, 2).contiguous().reshape(scales.shape)
    fields = _bare(DeepepLowLatency, w, 0, plan)._received((values, storage_order), handle)
    assert "scale byte" in check_dispatch(w, 0, common.LazyReceived(lambda: fields))


def test_lazy_received_builds_once_on_first_access_only():
    calls = []

    def build():
        calls.append(1)
        return {"token_index": torch.arange(3)}

    received = common.LazyReceived(build)
    assert calls == []
    assert received.token_index.tolist() == [0, 1, 2]
    assert (received.valid, received.expert, received.x_sf) == (None, None, None)
    assert calls == [1]


def test_per_source_builds_once_per_tensor_and_again_for_a_new_one():
    cache, built = {}, []
    a, b = torch.ones(2, 3), torch.ones(2, 3)
    for src in (a, a, b, b, a):
        common.per_source(cache, "k", src, lambda s=src: built.append(s) or common.widen(s, 5))
    assert [x is a for x in built] == [True, False, True]
    assert common.widen(a, 5).tolist() == [[1, 1, 1, 0, 0]] * 2
    assert common.widen(a, 3) is a


# --------------------------------------------------------------------------------------
# Rules rows


def test_rules_cap_deepep_top_k_at_the_kernel_limits():
    host = None
    ht = rules.legal("deepep_high_throughput", MoeProfile.from_shape(4096, 64, 33, "bf16"), host, 8, "0.33.0",
                     gpu_arch="sm90")
    ll = rules.legal("deepep_low_latency", MoeProfile.from_shape(4096, 64, 12, "bf16"), host, 8, "0.33.0",
                     gpu_arch="sm90")
    assert ht.reasons == ("deepep_high_throughput supports top_k <= 32, not 33",)
    assert ll.reasons == ("deepep_low_latency supports top_k <= 11, not 12",)
    assert rules.legal("deepep_low_latency", MoeProfile.from_shape(4096, 64, 8, "bf16"), host, 8, "0.33.0",
                       gpu_arch="sm90").ok


def test_rules_cap_deepep_high_throughput_at_160_ranks():
    verdict = rules.legal("deepep_high_throughput", MoeProfile.from_shape(7168, 320, 8, "bf16"), None, 320,
                          "0.33.0", gpu_arch="sm90")
    assert verdict.reasons == (
        "deepep_high_throughput runs at EP sizes 2, 4, 8 within a node or 16, 24, 32, 48, 64, 96, 128, 144, 160 "
        "across nodes, not 320 (DeepEP 2.1 deep_ep/buffers/legacy.py:245-258 get_dispatch_config: 'Unsupported "
        "number of EP ranks')",)


@pytest.mark.parametrize("backend", ["deepep_high_throughput", "deepep_low_latency"])
def test_rules_reject_fp16_models_on_deepep(backend):
    verdict = rules.legal(backend, MoeProfile.from_shape(4096, 64, 8, "fp16"), None, 8, "0.33.0", gpu_arch="sm90")
    assert verdict.reasons == (f"{backend} needs bf16/fp8/fp8_block128/mxfp4/mxfp8/nvfp4 activations; "
                               "H4096 top8 E64 fp16 dispatches fp16 on sm90",)


def test_the_adapter_limits_and_the_rules_rows_agree():
    ht, ll = rules.BACKENDS["deepep_high_throughput"], rules.BACKENDS["deepep_low_latency"]
    assert (ht.top_k_max, ll.top_k_max) == (common.HT_MAX_TOP_K, common.LL_MAX_TOP_K)
    assert ll.hidden_sizes == common.LL_HIDDEN_SIZES
    assert ht.experts_divisible_by_ep and ll.experts_divisible_by_ep
    assert backends.BUILTIN["deepep_high_throughput"].endswith("DeepepHighThroughput")
