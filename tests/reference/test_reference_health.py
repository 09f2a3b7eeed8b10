"""Health check against NVIDIA's published reference: bench's ratio column and fleet drift's baseline."""

from __future__ import annotations

import json

import pytest

from support.fleet import h200_host

from autoselect.cli.bench_cmd import render_text
from autoselect.fleet import drift
from autoselect.fleet.drift.nodes import reference_drift
from autoselect.fleet.drift.points import Observation, Point
from autoselect.hardware import HostFingerprint
from autoselect.reference import CLASSES
from autoselect.reference.health import SLOWER, SLOWER_LIMIT, Measured, check_results, compare
from autoselect.workload import Shape
from bench.run import BenchReport
from bench.sweep import SweepSpec
from db.records import Result

H200 = CLASSES["ref-h200_sxm-x8"]
LL, HT, AGRS = "deepep_low_latency", "deepep_high_throughput", "allgather_reducescatter"
DSV3_BF16 = (7168, 8, 256, "bf16")


def _m(backend, tokens, latency, shape=DSV3_BF16, world_size=8):
    return Measured(backend, *shape, world_size, tokens, latency)


def _result(backend, tokens, latency, *, device="cuda", status="ok", shape=DSV3_BF16):
    h, k, e, d = shape
    return Result(backend=backend, world_size=8, tokens_per_rank=tokens, hidden=h, top_k=k, experts=e,
                  activation_dtype=d, combine_dtype="bf16", routing="uniform", status=status, kind="micro",
                  device=device, latency_us_p50=latency if status == "ok" else None)


def test_a_measurement_is_divided_by_the_published_number_and_flagged_beyond_the_limit():
    ok, slow = compare([_m(LL, 128, 230.0), _m(LL, 128, 400.0)], H200)
    # 112.1 + 100.6 us, the table's eager row, graph-captured on vLLM's footing: x0.68..x1.00, central x0.84
    assert ok.reference_us == pytest.approx(212.7 * 0.84, abs=0.05)
    assert (ok.evidence, round(ok.ratio, 3), ok.slower) == ("published", 1.287, False)
    assert ok.source_line == "AIConfigurator 0.12.0, vLLM 0.24.0 DeepEP on 8×H200, collected 2026-08-31"
    assert slow.slower and slow.ratio > SLOWER_LIMIT
    assert slow.to_dict()["slower"] is True and slow.to_dict()["ratio"] == pytest.approx(400 / ok.reference_us, abs=1e-4)


def test_another_shape_is_compared_with_its_transferred_estimate_and_agrs_with_its_derived_number():
    qwen = (2048, 8, 128, "bf16")
    moved, derived = compare([_m(LL, 64, 500.0, shape=qwen), _m(AGRS, 50, 500.0, shape=qwen)], H200)
    assert moved.evidence == "transferred" and moved.source_line.startswith("transferred from H3072 top8")
    assert moved.slower
    assert derived.evidence == "derived" and derived.ratio > 3 and not derived.slower  # derived never flags
    assert compare([_m(LL, 5000, 100.0)], H200) == []  # LL is published up to 256 tokens only
    assert compare([_m(LL, 64, 100.0, world_size=16)], H200) == []  # no reference beyond one HGX board


def test_check_results_reads_ok_cuda_rows_of_a_reference_system_only():
    results = [_result(LL, 128, 400.0), _result(LL, 64, 90.0, device="cpu"), _result(HT, 16, 0.0, status="error")]
    check = check_results(results, h200_host("gpu-a"))
    assert check.ref_class == "ref-h200_sxm-x8"
    assert [c.measured.tokens_per_rank for c in check.comparisons] == [128]
    assert len(check.slower) == 1
    other = h200_host("gpu-b")
    other.gpu_name = "NVIDIA H200 NVL"
    assert check_results(results, other) is None
    assert check_results([_result(LL, 64, 90.0, device="cpu")], h200_host("gpu-a")) is None


def test_bench_prints_the_ratio_and_the_flag_in_text_and_json():
    spec = SweepSpec(backends=[LL, AGRS], tokens=[128], hidden=7168, top_k=8, experts=256, activation_dtype="bf16",
                     world_size=8)
    report = BenchReport(spec, [_result(LL, 128, 400.0), _result(AGRS, 128, 150.0)], {}, 3, "/tmp/x.db",
                         h200_host("gpu-a"))
    text = render_text(report)
    assert "# vs NVIDIA's published reference ref-h200_sxm-x8" in text
    # both on vLLM's footing (reference/footing.py): DeepEP low-latency's eager 212.7 us graph-captured
    # (x0.68..x1.00, central x0.84), the derived default's central 131.9 us (124.4..139.3 on the nccl-tests
    # footing: reference/derived.py) plus two launches of 16.2..21.8 us
    assert f"#   {LL} @ 128: 400.0 us / 178.7 us published = 2.24x  <- {SLOWER}" in text
    assert f"#   {AGRS} @ 128: 150.0 us / 169.9 us derived = 0.88x" in text
    doc = json.loads(json.dumps(report.to_dict()))
    assert doc["reference"]["host_class"] == "ref-h200_sxm-x8" and doc["reference"]["slower"] == 1
    assert [c["evidence"] for c in doc["reference"]["comparisons"]] == ["published", "derived"]
    cpu = BenchReport(spec, [_result(LL, 128, 400.0, device="cpu")], {}, 3, "/tmp/x.db",
                      HostFingerprint(hostname="c", machine_id="m", host_class="cpu", device="cpu", gpu_name=None,
                                      gpu_count=0, gpu_arch=None))
    assert cpu.to_dict()["reference"] is None and "published reference" not in render_text(cpu)


def _observation(backend, tokens, latency, run_id=2, machine="m-a"):
    point = Point(backend=backend, shape=Shape(hidden=7168, top_k=8, experts=256, dtype="bf16"), world_size=8,
                        tokens_per_rank=tokens, combine_dtype="bf16", routing="uniform", kind="micro", device="cuda")
    return Observation(machine_id=machine, hostname="gpu-a", host_class="h200x8-fleet", run_id=run_id,
                             run_started_at=f"2026-11-0{run_id}", point=point, latency_us=latency, noise_stdrel=0.01)


def test_fleet_drift_uses_the_reference_as_a_baseline():
    obs = [_observation(LL, 128, 400.0), _observation(LL, 64, 170.0), _observation(AGRS, 128, 400.0),
           _observation(LL, 128, 210.0, run_id=1)]  # an older run: history, not the newest run
    nodes = drift.node_drift(obs)
    reference_drift(nodes, obs, {"h200x8-fleet": h200_host("gpu-a")})
    node, = nodes
    assert node.reference_class == "ref-h200_sxm-x8" and node.compared_reference == 3
    vs_ref = [s for s in node.slow if s.versus == "reference"]
    assert [(s.backend, s.tokens_per_rank) for s in vs_ref] == [(LL, 128)]  # derived AGRS never flags
    assert vs_ref[0].reference_us == pytest.approx(212.7 * 0.84, abs=0.05) and vs_ref[0].threshold == 0.5
    assert node.to_dict()["compared_reference"] == 3


def test_fleet_drift_on_the_fleet_fixture_compares_with_the_reference_and_flags_only_the_planted_node(tmp_path):
    from support.fleet import SLOW_NODE, build_fleet_db

    report = drift.analyze_at(build_fleet_db(tmp_path / "fleet.db"))
    assert [n.hostname for n in report.flagged] == [SLOW_NODE]
    assert all(n.reference_class == "ref-h200_sxm-x8" and n.compared_reference > 0 for n in report.nodes)
    assert not any(s.versus == "reference" for n in report.nodes for s in n.slow)  # AGRS is derived only
