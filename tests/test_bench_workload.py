"""The workload, the gate's checks and the stopping rule, in one process (no torch.distributed)."""

from __future__ import annotations

import json

import pytest
import torch

from bench.measure import StoppingRule, check_combine, check_dispatch, summarize
from bench.backends import Received
from bench.workload import (
    BadRouting,
    BadWorkload,
    Workload,
    algbw_gbps,
    busbw_gbps,
    combine_bytes,
    dispatch_bytes,
    parse_routing,
)


def _w(**kw):
    args = dict(tokens_per_rank=16, hidden=256, top_k=4, experts=16, world_size=2, dtype="bf16")
    args.update(kw)
    return Workload(**args)


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
    with pytest.raises(BadWorkload, match="top_k 20 is larger than the number of experts 16"):
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
    rule = StoppingRule(min_samples=10, min_time_s=0.001, clock=lambda: now[0])
    for _ in range(9):
        rule.add(100.0)
    assert not rule.done()
    for _ in range(2):
        rule.add(100.0)
    assert rule.done() and rule.noise_target_met


def test_stopping_rule_timeout_stops_without_meeting_the_noise_target():
    now = [0.0]
    rule = StoppingRule(min_samples=10, min_time_s=100.0, timeout_s=1.0, clock=lambda: now[0])
    for i in range(20):
        rule.add(100.0 + 50 * (i % 2))
    assert not rule.done()
    now[0] = 2.0
    assert rule.done() and rule.timed_out and not rule.noise_target_met


def test_stopping_rule_stops_once_the_noise_is_stable():
    rule = StoppingRule(min_samples=10, min_time_s=0.0, max_noise=1e-9, timeout_s=1e9)
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

    from bench.measure import relative_standard_error

    rng = random.Random(7)
    rule = StoppingRule(min_samples=10**9, min_time_s=1e9, timeout_s=1e9)
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


def test_a_perfect_per_expert_layout_passes_and_combines_exactly():
    w = _w(top_k=4, experts=16, world_size=2)
    out = torch.zeros((w.tokens_per_rank, w.hidden), dtype=torch.float32)
    ids, a = w.global_routing()
    for r in range(2):
        rec = _ideal_slots(w, r)
        assert check_dispatch(w, r, rec) is None
        part = w.expert_output(r, rec.x, None, None, expert=rec.expert).float()
        # combine applies the weights: w_k for the slot's (token, expert) pick
        g = rec.token_index.long()
        k = (ids[g] == rec.expert[:, None]).float().argmax(dim=1)
        weight = a[g, k].float() / 16
        mine = g < w.tokens_per_rank
        out.index_add_(0, g[mine], part[mine] * weight[mine, None])
    assert check_combine(w, 0, out.to(torch.bfloat16)) is None


def test_a_missing_expert_slot_is_named():
    w = _w()
    rec = _ideal_slots(w, 1)
    g, e = int(rec.token_index[-1]), int(rec.expert[-1])
    rec.valid = torch.ones(rec.x.shape[0], dtype=torch.bool)
    rec.valid[-1] = False
    assert check_dispatch(w, 1, rec) == f"rank 1: token {g} (from rank {g // 16}) never arrived for expert {e}"
