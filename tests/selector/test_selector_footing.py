"""recommend compares the backends on one footing: vLLM's grouped calls over the fused variant, equal DP
sizes only, and one path (the benchmark's adapters, or vLLM's own prepare / finalize) for every backend."""

from __future__ import annotations

from autoselect.selector import recommend_for
from autoselect.selector.evidence import comparison_path, on_one_footing
from db.queries import StoredResult
from db.store import Store
from support.db import hgx_host, make_result
from support.paths import FIXTURES

MODEL = str(FIXTURES / "models" / "deepseek-v3")  # 7168 / 256 / top-8, fp8 block-128 on sm90: make_result's shape


def _stored(backend, tokens, **kw) -> StoredResult:
    fields = make_result(backend, tokens, knobs={}, **kw).to_dict()
    return StoredResult(**fields)


def test_vllms_grouped_calls_stand_where_measured_and_a_fused_row_only_where_not():
    rows = [_stored("allgather_reducescatter", 1, calls="fused"), _stored("allgather_reducescatter", 1, calls="grouped"),
            _stored("allgather_reducescatter", 64, calls="fused"),
            _stored("allgather_reducescatter", 1, calls="grouped", dp_sizes="unequal")]
    kept = on_one_footing(rows, "adapter")
    assert [(r.tokens_per_rank, r.calls, r.dp_sizes) for r in kept] == [(1, "grouped", "equal"), (64, "fused", "equal")]


def test_vllms_own_path_is_compared_only_when_every_measured_backend_has_it():
    adapters = [_stored("allgather_reducescatter", 1), _stored("deepep_low_latency", 1)]
    assert comparison_path(adapters) == "adapter"
    one = adapters + [_stored("allgather_reducescatter", 1, via="vllm")]
    assert comparison_path(one) == "adapter"
    both = one + [_stored("deepep_low_latency", 1, via="vllm")]
    assert comparison_path(both) == "vllm"
    assert comparison_path([]) == "adapter"
    assert [r.via for r in on_one_footing(both, "vllm")] == ["vllm"] * 2


def test_recommend_prices_the_default_from_its_grouped_row_not_the_fused_one(db_path):
    host = hgx_host()
    with Store(db_path) as s:
        run = s.begin_run(host)
        for tokens in (1, 64):
            s.add_result(run, make_result("allgather_reducescatter", tokens, knobs={}, calls="fused",
                                          raw_samples_us=[50.0 + i * 0.01 for i in range(12)]))
        s.add_result(run, make_result("allgather_reducescatter", 1, knobs={}, calls="grouped", timing="graph",
                                      raw_samples_us=[80.0 + i * 0.01 for i in range(12)]))
        s.add_result(run, make_result("allgather_reducescatter", 64, knobs={}, calls="grouped", timing="graph",
                                      raw_samples_us=[90.0 + i * 0.01 for i in range(12)]))
        for tokens in (1, 64):
            s.add_result(run, make_result("flashinfer_nvlink_two_sided", tokens, knobs={}, timing="eager",
                                          raw_samples_us=[70.0 + i * 0.01 for i in range(12)]))
        # vLLM's unequal-size path, and a vLLM-path row of one of the two backends: neither is compared
        s.add_result(run, make_result("allgather_reducescatter", 64, knobs={}, calls="grouped", dp_sizes="unequal",
                                      raw_samples_us=[400.0 + i * 0.01 for i in range(12)]))
        s.add_result(run, make_result("allgather_reducescatter", 1, knobs={}, via="vllm",
                                      raw_samples_us=[10.0 + i * 0.01 for i in range(12)]))
        s.finish_run(run)
    r = recommend_for(MODEL, db_path=db_path, host_class=host.host_class, tokens="1,64", dp=8,
                      vllm_version="0.34.0")
    (default,) = [c for c in r.candidates if c.backend == "allgather_reducescatter"]
    assert [(b.tokens_per_rank, round(b.latency_us, 2)) for b in default.buckets] == [(1, 80.06), (64, 90.06)]
