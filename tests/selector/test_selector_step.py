"""The selector prices the step, not just the all2all (autoselect/selector/step.py), on NVIDIA's
published reference: CUDA graphs off makes a backend ineligible for CUDA-graph buckets, a bucket
above a backend's step budget is priced as the steps vLLM runs, and the answer says the budget it
assumed and what the pick does to the step.
"""

from __future__ import annotations

import json

import pytest

from support.paths import REPO

from autoselect.rules.batch_defaults import ORIGIN_DEFAULT, ORIGIN_FLAG
from autoselect.reference import default
from autoselect.selector import recommend_for, recommend_given, render_text
from autoselect.selector.step import stepped
from autoselect.selector.answer import BucketValue
from autoselect.workload import Deployment, Shape, WorkloadSpec

MODELS = REPO / "tests" / "fixtures" / "models"
R1 = str(MODELS / "deepseek-r1-nvfp4")  # bf16 activations on Hopper, nvfp4 on Blackwell
V3 = str(MODELS / "deepseek-v3")  # block-FP8 weights
HT, LL, AGRS = "deepep_high_throughput", "deepep_low_latency", "allgather_reducescatter"
ONE = "flashinfer_nvlink_one_sided"


def ask(model, host_class, **kw):
    return recommend_for(model, host_class=host_class, read_db=False, vllm_version="0.34.0", **kw)


def test_high_throughput_is_not_picked_for_the_default_workload_on_h200_because_vllm_runs_it_eagerly():
    # the audit's case: HT won the mixed workload through the tie rule's margin (1216 against the default's
    # 1032 us), while vLLM 0.34 turns CUDA graphs off for the whole model with it at DP > 1
    rec = ask(R1, "ref-h200_sxm-x8")
    assert rec.backend == AGRS
    [ht] = [r for r in rec.rejected if r.backend == HT]
    assert ht.kind == "ineligible"
    assert ht.reasons[0].startswith("vLLM 0.34.0 turns CUDA graphs off for the whole model with deepep_high_throughput")
    assert ("this workload's 8, 16, 32 tokens/rank buckets are decode-sized steps (at most 512 tokens per engine: "
            "--max-num-seqs 1024, capture size 512) that vLLM runs in a CUDA graph with any other backend") \
        in ht.reasons[0]
    assert "deepep_high_throughput (ineligible): vLLM 0.34.0 turns CUDA graphs off" in render_text(rec)


def _with_a_third_of(backend: str, workload: WorkloadSpec):
    """The answer on ref-h200_sxm-x8's published rows of bf16 DeepSeek-V3's shape, ``backend``'s made a
    third of themselves (so that it is the pick), against the derived default."""
    shape = dict(hidden=7168, top_k=8, experts=256, dtype="bf16", world_size=8)
    points = {b: default().query("ref-h200_sxm-x8", b, **shape) for b in (backend, AGRS)}
    points[backend] = [p._replace(latency_us=p.latency_us / 3) for p in points[backend]]
    return recommend_given(Shape(hidden=7168, top_k=8, experts=256, dtype="bf16").profile(), points,
                           deployment=Deployment(dp=8, tp=1), host_class="ref-h200_sxm-x8", vllm_version="0.34.0",
                           workload=workload)


def test_on_a_prefill_workload_high_throughput_stays_a_candidate_and_its_pick_says_cuda_graphs_are_off():
    # on the published data the default stays on prefill (the tie rule), so high-throughput's rows are made
    # a third of themselves: its pick must carry what it does to every decode step
    rec = _with_a_third_of(HT, WorkloadSpec("prefill", ((2048, 0.5), (4096, 0.5))))
    assert rec.backend == HT
    [c] = rec.step_consequences
    assert c.kind == "cuda_graphs_off" and "every decode step runs eagerly" in c.text
    assert "\nstep        deepep_high_throughput: vLLM 0.34.0 turns CUDA graphs off" in render_text(rec)
    doc = json.loads(json.dumps(rec.to_dict()))
    assert doc["step_consequences"][0]["kind"] == "cuda_graphs_off"
    # and on the published rows themselves it stays a candidate of a prefill workload
    assert HT in {c.backend for c in ask(V3, "ref-h200_sxm-x8", workload="prefill").candidates}


def test_on_blackwell_a_decode_step_is_one_token_per_running_request_not_vllms_wider_prefill_graphs():
    # vLLM 0.34 captures up to 8192 tokens on sm100 (prefill graphs, rules/cuda_graphs.py), but a decode step is
    # at most --max-num-seqs (1024) tokens: a prefill workload keeps high-throughput as a candidate
    rec = ask(R1, "ref-b200_sxm-x8", tokens="1024")
    [ht] = [r for r in rec.rejected if r.backend == HT]
    assert ht.kind == "ineligible" and "(at most 1024 tokens per engine: --max-num-seqs 1024, capture size 8192)" \
        in ht.reasons[0]
    assert HT in {c.backend for c in ask(R1, "ref-b200_sxm-x8", tokens="2048").candidates}


def test_a_low_latency_pick_says_its_256_token_step_cap():
    # on the published data low-latency ties with the default; its rows made a third of themselves, it is the pick
    rec = _with_a_third_of(LL, WorkloadSpec("decode", ((32, 0.5), (128, 0.5))))
    assert rec.backend == LL
    [c] = rec.step_consequences
    assert c.kind == "step_budget" and "every step carries at most 256 tokens per engine" in c.text
    assert "\nstep        deepep_low_latency: vLLM 0.34.0 lowers --max-num-batched-tokens to 256" in render_text(rec)


def test_a_bucket_above_the_step_budget_is_priced_as_the_steps_vllm_runs():
    rec = ask(R1, "ref-h200_sxm-x8")
    ll = next(c for c in rec.candidates if c.backend == LL)
    prefill = ll.buckets[-1]
    assert (prefill.tokens_per_rank, prefill.steps) == (8192, 32)
    at_256 = ask(R1, "ref-h200_sxm-x8", tokens="256")
    one_step = next(c for c in at_256.candidates if c.backend == LL).buckets[0]
    assert prefill.latency_us == pytest.approx(32 * one_step.latency_us)
    assert "its 8192 tokens/rank run as 32 steps of at most 256" in ll.step[-1]


def test_the_one_sided_budget_its_flags_lower_prices_the_largest_bucket_in_steps():
    # the GB200 rack at EP 16: one-sided's workspace fits 2 GiB only at --max-num-batched-tokens 7168, so
    # vLLM runs a 16384-token step as 7168 + 7168 + 2048, and that is what it is priced at
    rec = ask(R1, "ref-gb200-nvl72", world_size=16)
    assert rec.backend == ONE and rec.vllm_args[-2:] == ["--max-num-batched-tokens", "7168"]
    one = next(c for c in rec.candidates if c.backend == ONE)
    assert one.buckets[-1].steps == 3 and "3 steps of at most 7168" in one.step[-1]
    [c] = rec.step_consequences
    assert c.kind == "step_budget" and "--max-num-batched-tokens 7168" in c.text


def test_the_answer_says_the_budget_it_assumed_and_where_it_came_from():
    h200 = ask(R1, "ref-h200_sxm-x8")
    assert (h200.token_budget.tokens, h200.token_budget.origin) == (8192, ORIGIN_DEFAULT)
    assert "ref-h200_sxm-x8's GPU memory" in h200.token_budget.why
    assert h200.workload.tokens[-1] == 8192
    b200 = ask(R1, "ref-b200_sxm-x8")
    assert b200.token_budget.tokens == 16384 and b200.workload.tokens[-1] == 16384
    given = ask(R1, "ref-h200_sxm-x8", max_num_batched_tokens=2048)
    assert (given.token_budget.tokens, given.token_budget.origin) == (2048, ORIGIN_FLAG)
    assert "\nbudget      2048 tokens per engine per step: --max-num-batched-tokens 2048" in render_text(given)
    assert json.loads(json.dumps(given.to_dict()))["token_budget"]["origin"] == ORIGIN_FLAG


def test_stepped_sums_full_steps_and_the_rest_and_is_missing_when_a_part_is():
    def value_at(tokens):
        return BucketValue(tokens, 10.0 + tokens / 100, 1.0, "point", (tokens,), evidence="published")

    v = stepped(value_at, 1000, 256, LL)
    assert v.steps == 4 and v.latency_us == pytest.approx(3 * (10 + 2.56) + (10 + 2.32))
    assert v.halfwidth_us == pytest.approx(4.0) and v.result_ids == (256, 232) and v.evidence == "published"
    assert stepped(value_at, 256, 256, LL) == value_at(256)
    missing = stepped(lambda t: BucketValue(t, None, None, "missing", note="no measurement"), 1000, 256, LL)
    assert missing.latency_us is None and missing.steps == 4 and missing.note.endswith("no measurement")


def test_a_stepped_bucket_keeps_its_footing_summed_over_its_steps():
    # decide.py reads a bucket's footing for its capture mode; a bucket run in steps is launched like its
    # full steps, and its number on the source's own footing adds up like its value
    from autoselect.reference.footing import PointFooting
    from autoselect.rules.graph_capture import GRAPH

    def value_at(tokens):
        return BucketValue(tokens, float(tokens), 0.0, "point", evidence="published",
                           footing=PointFooting("src", GRAPH, "captured", (tokens / 2, tokens), ()))

    v = stepped(value_at, 1000, 256, LL)
    assert v.footing.capture == GRAPH and v.footing.as_source_us == (3 * 128 + 116, 3 * 256 + 232)
    host = stepped(lambda t: BucketValue(t, float(t), 0.0, "point"), 1000, 256, LL)
    assert host.footing is None  # a measurement of the host has no footing to carry
