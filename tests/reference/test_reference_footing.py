"""One footing: every reference number put on what vLLM's layer pays, and rows carried across systems.

The corrections are ranges from cited public measurements (``autoselect/reference/footing.py``);
the cross-system band is measured on the NCCL rows both systems publish
(``autoselect/reference/crosssystem.py``). Values here are read from the packaged file.
"""

from __future__ import annotations

import pytest

from autoselect.reference import default
from autoselect.reference.crosssystem import FAMILY, cross_system_error, same_generation
from autoselect.reference.footing import (
    BACKEND_FOOTING,
    COMMON,
    CORRECTIONS,
    EVIDENCE,
    FOOTINGS,
    on_common_footing,
    summary,
)
from autoselect.reference.systems import SYSTEMS
from autoselect.rules.graph_capture import EAGER, GRAPH, capture

DSV3 = dict(hidden=7168, top_k=8, experts=256)
LL, HT, AGRS = "deepep_low_latency", "deepep_high_throughput", "allgather_reducescatter"
ONE, TWO = "flashinfer_nvlink_one_sided", "flashinfer_nvlink_two_sided"


def test_every_footing_and_correction_names_its_source_and_every_cited_measurement_exists():
    assert set(BACKEND_FOOTING.values()) == set(FOOTINGS)
    for f in (*FOOTINGS.values(), COMMON):
        assert f.source and f.harness and f.capture and f.statistic
    for c in CORRECTIONS.values():
        assert c.low <= c.high and c.evidence and c.source_footing in FOOTINGS
        assert all(k in EVIDENCE for k in c.evidence)
        assert all(EVIDENCE[k].source and EVIDENCE[k].says for k in c.evidence)


def test_vllm_captures_decode_steps_and_runs_deepep_high_throughput_and_large_steps_eagerly():
    assert capture(LL, 256, "sm90").mode == GRAPH
    assert capture(AGRS, 512, "sm90").mode == GRAPH and capture(AGRS, 513, "sm90").mode == EAGER
    assert capture(AGRS, 8192, "sm100").mode == GRAPH  # 0.34: prefill graphs up to 8192 on 10.x
    assert capture(AGRS, 8192, "sm100", "0.33.0").mode == EAGER and capture(AGRS, 1024, "sm100", "0.33.0").mode == GRAPH
    assert capture(AGRS, 16384, "sm100").mode == EAGER
    assert capture(HT, 8, "sm100").mode == EAGER


def test_deepep_low_latency_is_graph_captured_between_x0_68_and_x1():
    p = default().query("ref-h200_sxm-x8", LL, dtype="bf16", tokens=[128], **DSV3)[0]
    f = on_common_footing(p, p.arch)
    assert (f.low_us, f.high_us) == pytest.approx((0.68 * p.latency_us, p.latency_us))
    assert f.latency_us == pytest.approx(0.84 * p.latency_us)
    assert f.footing.capture == GRAPH and [c.correction for c in f.footing.corrections] == ["deepep-ll-graph"]
    assert f.footing.as_source_us == (p.latency_us, p.latency_us)


def test_deepep_high_throughput_stays_on_its_eager_footing():
    p = default().query("ref-h200_sxm-x8", HT, dtype="bf16", tokens=[4096], **DSV3)[0]
    f = on_common_footing(p, p.arch)
    assert f.latency_us == p.latency_us and f.range_us is None and f.footing.corrections == ()
    assert f.footing.capture == EAGER and f.footing.describe() == "eager; on the footing as published"


def test_the_derived_default_pays_the_framework_per_launch_cost_twice():
    p = default().query("ref-b200_sxm-x8", AGRS, dtype="nvfp4", tokens=[128], **DSV3)[0]
    low, high = p.range_us  # one launch per group .. each extra tensor at 0.61 of the floor (nccl-tests)
    assert p.derivation["launches"] == 2 and p.derivation["extra_tensors"] == 3
    f = on_common_footing(p, p.arch)
    assert (f.low_us, f.high_us) == pytest.approx((low + 2 * 16.2, high + 2 * 21.8))
    assert f.footing.corrections[0].effect == "+2 x 16.2..21.8 us"


def test_the_one_and_two_sided_kernel_rows_carry_vllms_glue():
    p = default().query("ref-gb200-x4", ONE, dtype="nvfp4", tokens=[64], **DSV3)[0]
    f = on_common_footing(p, p.arch)
    assert (f.low_us, f.high_us) == pytest.approx((p.latency_us, 1.031 * p.latency_us))


def test_a_lower_bound_stays_a_lower_bound():
    p = default().query("ref-gb200-nvl72", AGRS, dtype="nvfp4", world_size=16, tokens=[4096], **DSV3)[0]
    assert p.bound
    f = on_common_footing(p, p.arch)
    assert f.latency_us == f.low_us == f.high_us == pytest.approx(p.latency_us + 2 * 16.2)


def test_the_summary_lists_what_the_numbers_used_with_their_sources():
    p = default().query("ref-h200_sxm-x8", LL, dtype="bf16", tokens=[64], **DSV3)[0]
    s = summary([on_common_footing(p, p.arch).footing])
    assert list(s["footings"]) == ["vllm-deepep-eager"] and list(s["corrections"]) == ["deepep-ll-graph"]
    assert list(s["evidence"]) == ["A7"] and "mhoqueanik/moe_ep_benchmark" in s["evidence"]["A7"]
    assert "derived_default" not in s and "8192" in s["capture"]["largest captured step"]


# --- across systems -----------------------------------------------------------------------------------


def test_the_cross_system_error_is_measured_on_the_nccl_rows_both_systems_publish():
    conn = default().conn
    b200 = cross_system_error(conn, "gb200", "b200_sxm")
    assert b200.n == 84 and b200.gpus == (2, 4) and b200.error == pytest.approx(0.090, abs=0.001)
    assert cross_system_error(conn, "gb200", "b300_sxm").error == pytest.approx(0.163, abs=0.001)
    h200 = cross_system_error(conn, "gb200", "h200_sxm")
    assert h200.error > 0.7  # another NVLink generation: a factor, not an error
    assert not same_generation(SYSTEMS["gb200"], SYSTEMS["h200_sxm"])
    assert set(FAMILY) == {ONE, TWO}


@pytest.mark.parametrize("ref_class, world_size", [("ref-b200_sxm-x8", 8), ("ref-b300_sxm-x8", 8),
                                                   ("ref-b200_sxm-x8", 4), ("ref-gb300-x4", 4)])
def test_one_and_two_sided_are_carried_from_gb200_to_another_nvlink_5_system(ref_class, world_size):
    data = default()
    for backend, dtype in ((ONE, "nvfp4"), (TWO, "nvfp4"), (TWO, "bf16")):
        moved = data.across_systems(ref_class, backend, dtype=dtype, world_size=world_size, **DSV3)
        assert moved.refused is None and moved.points
        src_class = "ref-gb200-nvl72" if world_size > 4 else "ref-gb200-x4"
        published = {p.tokens_per_rank: p.latency_us
                     for p in data.published(src_class, backend, dtype=dtype, world_size=world_size, **DSV3)}
        target = data.published(ref_class, backend, dtype=dtype, world_size=world_size, **DSV3)
        assert target == []  # nothing of its own: the transfer is all there is
        p = moved.points[0]
        assert p.evidence == "transferred" and p.ref_class == ref_class and p.latency_us == published[p.tokens_per_rank]
        assert p.source_line.startswith("transferred from GB200 (AIConfigurator 0.12.0, TensorRT-LLM 1.2.0rc6")
        error = cross_system_error(data.conn, "gb200", p.system)
        assert p.band == pytest.approx(error.error) and p.derivation["from_system"] == "gb200"


def test_nvlink_4_systems_get_nothing_and_say_why():
    moved = default().across_systems("ref-h200_sxm-x8", TWO, dtype="bf16", world_size=8, **DSV3)
    assert moved.points == [] and "another NVLink generation" in moved.refused and "NVLink 4" in moved.refused
    assert default().across_systems("ref-b200_sxm-x8", HT, dtype="bf16", world_size=8, **DSV3).refused


def test_a_shape_the_source_system_lacks_adds_its_shape_transfer_error():
    moved = default().across_systems("ref-b200_sxm-x8", TWO, hidden=4096, top_k=8, experts=256, dtype="bf16",
                                     world_size=8)
    p = moved.points[0]
    assert p.derivation["shape_transfer_error"] == pytest.approx(0.131)
    assert p.band == pytest.approx(p.derivation["cross_system_error"] + 0.131)
