"""The workload, the gate's checks and the stopping rule, in one process (no torch.distributed)."""

from __future__ import annotations

import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.backends import Received
from bench.measure import Sampling
from bench.measure.gate import check_combine, check_dispatch
from bench.measure.stats import summarize
from bench.routing import BadRouting, parse_routing
from bench.synthetic import (
    E4M3_MAX_CODE,
    FP8_BLOCK_SCALE_EXPONENTS,
    BenchPoint,
    ImpossibleShape,
    algbw_gbps,
    busbw_gbps,
    combine_bytes,
    dispatch_bytes,
    fp8_block128_rows,
    fp8_block128_to_bf16,
)
from support.fp8_cast import K_AMAX_E4M3, K_AMAX_INV_E4M3, deepep_ll_cast, pad_columns


def _w(**kw):
    args = dict(tokens_per_rank=16, hidden=256, top_k=4, experts=16, world_size=2, dtype="bf16")
    args.update(kw)
    return BenchPoint(**args)


def _ideal_received(w, rank):
    """What a perfect backend delivers to ``rank``: every routed token once, in token order."""
    ids, _ = w.global_routing()
    need = w.destinations()[:, rank].nonzero().reshape(-1).to(torch.int32)
    x, sf = w.payload_rows(need)
    a = w.global_routing()[1]
    return Received(x=x, x_sf=sf, topk_ids=ids[need.long()], topk_weights=a[need.long()].float() / 16,
                    token_index=need)


def _ideal_combine(w, rank):
    """Sum over ranks of each rank's expert outputs for ``rank``'s tokens (what combine must return)."""
    out = torch.zeros((w.tokens_per_rank, w.hidden), dtype=torch.float32)
    lo = rank * w.tokens_per_rank
    for r in range(w.world_size):
        rec = _ideal_received(w, r)
        part = w.expert_output(r, rec.x, rec.topk_ids, rec.topk_weights)
        mine = (rec.token_index >= lo) & (rec.token_index < lo + w.tokens_per_rank)
        out.index_add_(0, (rec.token_index[mine] - lo).long(), part[mine].float())
    return out.to(torch.bfloat16)


def test_dispatch_bytes_follow_the_payload_table():
    assert dispatch_bytes("bf16", 7168, 8) == 2 * 7168 + 64
    assert dispatch_bytes("nvfp4", 7168, 8) == 3584 + 448 + 64
    assert dispatch_bytes("fp8_block128", 7168, 8) == 7168 + 4 * 56 + 64
    assert combine_bytes(7168) == 14336


def test_bandwidth_is_bytes_over_time_and_busbw_scales_by_n_minus_1_over_n():
    assert algbw_gbps(1_000_000, 10.0) == pytest.approx(100.0)
    assert busbw_gbps(100.0, 8) == pytest.approx(87.5)
    assert busbw_gbps(100.0, 1) == 0.0


def test_payload_layout_per_dtype_has_the_table_byte_counts():
    w = _w(dtype="nvfp4", hidden=2048)
    b = w.batch(0)
    assert b.x.shape == (16, 1024) and b.x_sf.shape == (16, 128)
    assert b.x.dtype == torch.uint8 and b.topk_ids.dtype == torch.int32 and b.topk_weights.dtype == torch.float32
    assert _w(dtype="bf16").batch(1).x_sf is None


def test_workload_is_deterministic_from_the_seed_and_differs_across_seeds():
    assert torch.equal(_w().batch(1).x, _w().batch(1).x)
    assert not torch.equal(_w().batch(1).x, _w(seed=1).batch(1).x)
    assert torch.equal(_w().batch(1).token_index, torch.arange(16, 32, dtype=torch.int32))


def test_uniform_routing_picks_top_k_distinct_experts():
    ids, a = _w(tokens_per_rank=64).global_routing()
    assert ids.shape == (128, 4)
    assert all(len(set(row)) == 4 for row in ids.tolist())
    assert int(a.min()) >= 1 and int(a.max()) <= _w().max_weight_numerator


def test_zipf_routing_concentrates_on_few_experts():
    counts = torch.bincount(_w(tokens_per_rank=512, routing="zipf:1.5").global_routing()[0].reshape(-1).long(), minlength=16)
    uniform = torch.bincount(_w(tokens_per_rank=512).global_routing()[0].reshape(-1).long(), minlength=16)
    assert int(counts.max()) > 1.5 * int(uniform.max())


def test_routing_file_rows_repeat_over_the_global_tokens(tmp_path):
    path = tmp_path / "routing.json"
    path.write_text(json.dumps([[0, 1, 2, 3], [12, 13, 14, 15]]))
    ids, _ = _w(routing=str(path)).global_routing()
    assert ids[0].tolist() == [0, 1, 2, 3] and ids[1].tolist() == [12, 13, 14, 15] and ids[2].tolist() == [0, 1, 2, 3]


def test_routing_file_with_repeated_expert_is_refused(tmp_path):
    path = tmp_path / "routing.npy"
    import numpy as np

    np.save(path, np.array([[0, 0, 1, 2]]))
    with pytest.raises(BadRouting, match="row 0 repeats an expert"):
        _w(routing=str(path)).global_routing()


def test_unknown_routing_is_refused_with_what_to_use():
    with pytest.raises(BadRouting, match="use uniform, zipf, zipf:S"):
        parse_routing("skewed")


def test_top_k_above_experts_is_refused():
    with pytest.raises(ImpossibleShape, match="top_k 20 is larger than the number of experts 16"):
        _w(top_k=20)


def test_uneven_experts_give_the_first_ranks_one_more():
    w = _w(experts=10, world_size=4)
    assert [w.expert_range(r) for r in range(4)] == [(0, 3), (3, 6), (6, 8), (8, 10)]
    assert w.expert_owner(torch.arange(10)).tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 3, 3]


@pytest.mark.parametrize("dtype", ["bf16", "nvfp4", "fp8_block128"])
def test_a_perfect_exchange_passes_both_checks_bit_exactly(dtype):
    w = _w(dtype=dtype, top_k=8, experts=32, world_size=4)
    for rank in range(4):
        assert check_dispatch(w, rank, _ideal_received(w, rank)) is None
        assert check_combine(w, rank, _ideal_combine(w, rank)) is None


def test_one_wrong_byte_is_described_with_token_and_position():
    w = _w()
    rec = _ideal_received(w, 1)
    g = int(rec.token_index[0])
    rec.x[0, 7] ^= 0xFF
    assert check_dispatch(w, 1, rec).startswith(f"rank 1: token {g} (from rank {g // 16}) activation byte 7: got 0x")


def test_a_missing_token_is_named():
    w = _w()
    rec = _ideal_received(w, 0)
    g = int(rec.token_index[-1])
    rec.valid = torch.ones(rec.x.shape[0], dtype=torch.bool)
    rec.valid[-1] = False
    assert check_dispatch(w, 0, rec).startswith(f"rank 0: token {g} (from rank 1) never arrived")


def test_a_token_delivered_twice_is_named():
    w = _w()
    rec = _ideal_received(w, 0)
    dup = Received(*(torch.cat([t, t[:1]]) for t in (rec.x,)), x_sf=None,
                   topk_ids=torch.cat([rec.topk_ids, rec.topk_ids[:1]]),
                   topk_weights=torch.cat([rec.topk_weights, rec.topk_weights[:1]]),
                   token_index=torch.cat([rec.token_index, rec.token_index[:1]]))
    assert check_dispatch(w, 0, dup) == f"rank 0: token {int(rec.token_index[0])} (from rank 0) arrived twice"


def test_a_double_counted_combine_term_is_caught():
    w = _w(top_k=8, experts=32)
    out = _ideal_combine(w, 0)
    out[3] = (out[3].float() * 1.25).to(torch.bfloat16)
    assert check_combine(w, 0, out).startswith("rank 0: combine of token 3 element 0: got")


def test_non_local_picks_may_come_back_invalid():
    w = _w()
    rec = _ideal_received(w, 0)
    local = w.expert_owner(rec.topk_ids) == 0
    rec.topk_ids = torch.where(local, rec.topk_ids, torch.full_like(rec.topk_ids, -1))
    rec.topk_weights = torch.where(local, rec.topk_weights, torch.zeros_like(rec.topk_weights))
    assert check_dispatch(w, 0, rec) is None


def test_stopping_rule_needs_min_samples_and_min_time():
    now = [0.0]
    rule = Sampling(min_samples=10, min_time_s=0.001, clock=lambda: now[0])
    for _ in range(9):
        rule.add(100.0)
    assert not rule.done()
    for _ in range(2):
        rule.add(100.0)
    assert rule.done() and rule.noise_target_met


def test_stopping_rule_timeout_stops_without_meeting_the_noise_target():
    now = [0.0]
    rule = Sampling(min_samples=10, min_time_s=100.0, timeout_s=1.0, clock=lambda: now[0])
    for i in range(20):
        rule.add(100.0 + 50 * (i % 2))
    assert not rule.done()
    now[0] = 2.0
    assert rule.done() and rule.timed_out and not rule.noise_target_met


def test_stopping_rule_stops_once_the_noise_is_stable():
    rule = Sampling(min_samples=10, min_time_s=0.0, max_noise=1e-9, timeout_s=1e9)
    samples = [100.0, 150.0] * 5000
    stopped = None
    for i, s in enumerate(samples):
        rule.add(s)
        if i % 100 == 99 and rule.done():
            stopped = i + 1
            break
    assert stopped is not None and not rule.noise_target_met and rule.noise_is_stable()


def test_stopping_rule_noise_from_its_reused_buffers_equals_the_noise_of_the_sample_list():
    import random

    from bench.measure.stats import relative_standard_error

    rng = random.Random(7)
    rule = Sampling(min_samples=10**9, min_time_s=1e9, timeout_s=1e9)
    added, checked = [], 0
    for i in range(3000):  # past several buffer doublings, done() at irregular intervals
        added.append(round(100.0 + 30 * rng.random(), rng.choice([0, 2])))
        rule.add(added[-1])
        if i >= 1 and i % rng.choice([1, 5, 64]) == 0:
            rule.done()
            assert rule.noise == relative_standard_error(added)
            checked += 1
    assert rule.samples == added and checked > 100  # the raw samples keep their order


def test_summary_statistics_of_known_samples():
    s = summarize([float(v) for v in range(1, 101)])
    assert s["samples"] == 100 and s["latency_us_min"] == 1.0
    assert s["latency_us_p50"] == pytest.approx(50.5) and s["latency_us_mean"] == pytest.approx(50.5)
    assert s["latency_us_p99"] == pytest.approx(99.01)


def _ideal_slots(w, rank):
    """A perfect per-expert layout (DeepEP low-latency style): one row per (token, local expert)."""
    ids, _ = w.global_routing()
    first, last = w.expert_range(rank)
    mine = (ids >= first) & (ids < last)
    tokens = torch.arange(ids.shape[0])[:, None].expand_as(ids)[mine].to(torch.int32)
    x, sf = w.payload_rows(tokens)
    return Received(x=x, x_sf=sf, topk_ids=None, topk_weights=None, token_index=tokens,
                    expert=ids[mine].to(torch.int64))


def test_a_missing_expert_slot_is_named():
    w = _w()
    rec = _ideal_slots(w, 1)
    g, e = int(rec.token_index[-1]), int(rec.expert[-1])
    rec.valid = torch.ones(rec.x.shape[0], dtype=torch.bool)
    rec.valid[-1] = False
    assert check_dispatch(w, 1, rec) == f"rank 1: token {g} (from rank {g // 16}) never arrived for expert {e}"


# --------------------------------------------------------------------------------------
# fp8_block128 rows are quantization-stable: DeepEP low latency's in-kernel cast of their bf16
# source returns exactly their bytes (tests/support/fp8_cast.py is that cast, in fp32 torch).

#: (hidden, the next DeepEP low-latency compiled size vLLM pads it to)
FP8_HIDDEN = [(7168, 7168), (2048, 2048), (2880, 3072), (4096, 4096), (5000, 5120), (128, 2048), (100, 2048)]
FP8_SEEDS = [0, 1, 7, 12345]


def _fp8_rows(hidden, seed, tokens=96, first=0):
    return fp8_block128_rows(torch.arange(first, first + tokens, dtype=torch.int32), hidden, seed)


def _scale_exponents(x_sf):
    bits = x_sf.contiguous().view(torch.int32)
    return bits, ((bits >> 23) & 0xFF) - 127


@pytest.mark.parametrize("hidden, _padded", FP8_HIDDEN)
def test_fp8_block128_rows_have_the_table_sizes_no_nan_and_448_as_every_block_amax(hidden, _padded):
    blocks = -(-hidden // 128)
    for seed in FP8_SEEDS:
        x, x_sf = _fp8_rows(hidden, seed)
        assert (x.dtype, tuple(x.shape), x_sf.dtype, tuple(x_sf.shape)) == (
            torch.uint8, (96, hidden), torch.uint8, (96, 4 * blocks))
        assert x.shape[1] + x_sf.shape[1] + 8 * 4 == dispatch_bytes("fp8_block128", hidden, 4)
        assert int(((x & 0x7F) == 0x7F).sum()) == 0  # no NaN code
        values = x.view(torch.float8_e4m3fn).to(torch.float32)
        padded = torch.zeros((96, blocks * 128))
        padded[:, :hidden] = values.abs()
        assert padded.reshape(96, blocks, 128).amax(dim=2).unique().tolist() == [448.0]


@pytest.mark.parametrize("hidden, _padded", FP8_HIDDEN)
def test_fp8_block128_scales_are_powers_of_two_in_the_documented_range(hidden, _padded):
    low, high = FP8_BLOCK_SCALE_EXPONENTS
    seen = set()
    for seed in FP8_SEEDS:
        bits, exponent = _scale_exponents(_fp8_rows(hidden, seed)[1])
        assert int((bits & 0x807FFFFF).count_nonzero()) == 0  # positive, mantissa 0: exactly 2**s
        assert low <= int(exponent.min()) and int(exponent.max()) <= high
        seen |= set(exponent.unique().tolist())
    if hidden >= 2048:
        assert seen == set(range(low, high + 1))


def test_fp8_block128_rows_depend_on_seed_and_token_only_so_any_rank_can_check_any_row():
    w = _w(dtype="fp8_block128", hidden=2880, tokens_per_rank=8, world_size=4, experts=16, seed=9)
    whole = w.batch(2)
    picked = torch.tensor([21, 16, 23], dtype=torch.int32)
    x, x_sf = w.payload_rows(picked)
    assert torch.equal(x, whole.x[[5, 0, 7]]) and torch.equal(x_sf, whole.x_sf[[5, 0, 7]])
    assert torch.equal(_w(dtype="fp8_block128", hidden=2880, tokens_per_rank=8, world_size=4, experts=16,
                          seed=9).batch(2).x, whole.x)
    assert not torch.equal(_w(dtype="fp8_block128", hidden=2880, tokens_per_rank=8, world_size=4, experts=16,
                              seed=10).batch(2).x, whole.x)
    assert not torch.equal(x[0], x[1])


@pytest.mark.parametrize("hidden, padded", FP8_HIDDEN)
@pytest.mark.parametrize("round_scale, use_ue8m0", [(False, False), (True, False), (True, True)],
                         ids=["fp32-scales (sm90)", "round-scale", "ue8m0 (sm100)"])
def test_deepeps_block_cast_of_the_bf16_source_returns_the_fp8_bytes_and_scales_bit_exactly(
        hidden, padded, round_scale, use_ue8m0):
    blocks = -(-hidden // 128)
    for seed in FP8_SEEDS:
        w = _w(dtype="fp8_block128", hidden=hidden, tokens_per_rank=64, seed=seed)
        for rank in range(w.world_size):
            batch = w.batch(rank)
            codes, scales = deepep_ll_cast(pad_columns(batch.x_bf16, padded), round_scale=round_scale,
                                           use_ue8m0=use_ue8m0)
            assert torch.equal(codes[:, :hidden], batch.x)
            assert int(codes[:, hidden:].count_nonzero()) == 0  # vLLM's zero padding stays zero
            if use_ue8m0:
                _, exponent = _scale_exponents(batch.x_sf)
                assert torch.equal(scales[:, :blocks].to(torch.int32) - 127, exponent)
            else:
                assert torch.equal(scales[:, :blocks].contiguous().view(torch.uint8), batch.x_sf)


def test_every_scale_exponent_in_range_survives_the_fp32_scale_arithmetic_of_the_cast():
    low, high = FP8_BLOCK_SCALE_EXPONENTS
    s = torch.arange(low, high + 1, dtype=torch.int32)
    pow2 = ((s + 127) << 23).view(torch.float32)
    amax = K_AMAX_E4M3 * pow2
    assert torch.equal(amax * K_AMAX_INV_E4M3, pow2)  # scale_inv = amax * (1/448.0f)
    assert torch.equal(K_AMAX_E4M3 / amax, 1.0 / pow2)  # scale = 448.0f / amax
    # every finite e4m3 value, positive and negative, times any of these scales is exact in bf16
    codes = torch.arange(256, dtype=torch.int32)
    finite = codes[(codes & 0x7F) != 0x7F].to(torch.uint8)
    values = finite.view(torch.float8_e4m3fn).to(torch.float32)
    product = values[:, None] * pow2[None, :]
    assert torch.equal(product.to(torch.bfloat16).to(torch.float32), product)


def test_the_cast_oracle_rescales_a_block_whose_amax_is_not_448():
    # 128 copies of 416 (code 0x7D) at scale 1: amax 416 -> scale_inv 416/448, every value 448
    x_bf16 = torch.full((1, 128), 416.0, dtype=torch.bfloat16)
    codes, scales = deepep_ll_cast(x_bf16)
    assert codes.unique().tolist() == [E4M3_MAX_CODE] and scales.item() != 1.0
    # and the hash bytes used before (NaN codes, random fp32 scales) do not come back either
    raw = _w(dtype="nvfp4", hidden=2048).payload_rows(torch.arange(4, dtype=torch.int32))[0]
    x = torch.cat([raw, raw], dim=1)
    sf = torch.full((4, 16), 0.75).view(torch.uint8)
    assert not torch.equal(deepep_ll_cast(fp8_block128_to_bf16(x, sf, 2048))[0], x)


def test_x_bf16_is_value_times_block_scale_and_only_for_fp8_block128_batches():
    batch = _w(dtype="fp8_block128", hidden=2880).batch(0)
    assert (batch.x_bf16.dtype, tuple(batch.x_bf16.shape)) == (torch.bfloat16, (16, 2880))
    values = batch.x.view(torch.float8_e4m3fn).to(torch.float32)
    scales = batch.x_sf.view(torch.float32)
    assert torch.equal(batch.x_bf16[3, 130].float(), values[3, 130] * scales[3, 1])
    assert torch.equal(batch.x_bf16[5, 2879].float(), values[5, 2879] * scales[5, 22])
    assert batch.x_bf16 is batch.x_bf16  # built once
    assert _w(dtype="bf16").batch(0).x_bf16 is None and _w(dtype="fp8").batch(0).x_bf16 is None


@pytest.mark.parametrize("dtype", ["bf16", "fp8_block128"])
def test_a_perfect_per_expert_layout_passes_and_combines_exactly(dtype):
    w = _w(top_k=4, experts=16, world_size=2, dtype=dtype, hidden=2880)
    out = torch.zeros((w.tokens_per_rank, w.hidden), dtype=torch.float32)
    ids, a = w.global_routing()
    for r in range(2):
        rec = _ideal_slots(w, r)
        assert check_dispatch(w, r, rec) is None
        part = w.expert_output(r, rec.x, None, None, expert=rec.expert).float()
        g = rec.token_index.long()
        # combine applies the weights: w_k for the slot's (token, expert) pick
        k = (ids[g] == rec.expert[:, None]).float().argmax(dim=1)
        mine = g < w.tokens_per_rank
        out.index_add_(0, g[mine], part[mine] * (a[g, k].float() / 16)[mine, None])
    assert check_combine(w, 0, out.to(torch.bfloat16)) is None


def test_a_wrong_fp8_scale_byte_is_named():
    w = _w(dtype="fp8_block128", hidden=2880)
    rec = _ideal_received(w, 0)
    g = int(rec.token_index[2])
    rec.x_sf[2, 5] ^= 0x01
    assert check_dispatch(w, 0, rec).startswith(f"rank 0: token {g} (from rank {g // 16}) scale byte 5: got 0x")


@settings(max_examples=60, deadline=None)
@given(hidden=st.integers(1, 8192), seed=st.integers(0, 2**31 - 1), first=st.integers(0, 10**6),
       mode=st.sampled_from([(False, False), (True, False), (True, True)]))
def test_any_hidden_seed_and_token_survives_the_cast(hidden, seed, first, mode):
    x, x_sf = _fp8_rows(hidden, seed, tokens=3, first=first)
    padded = -(-hidden // 512) * 512
    codes, scales = deepep_ll_cast(pad_columns(fp8_block128_to_bf16(x, x_sf, hidden), padded),
                                   round_scale=mode[0], use_ue8m0=mode[1])
    blocks = x_sf.shape[1] // 4
    assert torch.equal(codes[:, :hidden], x)
    if mode[1]:
        assert torch.equal((scales[:, :blocks].to(torch.int32) << 23).view(torch.uint8), x_sf)
    else:
        assert torch.equal(scales[:, :blocks].contiguous().view(torch.uint8), x_sf)


def test_expert_rows_decoded_in_chunks_equal_the_whole_decode(monkeypatch):
    import torch

    from bench import synthetic as wl

    w = wl.BenchPoint(64, 256, 4, 16, 2, "bf16", seed=3)
    batch = w.batch(1)
    scale = torch.linspace(-2.0, 2.0, batch.x.shape[0])
    whole = (wl.decode_expert_input(batch.x, 256).to(torch.float32) * scale[:, None]).to(torch.bfloat16)
    combine_in_one_chunk = w.expected_combine(1)
    monkeypatch.setattr(wl, "DECODE_CHUNK_ROWS", 10)  # 64 rows: six whole chunks and a short one
    assert torch.equal(wl.scaled_expert_input(batch.x, scale, 256).view(torch.int16), whole.view(torch.int16))
    assert torch.equal(w.expected_combine(1).view(torch.int16), combine_in_one_chunk.view(torch.int16))


def test_the_timeout_counts_from_the_start_of_sampling_when_it_is_marked():
    now = [0.0]
    rule = Sampling(min_samples=10, min_time_s=100.0, timeout_s=1.0, clock=lambda: now[0])
    rule.start()  # the first batch's round trips run before its samples are added
    now[0] = 0.8
    rule.add(100.0)
    assert not rule.done()
    now[0] = 1.0
    assert rule.done() and rule.timed_out


def test_the_first_cpu_batch_is_sized_from_the_warm_up():
    from bench.measure.cpu_timing import BATCH_TARGET_S, first_batch

    assert first_batch(10_000.0) == 5  # 10 ms round trips: 5 of them (50 ms), whatever their pace
    assert first_batch(100.0) == round(BATCH_TARGET_S / 100e-6)
    assert first_batch(0.0) == 1000 and first_batch(1e9) == 1


def test_payload_rows_come_from_a_table_generated_once_and_equal_the_hashes():
    from bench import synthetic as wl

    p = wl.BenchPoint(16, 256, 4, 16, 2, "nvfp4", seed=5)
    ids = torch.tensor([3, 0, 31, 3], dtype=torch.int64)
    x, sf = p.payload_rows(ids)
    gx, gsf = p.generate_rows(ids)
    assert torch.equal(x, gx) and torch.equal(sf, gsf)
    x[0, 0] ^= 0xFF  # a copy: an adapter writing into its batch cannot change what the gate expects
    assert torch.equal(p.payload_rows(ids)[0], gx)
    assert p.payload_table("cpu") is p.payload_table("cpu")
    big = wl.BenchPoint(4096, 7168, 8, 256, 8, "bf16")  # 8 ranks x 4096 tokens x 14336 B: 470 MB
    assert big.payload_table("cpu") is None


def test_the_expected_combine_is_computed_once_from_the_points_own_batch():
    from bench import synthetic as wl

    p = wl.BenchPoint(8, 256, 4, 16, 2, "bf16", seed=3)
    first = p.expected_combine(1)
    assert p._cache[("expected", 1, "cpu")] is not None  # computed once ...
    batch = p.batch(1)
    batch.x.fill_(0)  # what an adapter does to its input never reaches the expected result
    first.fill_(0)  # ... and handed out as copies
    fresh = wl.BenchPoint(8, 256, 4, 16, 2, "bf16", seed=3).expected_combine(1)
    assert torch.equal(p.expected_combine(1), fresh) and fresh.abs().sum() > 0


def test_payload_hash_bytes_are_the_scalar_formula():
    # the formula every rank regenerates; the tensor code mixes in place, the bytes must not change
    from bench.synthetic import _hash_bytes

    def byte(g, j, seed, salt):
        m = 0xFFFFFFFF
        v = (g * 0x9E3779B1 + j * 0x85EBCA77 + ((seed * 0x27D4EB2F + salt * 0x165667B1) & m)) & m
        v ^= v >> 15
        v = (v * 0x2C1B3C6D) & m
        v ^= v >> 12
        v = (v * 0x297A2D39) & m
        v ^= v >> 15
        return v & 0xFF

    ids = torch.cat([torch.arange(1100), torch.tensor([4096, 3])])  # past the first 1024-token chunk
    got = _hash_bytes(ids, 5, seed=7, salt=2)
    assert got.tolist() == [[byte(g, j, 7, 2) for j in range(5)] for g in ids.tolist()]
