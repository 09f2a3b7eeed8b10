"""The FlashInfer adapters run through FlashInfer's real Python API, with only the GPU parts stood in.

FlashInfer's kernels need a GPU, but its Python imports on CPU (CI installs
flashinfer-python 0.7.2.post1 with --no-deps). ``tests/support/flashinfer_kernels.py``
replaces the compiled ops and the symmetric memory with CPU code that does what the CUDA
sources say (line numbers there); the real ``MoeAlltoAll`` / ``NVLinkOneSidedAlltoAll``
Python runs on top, and every ``MnnvlMoe`` call is bound to its real signature. The
harness's gate then runs through each adapter on a one-rank gloo group, and on two ranks
(spawned processes) where receive buffers have padding rows the adapter must mark invalid.

The same tests run against FlashInfer 0.6.x when ``AUTOSELECT_TEST_FLASHINFER06`` names an
unpacked 0.6.18.post1 ``flashinfer/`` tree (.ci/run provides one):
:func:`test_the_same_tests_pass_against_flashinfer_0_6` reruns this file in a subprocess with
that tree first on ``PYTHONPATH``. Real kernel runs: perf/gpu_check.sh.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys

import pytest
import torch

from support.paths import PLUGINS, REPO

flashinfer = pytest.importorskip("flashinfer", reason="flashinfer-python not installed (CI: .ci/run installs it)")

from bench import backends
from bench.backends import BenchContext
from bench.backends import _flashinfer as fi
from bench.measure import run_point
from bench.synthetic import BenchPoint

from support.flashinfer_kernels import Bound, TwoSidedKernels, install_moe_ep_platform, install_one_sided

#: Set in the subprocess of the 0.6 rerun: the version this process must have imported.
EXPECTED_VERSION = os.environ.get("AUTOSELECT_TEST_EXPECT_FLASHINFER")
FLASHINFER06 = os.environ.get("AUTOSELECT_TEST_FLASHINFER06")
FAST = dict(min_samples=3, min_time_s=0.0, timeout_s=0.5)
ALL_DTYPES = ["bf16", "fp16", "fp8", "fp8_block128", "mxfp8", "nvfp4", "mxfp4"]


@pytest.fixture
def ctx(tmp_path):
    """A one-rank gloo group, as the workers build it."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    group = dist.group.WORLD
    yield BenchContext(rank=0, world_size=1, device="cpu", torch_device=torch.device("cpu"),
                       group=group, cpu_group=group)
    dist.destroy_process_group()


def test_this_process_imported_the_expected_flashinfer():
    assert flashinfer.__version__ == (EXPECTED_VERSION or flashinfer.__version__)


def test_the_api_generation_is_detected_by_what_moe_ep_exports():
    # 0.6.18 has a flashinfer.moe_ep package too, without the NVLink communication API.
    import flashinfer.moe_ep as ep

    if hasattr(ep, "NVLinkOneSidedAlltoAll"):
        assert fi.has_moe_ep() and fi.missing_moe_ep_one_sided() is None
    else:
        assert not fi.has_moe_ep()
        assert fi.missing_moe_ep_one_sided() == ("flashinfer.moe_ep has no MoEEpCommParams, NVLinkOneSidedAlltoAll, "
                                                 "NVLinkOneSidedConfig, create_communication (FlashInfer 0.6.x; "
                                                 "the NVLink API came in 0.7)")
    assert fi.has_legacy_one_sided() and fi.has_legacy_two_sided()


def test_unavailable_reasons_name_what_is_missing(monkeypatch):
    one, two = backends.load("flashinfer_nvlink_one_sided"), backends.load("flashinfer_nvlink_two_sided")
    cpu = BenchContext(0, 1, "cpu", None)
    assert one.unavailable_reason(cpu) == two.unavailable_reason(cpu) == \
        "needs CUDA GPUs (FlashInfer NVLink kernels); this run is on CPU"
    monkeypatch.setattr(fi, "has_legacy_one_sided", lambda: False)
    monkeypatch.setattr(fi, "has_legacy_two_sided", lambda: False)
    monkeypatch.setattr(fi, "missing_moe_ep_one_sided", lambda: "flashinfer.moe_ep has no NVLinkOneSidedAlltoAll")
    monkeypatch.setattr(fi, "missing_moe_ep_two_sided", lambda: "flashinfer.moe_ep has no NVLinkTwoSidedAlltoAll")
    gpu1, gpu8 = BenchContext(0, 1, "cuda", None), BenchContext(0, 8, "cuda", None, nvlinks_all_up=True)
    assert one.unavailable_reason(gpu1).startswith("world size 1 needs flashinfer.comm.MoeAlltoAll")
    assert two.unavailable_reason(gpu1).startswith("world size 1 needs flashinfer.comm.trtllm_alltoall.MnnvlMoe")
    assert one.unavailable_reason(gpu8) == ("this FlashInfer has no flashinfer.comm.MoeAlltoAll and "
                                            "flashinfer.moe_ep has no NVLinkOneSidedAlltoAll")
    assert two.unavailable_reason(gpu8) == ("this FlashInfer has no flashinfer.comm.trtllm_alltoall.MnnvlMoe and "
                                            "flashinfer.moe_ep has no NVLinkTwoSidedAlltoAll")
    monkeypatch.setattr(fi, "missing_moe_ep_one_sided", lambda: None)
    monkeypatch.setattr(fi, "missing_moe_ep_two_sided", lambda: None)
    assert one.unavailable_reason(gpu8) is None and two.unavailable_reason(gpu8) is None
    assert one.unavailable_reason(BenchContext(0, 8, "cuda", None, nvlinks_all_up=False)) == \
        "needs every NVLink of each GPU up (P2P over NVLink); PCIe-only GPUs or links down"


def test_one_sided_top_k_list_is_the_kernels_switch():
    from support.flashinfer_kernels import ONE_SIDED_TOP_K

    from bench.backends.flashinfer_nvlink_one_sided import SUPPORTED_TOP_K

    assert sorted(SUPPORTED_TOP_K) == sorted(ONE_SIDED_TOP_K)  # no 3: neither 0.6.18 nor 0.7.2 has it


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_one_sided_legacy_api_passes_the_gate_with_vllms_payload_list(monkeypatch, ctx, dtype):
    ops = install_one_sided(monkeypatch)
    w = BenchPoint(48, 512, 8, 32, 1, dtype)
    adapter = backends.load("flashinfer_nvlink_one_sided")
    adapter.setup(ctx, w)
    assert not adapter.use_moe_ep
    outcome = run_point(adapter, ctx, w, **FAST)
    adapter.teardown()
    assert outcome.status == "ok", outcome.error
    # vLLM's payloads [x, x_sf, topk_ids, topk_weights]; the index rides on the last activation tensor
    v, s, k = w.value_bytes, w.scale_bytes, w.top_k
    tail = fi.index_tail(s or v)
    expected = [((48, v + (0 if s else tail)), torch.uint8)]
    if s:
        expected.append(((48, s + tail), torch.uint8))
    expected += [((48, k), torch.int32), ((48, k), torch.float32)]
    assert ops.dispatches[0].payloads == expected
    assert all((shape[1] * torch.tensor([], dtype=dt).element_size()) % 16 == 0 for shape, dt in expected[:-2])
    assert ops.combines[0].shape == (1, 48, 512) and ops.combines[0].dtype == torch.bfloat16
    assert len(ops.dispatches) > 3  # the timing loop ran through the same kernels


def test_timed_dispatches_reuse_the_staged_payload(monkeypatch, ctx):
    install_one_sided(monkeypatch)
    w = BenchPoint(16, 512, 8, 32, 1, "bf16")
    adapter = backends.load("flashinfer_nvlink_one_sided")
    adapter.setup(ctx, w)
    batch = w.batch(0, ctx.torch_device)
    adapter.dispatch(batch)
    first = adapter._staged.carrier
    adapter.combine(torch.zeros(16, 512, dtype=torch.bfloat16))
    received = adapter.dispatch(batch)
    assert adapter._staged.carrier is first
    # the token index and validity read the receive buffer in place (no gather kernel)
    workspace = adapter.a2a.workspace.untyped_storage().data_ptr()
    assert received.token_index.untyped_storage().data_ptr() == workspace
    assert received.topk_ids.untyped_storage().data_ptr() == workspace


def test_one_sided_workspace_is_what_nvlink_one_sided_alltoall_would_allocate(monkeypatch, ctx):
    from flashinfer.comm import trtllm_moe_alltoall as t

    install_one_sided(monkeypatch)
    sizes = Bound(t.moe_a2a_get_workspace_size_per_rank, None)
    real = t.moe_a2a_get_workspace_size_per_rank
    sizes.answer = lambda a: real(**a)
    monkeypatch.setattr(t, "moe_a2a_get_workspace_size_per_rank", sizes)
    w = BenchPoint(64, 2048, 8, 32, 1, "nvfp4")
    adapter = backends.load("flashinfer_nvlink_one_sided")
    adapter.setup(ctx, w)
    args = sizes.calls[0].arguments
    # NVLinkOneSidedAlltoAll.__init__ (0.7.2 communication.py:99-116): format bytes + 8·top_k
    # + extra; combine rows bf16. Bytes per token (trtllm_moe_alltoall.py docstring).
    assert args["total_dispatch_payload_size_per_token"] == 1024 + 128 + 16 + 64
    assert args["combine_payload_size_per_token"] == 2 * 2048
    aux = 3 * 128 + 2 * 64 * 22 * 4  # calculateOffsets for ep 1, 64 tokens: 3 aligned flag blocks + 2 top-k tables
    assert adapter.a2a.workspace.shape == (1, aux + 64 * (1232 + 4096))


def test_a_dispatch_that_delivers_nothing_fails_the_gate_even_on_a_cached_workspace(monkeypatch, ctx):
    # FlashInfer keeps the workspace of a geometry for the process; setup poisons the rows, so
    # the first point's bytes cannot pass for a second point's
    ops = install_one_sided(monkeypatch)
    w = BenchPoint(32, 512, 8, 32, 1, "nvfp4")
    first = backends.load("flashinfer_nvlink_one_sided")
    first.setup(ctx, w)
    assert run_point(first, ctx, w, **FAST).status == "ok"
    workspace = first.a2a.workspace.data_ptr()
    first.teardown()
    ops.deliver = False
    again = backends.load("flashinfer_nvlink_one_sided")
    again.setup(ctx, w)
    assert again.a2a.workspace.data_ptr() == workspace  # the cached one, holding the first point's rows
    outcome = run_point(again, ctx, w, **FAST)
    assert outcome.status == "incorrect"
    # poisoned rows carry ids -1: none is valid
    assert outcome.error.startswith("dispatch: rank 0: token 0 (from rank 0) never arrived, though rank 0 owns")


def test_the_seeds_undersized_workspace_fails_on_the_combine_as_measured_on_the_h200(monkeypatch, ctx):
    import sys as _sys

    install_one_sided(monkeypatch)
    monkeypatch.syspath_prepend(str(PLUGINS))
    _sys.modules.pop("autoselect_test_backends.faulty", None)
    adapter = backends.load("test_one_sided_nvfp4_workspace")
    w = BenchPoint(256, 2048, 8, 32, 1, "bf16")
    assert adapter.dispatch_row_bytes(w) == 1024 + 128 + 64
    assert backends.load("flashinfer_nvlink_one_sided").dispatch_row_bytes(w) == 4096 + 16 + 64
    adapter.setup(ctx, w)
    received = adapter.dispatch(w.batch(0, ctx.torch_device))  # fits in the combine region: no error
    assert received.x.shape == (256, 4096)
    with pytest.raises(RuntimeError, match="workspace insufficient for combine payload region"):
        adapter.combine(torch.zeros(256, 2048, dtype=torch.bfloat16))


@pytest.mark.parametrize("dtype", ["bf16", "nvfp4", "fp8_block128"])
def test_one_sided_moe_ep_api_passes_the_gate_and_makes_the_legacy_paths_kernel_call(monkeypatch, ctx, dtype):
    ep = pytest.importorskip("flashinfer.moe_ep")
    if not fi.has_moe_ep():
        pytest.skip(f"0.6.x: {fi.missing_moe_ep_one_sided()}")
    from flashinfer.moe_ep.backends.split.comm import nvlink_common
    from flashinfer.moe_ep.backends.split.comm.nvlink_one_sided import communication as one_sided

    ops = install_one_sided(monkeypatch)
    # the NVLink platform check (NVML, all links up) is the only GPU query left on this path
    monkeypatch.setattr(nvlink_common, "nvlink_platform_supported", lambda: True)
    monkeypatch.setattr(one_sided, "nvlink_platform_supported", lambda: True)
    created = Bound(ep.create_communication, None)
    real_create = ep.create_communication
    created.answer = lambda a: real_create(a["bootstrap"], a["params"], a["backend"], **a["options"])
    monkeypatch.setattr(ep, "create_communication", created)
    monkeypatch.setattr(fi, "has_legacy_one_sided", lambda: False)  # take the 0.7 path at ws 1
    w = BenchPoint(32, 512, 8, 32, 1, dtype)
    adapter = backends.load("flashinfer_nvlink_one_sided")
    adapter.setup(ctx, w)
    assert adapter.use_moe_ep and isinstance(adapter.comm, ep.NVLinkOneSidedAlltoAll)
    outcome = run_point(adapter, ctx, w, **FAST)
    assert outcome.status == "ok", outcome.error
    params, config = created.calls[0].arguments["params"], created.calls[0].arguments["backend"]
    assert params.dispatch_bytes_per_token == w.value_bytes + w.scale_bytes
    assert config.extra_payload_bytes_per_token == fi.index_tail(w.scale_bytes or w.value_bytes)
    moe_ep_calls, moe_ep_size = ops.dispatches[0], adapter.comm.alltoall.workspace_size_per_rank
    adapter.teardown()
    assert adapter.comm is None

    monkeypatch.setattr(fi, "has_legacy_one_sided", lambda: True)
    ops.dispatches.clear()
    legacy = backends.load("flashinfer_nvlink_one_sided")
    legacy.setup(ctx, w)
    legacy.dispatch(w.batch(0, ctx.torch_device))
    assert not legacy.use_moe_ep
    assert ops.dispatches[0] == moe_ep_calls and legacy.a2a.workspace_size_per_rank == moe_ep_size


@pytest.mark.slow
@pytest.mark.parametrize("backend, api", [("flashinfer_nvlink_one_sided", "legacy"),
                                          ("flashinfer_nvlink_one_sided", "moe_ep"),
                                          ("flashinfer_nvlink_two_sided", "legacy"),
                                          ("flashinfer_nvlink_two_sided", "moe_ep")])
@pytest.mark.parametrize("dtype", ["bf16", "nvfp4"])
def test_two_ranks_pass_the_gate_with_padding_rows_marked_invalid(tmp_path, backend, api, dtype):
    from support.flashinfer_kernels import run_ranks

    if api == "moe_ep" and not fi.has_moe_ep():
        pytest.skip(f"0.6.x: {fi.missing_moe_ep_one_sided()}")
    # top_k 2 of 32 experts: many tokens have both experts on one rank, so rows stay empty
    reports = run_ranks(tmp_path, 2, backend, dtype, 24, 2, api)
    for rank, r in enumerate(reports):
        assert (r["status"], r["error"], r["api"]) == ("ok", None, api), (rank, r)
        # [2 · 24] receive rows; only the tokens routed to this rank are valid
        assert r["rows"] == 48 and r["valid_rows"] == r["expected_rows"] < 48, (rank, r)


def test_two_sided_passes_the_gate_with_vllms_two_alltoallv_calls(monkeypatch, ctx):
    kernels = TwoSidedKernels(monkeypatch)
    t = 48
    w = BenchPoint(t, 512, 8, 32, 1, "nvfp4")
    adapter = backends.load("flashinfer_nvlink_two_sided")
    adapter.setup(ctx, w)
    outcome = run_point(adapter, ctx, w, **FAST)
    assert outcome.status == "ok", outcome.error
    first_two = [c.arguments["x"] for c in kernels.alltoallv.calls[:2]]
    assert [tuple(x.shape) for x in first_two] == [(t, w.value_bytes), (t, w.scale_bytes + 16)]
    prep = kernels.prepare.calls[0].arguments
    assert prep["slot_count"] == prep["expert_count"] == 32 and prep["max_token_count_per_rank"] == t
    assert kernels.combine.calls[0].arguments["token_count"] == t


def test_two_sided_bf16_sends_one_alltoallv_with_the_index_on_the_values(monkeypatch, ctx):
    kernels = TwoSidedKernels(monkeypatch)
    w = BenchPoint(16, 512, 4, 32, 1, "bf16")
    adapter = backends.load("flashinfer_nvlink_two_sided")
    adapter.setup(ctx, w)
    received = adapter.dispatch(w.batch(0, ctx.torch_device))
    assert len(kernels.alltoallv.calls) == 1
    assert tuple(kernels.alltoallv.calls[0].arguments["x"].shape) == (16, 1024 + 16)
    assert received.x_sf is None and received.valid.tolist() == [True] * 16
    assert sorted(received.token_index.tolist()) == list(range(16))
    assert received.token_index.tolist() != list(range(16))  # rows arrive out of source order


# ---- which FlashInfer API an adapter calls, for which vLLM release ----------------------------

#: What the three FlashInfer generations offer (autoselect.rules.FLASHINFER_APIS; read from their wheels).
FI_0_6 = fi.InstalledApi(True, True, False, False, False, None)
FI_0_7_2 = fi.InstalledApi(True, True, True, True, False, "max_tokens_per_rank")
FI_0_7_4 = fi.InstalledApi(False, False, True, True, True, "runtime_max_tokens_per_rank")
ONE, TWO = "flashinfer_nvlink_one_sided", "flashinfer_nvlink_two_sided"


@pytest.mark.parametrize(
    "backend, target, ws, found, api, fence, mirrors, note",
    [  # vLLM 0.34.0 all2all.py:860-868 (one-sided, fence) and :676-764 (two-sided moe_ep) on FlashInfer 0.7.4
     (ONE, "0.34.0", 8, FI_0_7_4, "moe_ep", True, "vLLM 0.34.0+ (flashinfer.moe_ep, fence transport)", ""),
     (TWO, "0.34.0", 8, FI_0_7_4, "moe_ep", False, "vLLM 0.34.0+ (flashinfer.moe_ep)", ""),
     # 0.7.2.post1 has no cft/lamport: the calls it can make are vLLM 0.33's
     (ONE, "0.34.0", 8, FI_0_7_2, "moe_ep", False, "vLLM 0.33.0-0.33.x (flashinfer.moe_ep)",
      "this FlashInfer cannot make the calls of vLLM 0.34.0+ (flashinfer.moe_ep, fence transport)"),
     (TWO, "0.34.0", 8, FI_0_7_2, "moe_ep", False, "vLLM 0.34.0+ (flashinfer.moe_ep)", ""),
     # vLLM 0.33.0: one-sided through moe_ep, two-sided through MnnvlMoe (0.33.0 all2all.py:680-708)
     (ONE, "0.33.0", 8, FI_0_7_2, "moe_ep", False, "vLLM 0.33.0-0.33.x (flashinfer.moe_ep)", ""),
     (TWO, "0.33.0", 8, FI_0_7_2, "legacy", False, "vLLM 0.11.0-0.33.x (flashinfer.comm legacy classes)", ""),
     (TWO, "0.33.0", 8, FI_0_7_4, "moe_ep", False, "vLLM 0.34.0+ (flashinfer.moe_ep)",
      "this FlashInfer has no legacy classes"),
     (ONE, "0.32.0", 8, FI_0_6, "legacy", False, "vLLM 0.18.0-0.32.x (flashinfer.comm legacy classes)", ""),
     (ONE, "0.34.0", 8, FI_0_6, "legacy", False, "vLLM 0.18.0-0.32.x (flashinfer.comm legacy classes)",
      "this FlashInfer has no flashinfer.moe_ep NVLink API"),
     # one GPU without NVLink peers: moe_ep refuses it, the legacy classes do not
     (ONE, "0.34.0", 1, FI_0_7_2, "legacy", False, "vLLM 0.18.0-0.32.x (flashinfer.comm legacy classes)",
      "world size 1: flashinfer.moe_ep refuses a GPU without NVLink peers, so the legacy classes make the calls"),
     (ONE, None, 8, FI_0_7_4, "moe_ep", True, "vLLM 0.34.0+ (flashinfer.moe_ep, fence transport)", "")],
)
def test_the_adapters_make_the_calls_of_the_target_release_as_far_as_the_installed_flashinfer_allows(
        backend, target, ws, found, api, fence, mirrors, note):
    choice = fi.choose_api(backend, target, ws, found)
    assert (choice.api, choice.fence_flags, choice.mirrors.label, choice.why) == (api, fence, mirrors, note)
    path = choice.code_path()
    assert path["vllm_calls"] == mirrors and ("vllm_calls_note" in path) == bool(note)
    assert path["flashinfer_api"] == ("flashinfer.moe_ep (cft=False, lamport=False)" if fence else
                                      "flashinfer.moe_ep" if api == "moe_ep" else "flashinfer.comm legacy classes")
    assert fi.choose_api(backend, target, ws, fi.InstalledApi(False, False, False, False, False, None)) is None


def test_the_installed_flashinfer_is_read_by_what_it_exports():
    found = fi.installed_api()
    if flashinfer.__version__.startswith("0.6."):
        assert found == FI_0_6
    else:  # 0.7.2.post1: legacy classes and moe_ep, no transport fields, dispatch(max_tokens_per_rank=)
        assert found == FI_0_7_2


def test_a_0_34_two_sided_point_runs_flashinfer_moe_ep_with_vllms_arguments(monkeypatch, ctx):
    ep = pytest.importorskip("flashinfer.moe_ep")
    if fi.missing_moe_ep_two_sided():
        pytest.skip(f"0.6.x: {fi.missing_moe_ep_one_sided()}")
    kernels = TwoSidedKernels(monkeypatch)  # moe_ep's two-sided runs MnnvlMoe's kernels in 0.7.2
    install_moe_ep_platform(monkeypatch)
    created = Bound(ep.create_communication, None)
    real_create = ep.create_communication
    created.answer = lambda a: real_create(a["bootstrap"], a["params"], a["backend"], **a["options"])
    monkeypatch.setattr(ep, "create_communication", created)
    monkeypatch.setattr(fi, "has_legacy_two_sided", lambda: False)  # take moe_ep at world size 1
    w = BenchPoint(48, 512, 8, 32, 1, "nvfp4")
    adapter = backends.load("flashinfer_nvlink_two_sided")
    adapter.setup(dataclasses.replace(ctx, vllm_version="0.34.0"), w)
    assert adapter.use_moe_ep and isinstance(adapter.comm, ep.NVLinkTwoSidedAlltoAll)
    outcome = run_point(adapter, adapter.ctx, w, **FAST)
    assert outcome.status == "ok", outcome.error
    args = created.calls[0].arguments
    # vLLM 0.34.0 all2all.py:732-743: invalid_expert_id=num_experts, NVLinkTwoSidedConfig(comm_backend=...)
    assert args["params"].invalid_expert_id == 32 and isinstance(args["backend"], ep.NVLinkTwoSidedConfig)
    assert [tuple(c.arguments["x"].shape) for c in kernels.alltoallv.calls[:2]] == [(48, w.value_bytes),
                                                                                     (48, w.scale_bytes + 16)]
    assert adapter.code_path() == {"flashinfer_api": "flashinfer.moe_ep", "vllm_calls": "vLLM 0.34.0+ (flashinfer.moe_ep)"}
    adapter.teardown()
    assert adapter.comm is None


def test_a_0_34_one_sided_point_on_0_7_2_says_it_could_not_set_the_fence_transport(monkeypatch, ctx):
    ep = pytest.importorskip("flashinfer.moe_ep")
    if not fi.has_moe_ep():
        pytest.skip(f"0.6.x: {fi.missing_moe_ep_one_sided()}")
    install_one_sided(monkeypatch)
    install_moe_ep_platform(monkeypatch)
    created = Bound(ep.create_communication, None)
    real_create = ep.create_communication
    created.answer = lambda a: real_create(a["bootstrap"], a["params"], a["backend"], **a["options"])
    monkeypatch.setattr(ep, "create_communication", created)
    monkeypatch.setattr(fi, "has_legacy_one_sided", lambda: False)
    w = BenchPoint(32, 512, 8, 32, 1, "nvfp4")
    adapter = backends.load("flashinfer_nvlink_one_sided")
    adapter.setup(dataclasses.replace(ctx, vllm_version="0.34.0"), w)
    config = created.calls[0].arguments["backend"]
    assert not hasattr(config, "cft")  # 0.7.2.post1's NVLinkOneSidedConfig: config.py:29-34
    assert run_point(adapter, adapter.ctx, w, **FAST).status == "ok"
    assert adapter.code_path() == {
        "flashinfer_api": "flashinfer.moe_ep", "vllm_calls": "vLLM 0.33.0-0.33.x (flashinfer.moe_ep)",
        "vllm_calls_note": "this FlashInfer cannot make the calls of vLLM 0.34.0+ (flashinfer.moe_ep, fence transport)"}
    adapter.teardown()


@pytest.mark.skipif(EXPECTED_VERSION is not None, reason="this is the 0.6 rerun itself")
@pytest.mark.skipif(not FLASHINFER06, reason="AUTOSELECT_TEST_FLASHINFER06 unset (.ci/run unpacks flashinfer-python "
                                              "0.6.18.post1 and sets it)")
@pytest.mark.slow
def test_the_same_tests_pass_against_flashinfer_0_6():
    pythonpath = os.pathsep.join(p for p in (FLASHINFER06, os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": pythonpath, "AUTOSELECT_TEST_EXPECT_FLASHINFER": "0.6.18.post1"}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", __file__],
                         env=env, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    summary = run.stdout.strip().splitlines()[-1]
    found = re.fullmatch(r"(\d+) passed, (\d+) skipped in .*", summary)
    assert found and int(found.group(1)) >= 18, summary
    # what skips there: the moe_ep cases (0.6 has no NVLink moe_ep API) and this test itself
    reasons = re.findall(r"^SKIPPED \[(\d+)\] [^:]+:\d+: (.*)$", run.stdout, re.M)
    assert sum(int(n) for n, _ in reasons) == int(found.group(2)), run.stdout[-3000:]
    assert {why for _, why in reasons} == {
        "this is the 0.6 rerun itself",
        "0.6.x: flashinfer.moe_ep has no MoEEpCommParams, NVLinkOneSidedAlltoAll, NVLinkOneSidedConfig, "
        "create_communication (FlashInfer 0.6.x; the NVLink API came in 0.7)"}, reasons
