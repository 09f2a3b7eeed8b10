"""allgather_reducescatter derived from NCCL timings: the message sizes and the interpolation."""

from __future__ import annotations

import pytest

from autoselect.reference import default
from autoselect.reference.derived import (MAX_EXTRAPOLATION, Collective, agrs_bound, agrs_estimate, agrs_messages,
                                          read_time)
from autoselect.rules.agrs_collectives import AGRS_COLLECTIVES


def test_message_sizes_follow_vllms_agrs_path():
    # DeepSeek-V3 shape, bf16, 8 ranks x 128 tokens: gathered hidden (2H) + int32 ids + fp32 weights
    m = agrs_messages(hidden=7168, top_k=8, dtype="bf16", world_size=8, tokens_per_rank=128)
    assert m.all_gather_bytes == 8 * 128 * (2 * 7168 + 4 * 8 + 4 * 8) == 14_745_600
    assert m.reduce_scatter_bytes == 8 * 128 * 2 * 7168 == 14_680_064
    assert m.all_gather_parts == {"hidden_states": 14_680_064, "scales": 0, "topk_ids": 32_768, "topk_weights": 32_768}
    # nvfp4: packed values H/2 + one byte scale per 16 values are gathered; the combine stays bf16
    fp4 = agrs_messages(hidden=7168, top_k=8, dtype="nvfp4", world_size=4, tokens_per_rank=256)
    assert fp4.all_gather_parts["hidden_states"] == 4 * 256 * 3584
    assert fp4.all_gather_parts["scales"] == 4 * 256 * 448
    assert fp4.reduce_scatter_bytes == 4 * 256 * 14336
    # per-tensor fp8: a 0-dim static scale is not gathered; block fp8 gathers fp32 scales per 128
    assert agrs_messages(hidden=4096, top_k=6, dtype="fp8", world_size=2, tokens_per_rank=1).all_gather_parts["scales"] == 0
    assert agrs_messages(hidden=4096, top_k=6, dtype="fp8_block128", world_size=2,
                         tokens_per_rank=1).all_gather_parts["scales"] == 2 * 4 * 32
    with pytest.raises(ValueError):
        agrs_messages(hidden=7168, top_k=8, dtype="int4", world_size=8, tokens_per_rank=1)
    with pytest.raises(ValueError):
        agrs_messages(hidden=7168, top_k=8, dtype="bf16", world_size=8, tokens_per_rank=0)


def test_hand_computed_h200_case():
    """8×H200, DeepSeek-V3 shape, bf16, 128 tokens per rank, from the published NCCL 2.29.2 rows.

    One launch for the group (the lower end): all_gather 14,745,600 B lies between the 8 MiB
    (0.04317 ms) and 16 MiB (0.06691 ms) rows: 43.17 + (66.91 - 43.17) * (14,745,600 - 8,388,608) /
    8,388,608 = 61.16046875 us; reduce_scatter 14,680,064 B between 0.04472 and 0.06945 ms: 44.72 +
    24.73 * 0.75 = 63.2675 us; lower = 124.42796875 us. Each of the two tensors beyond the first
    (top-k weights and ids) adds up to 0.61 of the 512 B all_gather floor (12.19 us): upper =
    124.42796875 + 2 * 0.61 * 12.19 = 139.29976875 us; central = 131.86386875 us. Each call on its
    own (kept in the derivation): hidden_states 60.975 us, top-k weights and ids 14.71 us each.
    """
    p = default().query("ref-h200_sxm-x8", "allgather_reducescatter", hidden=7168, top_k=8, experts=256,
                        dtype="bf16", tokens=[128])[0]
    assert p.range_us == pytest.approx((124.42796875, 139.29976875), abs=1e-9)
    assert p.latency_us == pytest.approx(131.86386875, abs=1e-9)
    assert p.combine_us == pytest.approx(63.2675, abs=1e-9)
    assert p.dispatch_us == pytest.approx(61.16046875 + 0.61 * 12.19, abs=1e-9)
    d = p.derivation
    assert d["all_gather_read"] == {"how": "interpolated", "points": [[8388608, 43.17], [16777216, 66.91]]}
    assert d["reduce_scatter_read"]["points"] == [[8388608, 44.720000000000006], [16777216, 69.45]]
    assert [(c["op"], c["tensor"], c["bytes"]) for c in d["calls"]] == [
        ("all_gather", "hidden_states", 14_680_064), ("all_gather", "topk_weights", 32_768),
        ("all_gather", "topk_ids", 32_768), ("reduce_scatter", "output", 14_680_064)]
    assert [c["how"] for c in d["calls"]][1:3] == ["measured", "measured"]
    assert [c["us"] for c in d["calls"]][:3] == pytest.approx([60.975, 14.71, 14.71])
    assert (d["launches"], d["extra_tensors"], d["floor_us"], d["extra_tensor_floors"]) == (2, 2, 12.19, [0.0, 0.61])
    assert (d["lower_us"], d["upper_us"], d["central_us"]) == (p.range_us[0], p.range_us[1], p.latency_us)
    assert "naive_dp_ep.py" in d["vllm_source"] and "all2all.py" in d["vllm_source"]
    assert "cuda_communicator.py:947-950 (0.32.0-0.33.0), :1003-1006 (0.34.0)" in d["vllm_source"]
    assert d["collectives_read_for_release"] is True
    assert any("unequal token counts" in n for n in d["not_priced"])


def test_a_quantized_activation_gathers_its_scales_as_a_fourth_call():
    """fp8_block128 at 1 token/rank: four tiny all_gathers in one launch, three beyond the first."""
    p = default().query("ref-h200_sxm-x8", "allgather_reducescatter", hidden=7168, top_k=8, experts=256,
                        dtype="fp8_block128", tokens=[1])[0]
    calls = p.derivation["calls"]
    assert [c["tensor"] for c in calls] == ["hidden_states", "topk_weights", "topk_ids", "scales", "output"]
    lower, upper = p.range_us
    assert upper - lower == pytest.approx(3 * 0.61 * 12.19)  # three extra tensors, at most 0.61 floor each
    assert p.derivation["extra_tensors"] == 3
    # a per-tensor static fp8 scale is a 0-dim tensor and is not gathered: three calls
    fp8 = default().query("ref-h200_sxm-x8", "allgather_reducescatter", hidden=7168, top_k=8, experts=256,
                          dtype="fp8", tokens=[1])[0]
    assert [c["tensor"] for c in fp8.derivation["calls"]] == ["hidden_states", "topk_weights", "topk_ids", "output"]


def test_the_range_narrows_as_the_messages_grow():
    rows = default().query("ref-h200_sxm-x8", "allgather_reducescatter", hidden=7168, top_k=8, experts=256,
                           dtype="bf16", tokens=[1, 64, 1024, 4096])
    ratios = [p.range_us[1] / p.range_us[0] for p in rows]
    assert ratios == sorted(ratios, reverse=True)
    # the per-tensor term is a fixed few us: x1.57 of the fused time at 1 token, x1.006 at 4096
    assert ratios[0] == pytest.approx(1.565, abs=0.01) and ratios[-1] < 1.01


def test_reading_a_collective():
    c = Collective("all_gather", 8, (512, 1024, 2048), (10.0, 12.0, 20.0))
    assert read_time(c, 1024).time_us == 12.0 and read_time(c, 1024).how == "measured"
    assert read_time(c, 1536).time_us == 16.0
    low = read_time(c, 100)
    assert low.time_us == 10.0 and low.how.startswith("below")
    high = read_time(c, 4096)
    assert high.time_us == 40.0 and high.how.startswith("extrapolated")
    assert read_time(c, int(2048 * MAX_EXTRAPOLATION)) is not None
    assert read_time(c, int(2048 * MAX_EXTRAPOLATION) + 1) is None


def test_estimate_refuses_far_outside_and_wrong_gpu_count():
    ag = Collective("all_gather", 2, (512, 1024), (5.0, 6.0))
    rs = Collective("reduce_scatter", 2, (512, 1024), (5.0, 6.0))
    row = AGRS_COLLECTIVES[0]
    est = agrs_estimate(ag, rs, hidden=128, top_k=1, dtype="bf16", world_size=2, tokens_per_rank=1, collectives=row)
    # fused: 2 x (256 + 4 + 4) = 528 B -> 5.0 + 16/512 us, then RS 512 B 5.0 us; the top-k weights and ids
    # beyond the hidden states add up to 0.61 of the 5.0 us floor each
    assert est.lower_us == pytest.approx(10.0 + 16 / 512, abs=1e-9)
    assert est.upper_us == pytest.approx(10.0 + 16 / 512 + 2 * 0.61 * 5.0)
    assert [c.reading.time_us for c in est.calls] == [5.0, 5.0, 5.0, 5.0]  # each alone, kept for the record
    assert agrs_estimate(ag, rs, hidden=7168, top_k=8, dtype="bf16", world_size=2, tokens_per_rank=4096,
                         collectives=row) is None
    with pytest.raises(ValueError):
        agrs_estimate(ag, rs, hidden=128, top_k=1, dtype="bf16", world_size=4, tokens_per_rank=1, collectives=row)


def test_a_bound_reads_the_smaller_gpu_count_at_the_same_bytes_per_rank():
    ag = Collective("all_gather", 4, (512, 1 << 20), (10.0, 100.0))
    rs = Collective("reduce_scatter", 4, (512, 1 << 20), (10.0, 100.0))
    row = AGRS_COLLECTIVES[0]
    b = agrs_bound(ag, rs, hidden=1024, top_k=1, dtype="bf16", world_size=16, tokens_per_rank=16, collectives=row)
    m = b.messages
    scale = 15 / 16 * 4 / 3  # each rank receives (N-1)/N of the gathered bytes: read at 4 GPUs for the same
    assert b.all_gather.time_us == pytest.approx(read_time(ag, round(m.all_gather_bytes * scale)).time_us)
    assert b.bound and b.upper_us is None and b.latency_us == b.lower_us and b.rows_gpus == 4
    with pytest.raises(ValueError):
        agrs_bound(ag, rs, hidden=1024, top_k=1, dtype="bf16", world_size=4, tokens_per_rank=16, collectives=row)


def test_derived_rows_grow_with_tokens_and_stop_past_the_cap():
    rows = default().query("ref-h200_sxm-x8", "allgather_reducescatter", hidden=7168, top_k=8, experts=256,
                           dtype="bf16", tokens=[1, 1024, 65536, 262144])
    assert [p.tokens_per_rank for p in rows] == [1, 1024, 65536]  # 262144: >16x the largest NCCL message
    assert rows[0].latency_us < rows[1].latency_us < rows[2].latency_us
