"""The FlashInfer adapters' calls, bound to the installed FlashInfer's real signatures.

FlashInfer's kernels need a GPU, but its Python API imports on CPU (CI installs
flashinfer-python 0.7.2.post1 with --no-deps). Each kernel entry point the adapters call is
wrapped so that every call is first bound with ``inspect.signature(real).bind(...)`` (a
wrong keyword, a missing argument or one too many fails the test) and then answered the way
the kernel answers at ep size 1 (rows come back as sent, combine returns its input). The
harness's gate then runs through the adapter on a one-rank gloo group, so the adapter's
packing, token-index and validity handling are checked too. Real kernel runs: perf/gpu_check.sh.
"""

from __future__ import annotations

import inspect

import pytest
import torch

flashinfer = pytest.importorskip("flashinfer", reason="flashinfer-python not installed (CI: .ci/run installs it)")

from bench import backends  # noqa: E402
from bench.backends import BenchContext  # noqa: E402
from bench.measure import run_point  # noqa: E402
from bench.workload import Workload  # noqa: E402


@pytest.fixture
def ctx(tmp_path):
    """A one-rank gloo group, as the workers build it."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    group = dist.group.WORLD
    yield BenchContext(rank=0, world_size=1, device="cpu", torch_device=torch.device("cpu"),
                       group=group, cpu_group=group)
    dist.destroy_process_group()


class Bound:
    """Records calls after binding them to ``real``'s signature."""

    def __init__(self, real, answer, *, has_self=False):
        self.sig = inspect.signature(real)
        self.answer, self.has_self, self.calls = answer, has_self, []

    def __call__(self, *args, **kwargs):
        if self.has_self:  # an unbound method answered for an instance: bind with a stand-in self
            args = (None, *args)
        bound = self.sig.bind(*args, **kwargs)
        self.calls.append(bound)
        return self.answer(bound.arguments)


def _patch_method(monkeypatch, cls, name, answer):
    real = getattr(cls, name)
    rec = Bound(real, answer)

    def method(self, *args, **kwargs):
        return rec(self, *args, **kwargs)

    monkeypatch.setattr(cls, name, method)
    return rec


def _patch_static(monkeypatch, cls, name, answer):
    rec = Bound(getattr(cls, name), answer)
    monkeypatch.setattr(cls, name, staticmethod(rec))
    return rec


FAST = dict(min_samples=3, min_time_s=0.0, timeout_s=0.5)


@pytest.mark.parametrize("dtype", ["bf16", "nvfp4", "fp8_block128"])
def test_one_sided_legacy_calls_bind_and_pass_the_gate(monkeypatch, ctx, dtype):
    from flashinfer.comm import trtllm_moe_alltoall as t

    sizes = Bound(t.moe_a2a_get_workspace_size_per_rank, lambda a: a["ep_size"] * a["max_num_tokens"] * (
        a["total_dispatch_payload_size_per_token"] + a["combine_payload_size_per_token"]))
    monkeypatch.setattr(t, "moe_a2a_get_workspace_size_per_rank", sizes)
    init = _patch_method(monkeypatch, t.MoeAlltoAll, "__init__", lambda a: None)
    dispatch = _patch_method(monkeypatch, t.MoeAlltoAll, "dispatch",
                             lambda a: [p.unsqueeze(0).clone() for p in a["input_payloads"]])
    combine = _patch_method(monkeypatch, t.MoeAlltoAll, "combine", lambda a: a["payload"].sum(dim=0))
    w = Workload(64, 512, 8, 32, 1, dtype)
    adapter = backends.load("flashinfer_nvlink_one_sided")
    assert adapter.unavailable_reason(BenchContext(0, 1, "cpu", None)) == \
        "needs CUDA GPUs (FlashInfer NVLink kernels); this run is on CPU"
    adapter.setup(ctx, w)
    outcome = run_point(adapter, ctx, w, **FAST)
    adapter.teardown()
    assert outcome.status == "ok", outcome.error
    assert sizes.calls[0].arguments["total_dispatch_payload_size_per_token"] == 8 * 8 + 4 + w.value_bytes + w.scale_bytes
    assert init.calls[0].arguments["workspace_size_per_rank"] == sizes.calls[0].arguments["ep_size"] * 64 * (
        68 + w.value_bytes + w.scale_bytes + 1024)
    assert dispatch.calls[0].arguments["expert_id_payload_index"] == 1
    assert combine.calls[0].arguments["runtime_max_tokens_per_rank"] == 64


def test_one_sided_moe_ep_calls_bind_and_pass_the_gate(monkeypatch, ctx):
    import flashinfer.moe_ep as ep
    from flashinfer.moe_ep.core.comm.communication import MoEEpDispatchResult

    import bench.backends._flashinfer as fi

    monkeypatch.setattr(fi, "has_legacy_one_sided", lambda: False)  # take the 0.7 path at ws 1

    class Comm:
        def __init__(self):
            self.dispatch = Bound(ep.NVLinkOneSidedAlltoAll.dispatch, self._dispatch, has_self=True)
            self.combine = Bound(ep.NVLinkOneSidedAlltoAll.combine, lambda a: a["expert_output"].clone(),
                                 has_self=True)
            self.destroy = lambda: None

        def _dispatch(self, a):
            return MoEEpDispatchResult(hidden_states=a["hidden_states"].clone(), topk_ids=a["topk_ids"].clone(),
                                       topk_weights=a["topk_weights"].clone(), tokens_per_rank=a["max_tokens_per_rank"],
                                       hidden_states_scale=a["hidden_states_scale"])

    comm = Comm()
    created = Bound(ep.create_communication, lambda a: comm)
    monkeypatch.setattr(ep, "create_communication", created)
    w = Workload(32, 512, 8, 32, 1, "nvfp4")
    adapter = backends.load("flashinfer_nvlink_one_sided")
    adapter.setup(ctx, w)
    outcome = run_point(adapter, ctx, w, **FAST)
    assert outcome.status == "ok", outcome.error
    params, config = created.calls[0].arguments["params"], created.calls[0].arguments["backend"]
    assert params.dispatch_bytes_per_token == w.value_bytes + w.scale_bytes
    assert config.extra_payload_bytes_per_token == 16
    # the workspace the real class would size: payload bytes + ids + weights + token index tail
    hs = comm.dispatch.calls[0].arguments["hidden_states"]
    assert hs.shape == (32, w.value_bytes + 16)


def test_two_sided_calls_bind_and_pass_the_gate(monkeypatch, ctx):
    from flashinfer.comm.trtllm_alltoall import MnnvlMoe, MoEAlltoallInfo

    t = 48

    def prepare(a):
        info = MoEAlltoallInfo(None, torch.tensor([t]), torch.arange(t), torch.tensor([t]),
                               torch.arange(t - 1, -1, -1), torch.arange(t), t * a["ep_size"])
        order = info.recv_rank_local_indices
        ids = torch.empty_like(a["expert_ids"]); ids[order] = a["expert_ids"]
        ws = torch.empty_like(a["scales"]); ws[order] = a["scales"]
        return info, ids, ws, None

    def alltoallv(a):
        out = torch.zeros_like(a["x"])
        out[a["alltoall_info"].recv_rank_local_indices] = a["x"]  # rows land out of order
        return out

    def combine(a):
        return a["x"][a["alltoall_info"].recv_rank_local_indices]

    _patch_static(monkeypatch, MnnvlMoe, "get_moe_workspaces", lambda a: torch.zeros(1))
    _patch_static(monkeypatch, MnnvlMoe, "get_moe_prepare_workspace", lambda a: torch.zeros(1))
    prep = _patch_static(monkeypatch, MnnvlMoe, "mnnvl_moe_alltoallv_prepare_without_allgather", prepare)
    a2a = _patch_static(monkeypatch, MnnvlMoe, "mnnvl_moe_alltoallv", alltoallv)
    comb = _patch_static(monkeypatch, MnnvlMoe, "mnnvl_moe_alltoallv_combine", combine)
    w = Workload(t, 512, 8, 32, 1, "nvfp4")
    adapter = backends.load("flashinfer_nvlink_two_sided")
    adapter.setup(ctx, w)
    outcome = run_point(adapter, ctx, w, **FAST)
    assert outcome.status == "ok", outcome.error
    assert a2a.calls[0].arguments["x"].shape[1] % 16 == 0
    assert prep.calls[0].arguments["slot_count"] == 32 and comb.calls[0].arguments["token_count"] == t


def test_the_undersized_test_adapter_sizes_for_nvfp4_whatever_the_payload(monkeypatch):
    import sys
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).parent / "plugins"))
    sys.modules.pop("autoselect_test_backends.faulty", None)
    adapter = backends.load("test_one_sided_nvfp4_workspace")
    w = Workload(256, 2048, 8, 32, 1, "bf16")
    assert adapter.dispatch_row_bytes(w) == 1024 + 128 + 64
    assert backends.load("flashinfer_nvlink_one_sided").dispatch_row_bytes(w) == 4096 + 64 + 4
