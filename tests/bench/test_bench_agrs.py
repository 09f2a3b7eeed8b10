"""vLLM's default, as vLLM calls it: the allgather_reducescatter adapter makes the target release's calls.

The calls per round trip are read from ``autoselect/rules/agrs_collectives.py`` (the table the
derived default is priced from): one all_gather per gathered tensor and one reduce_scatter with
equal token counts per DP rank; one broadcast per tensor and root rank and one reduce per root
rank on vLLM's unequal-size path. Each test runs real gloo ranks (spawned processes) through the
correctness gate and counts every torch.distributed call the adapter makes. The packed variant,
one all_gather for everything, is ``reference_allgather_fused``: its own name, never vLLM's number.
"""

from __future__ import annotations

from collections import Counter

import pytest

from autoselect.rules.agrs_collectives import agrs_calls, collectives_for
from support.agrs_ranks import case, run_ranks

pytestmark = pytest.mark.slow

VERSIONS = ("0.32.0", "0.33.0", "0.34.0")
#: world size 2: each release's equal-size calls (fp8 block-128: scales gathered too), bf16, the fused variant
TWO_RANKS = [case(vllm_version=v) for v in VERSIONS] + [case(dtype="bf16"), case(backend="reference_allgather_fused")]
#: world size 3: the unequal-size path (per-root calls), nvfp4 (its scales gathered too)
THREE_RANKS = [case(vllm_version=v, dp_sizes="unequal", dtype="nvfp4", tokens=3) for v in ("0.32.0", "0.34.0")]


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """Per rank, one report per case of :data:`TWO_RANKS` (one spawn for all of them)."""
    return run_ranks(tmp_path_factory.mktemp("agrs2"), 2, TWO_RANKS)


@pytest.fixture(scope="module")
def three_ranks(tmp_path_factory):
    return run_ranks(tmp_path_factory.mktemp("agrs3"), 3, THREE_RANKS)


def _expected(version: str, world_size: int, *, scales: bool, even: bool) -> dict:
    row, read = collectives_for(version)
    assert read
    counts: Counter = Counter()
    for call in agrs_calls(row, scales=scales, world_size=world_size, even=even):
        counts[call.op] += call.count
    return dict(counts)


@pytest.mark.parametrize("at, version", list(enumerate(VERSIONS)))
def test_a_round_trip_makes_the_releases_calls_one_all_gather_per_tensor(two_ranks, at, version):
    # fp8 block-128 gathers hidden_states, topk_weights, topk_ids and the scales: 4 all_gathers
    assert _expected(version, 2, scales=True, even=True) == {"all_gather": 4, "reduce_scatter": 1}
    for rank in two_ranks:
        r = rank[at]
        assert r["problem"] is None  # every byte delivered, the combine exact
        assert r["calls"] == _expected(version, 2, scales=True, even=True)
        assert r["footing"] == {"calls": "grouped", "dp_sizes": "equal"}
        assert r["code_path"] == {"vllm_calls": "vLLM 0.32.0+ (rules/agrs_collectives.py): 4 all_gather per tensor "
                                                "in sequence (gloo has no groups), reduce_scatter"}


def test_bf16_gathers_no_scales(two_ranks):
    assert _expected("0.34.0", 2, scales=False, even=True) == {"all_gather": 3, "reduce_scatter": 1}
    assert [(rank[3]["problem"], rank[3]["calls"]) for rank in two_ranks] == [
        (None, {"all_gather": 3, "reduce_scatter": 1})] * 2


def test_the_fused_variant_packs_everything_into_one_all_gather(two_ranks):
    assert [(rank[4]["problem"], rank[4]["calls"], rank[4]["footing"]) for rank in two_ranks] == [
        (None, {"all_gather": 1, "reduce_scatter": 1}, {"calls": "fused"})] * 2


@pytest.mark.parametrize("at, version", [(0, "0.32.0"), (1, "0.34.0")])
def test_the_unequal_size_path_broadcasts_per_tensor_and_root_and_reduces_per_root(three_ranks, at, version):
    expected = _expected(version, 3, scales=True, even=False)
    assert expected == {"broadcast": 12, "reduce": 3}  # 4 tensors x 3 roots; one reduce per root
    for rank in three_ranks:
        r = rank[at]
        assert r["problem"] is None  # every byte delivered, the combine exact
        assert r["calls"] == expected
        assert r["footing"] == {"calls": "grouped", "dp_sizes": "unequal"}
        assert r["code_path"]["vllm_calls"].endswith("4 broadcast per tensor and root rank in sequence (gloo has no "
                                                     "groups), reduce per root rank")
