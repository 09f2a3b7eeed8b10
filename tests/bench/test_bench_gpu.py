"""CUDA paths of the harness: events, graphs, NCCL groups (``gpu``, skipped without a CUDA GPU),
and the parts of their logic that run on CPU (the replay check, the split arithmetic, the
timing log), tested here without a GPU and without faking one."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from bench.backends import Received  # noqa: E402
from bench.measure.cuda_timing import batch_sample_us
from bench.measure.graphs import EAGER_REASONS, check_replay, eager_reason, layout_of, poison_outputs, same_layout
from bench.measure.stats import split_medians
from bench.synthetic import BenchPoint  # noqa: E402

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _spec(backends, **kw):
    from bench.sweep import SweepSpec

    args = dict(tokens=[1, 256], hidden=2048, top_k=8, experts=32, activation_dtype="bf16", world_size=1,
                device="cuda", min_time_s=0.1, timeout_s=3.0, setup_timeout_s=400.0, include_illegal=True)
    args.update(kw)
    return SweepSpec(backends=backends, **args)


# --------------------------------------------------------------------------------------
# CPU: the logic of the CUDA timing path.


def _exchange(rank=0):
    """What a perfect exchange delivers to ``rank`` (world size 2) and the exact combine."""
    w = BenchPoint(8, 64, 4, 16, 2, "bf16", seed=3)
    need = w.destinations()[:, rank].nonzero().reshape(-1)
    x, sf = w.payload_rows(need)
    ids, a = w.global_routing()
    rec = Received(x=x, x_sf=sf, topk_ids=ids[need], topk_weights=a[need].to(torch.float32) / 16.0,
                   token_index=need.to(torch.int32))
    batch = w.batch(rank)
    return w, rec, w.expected_combine(rank), batch


def test_the_eager_reasons_name_the_cause_and_its_detail():
    assert eager_reason("not_allowed") == "the adapter does not allow CUDA-graph capture"
    assert eager_reason("host_sync", "RuntimeError: called a synchronizing CUDA operation") == (
        "a round trip synchronizes with the host (RuntimeError: called a synchronizing CUDA operation); "
        "capture not attempted")
    assert eager_reason("capture_failed", "E") == (
        "CUDA-graph capture failed (E); the eager round trip passed the gate again")
    assert eager_reason("replay_mismatch", "dispatch: x") == (
        "a replay of the captured graph did not pass the gate (dispatch: x)")
    assert eager_reason("failed_before", "E") == (
        "CUDA-graph capture failed at an earlier point in this worker (E); not tried again")
    assert eager_reason("vllm_eager", "vLLM runs that step eagerly") == "as vLLM runs it: vLLM runs that step eagerly"
    assert sorted(EAGER_REASONS) == ["capture_failed", "failed_before", "host_sync", "not_allowed",
                                     "replay_mismatch", "vllm_eager"]


def test_a_batch_interval_is_divided_into_round_trips_in_microseconds():
    assert batch_sample_us(2.5, 10) == 250.0
    assert batch_sample_us(0.08, 10) == pytest.approx(8.0)


def test_split_medians_take_the_median_of_each_column():
    rows = [(1.0, 10.0), (3.0, 30.0), (2.0, 50.0)]
    assert split_medians(rows) == {"dispatch_us_p50": 2.0, "combine_us_p50": 30.0}
    assert split_medians([(1.0, 2.0), (3.0, 4.0)]) == {"dispatch_us_p50": 2.0, "combine_us_p50": 3.0}


def test_poisoning_fills_outputs_but_never_the_inputs_they_alias():
    w, rec, out, batch = _exchange()
    assert poison_outputs(rec, out, batch, None) == ["x", "out"]
    assert bool((rec.x == 0xFF).all()) and bool(torch.isnan(out.float()).all())

    aliased = Received(x=batch.x[:, :4], x_sf=None, topk_ids=rec.topk_ids, topk_weights=rec.topk_weights,
                       token_index=rec.token_index)
    before = batch.x.clone()
    assert poison_outputs(aliased, batch.x.new_empty(0), batch, None) == []
    assert torch.equal(batch.x, before)


def test_a_received_built_on_access_is_not_read_before_the_replay():
    from bench.backends.deepep_common import LazyReceived

    w, rec, out, batch = _exchange()
    builds = []
    lazy = LazyReceived(lambda: builds.append(1) or dict(vars(rec)))
    assert poison_outputs(lazy, out, batch, None) == ["out"]
    assert builds == [] and bool(torch.isnan(out.float()).all())
    _, _, exact, _ = _exchange()
    out.copy_(exact)
    assert check_replay(w, 0, lazy, out, layout_of(rec)) is None and builds == [1]


def test_a_replay_that_rewrote_nothing_fails_the_replay_check():
    w, rec, out, batch = _exchange()
    gate = layout_of(rec)
    poison_outputs(rec, out, batch, None)
    problem = check_replay(w, 0, rec, out, gate)
    assert problem.startswith("dispatch: rank 0: token ") and "activation byte 0: got 0xff" in problem


def test_a_replay_that_rewrote_everything_passes_the_replay_check():
    w, rec, out, batch = _exchange()
    gate = layout_of(rec)
    poison_outputs(rec, out, batch, None)
    _, again, exact, _ = _exchange()
    rec.x.copy_(again.x)
    out.copy_(exact)
    assert check_replay(w, 0, rec, out, gate) is None


def test_with_the_gates_row_order_combine_must_be_exact():
    w, rec, out, batch = _exchange()
    gate = layout_of(rec)
    out[0, 0] = out[0, 0] * 2
    assert check_replay(w, 0, rec, out, gate).startswith("combine: rank 0: combine of token 0 element 0:")


def test_with_another_row_order_combine_must_only_have_rewritten_every_element():
    w, rec, out, batch = _exchange()
    gate = layout_of(rec)
    order = torch.arange(rec.x.shape[0] - 1, -1, -1)
    moved = Received(x=rec.x[order].clone(), x_sf=None, topk_ids=rec.topk_ids[order],
                     topk_weights=rec.topk_weights[order], token_index=rec.token_index[order])
    assert not same_layout(layout_of(moved), gate)
    out = out * 3  # a combine of mismatched rows: wrong values, but written
    assert check_replay(w, 0, moved, out, gate) is None
    out[2, 5] = math.nan
    assert check_replay(w, 0, moved, out, gate) == (
        "combine: rank 0: output element [2, 5] was not written by the replay")


def test_same_layout_ignores_invalid_rows_and_compares_the_valid_mask():
    idx = torch.tensor([4, 7, 99, 2])
    valid = torch.tensor([True, True, False, True])
    assert same_layout((idx, valid, None), (torch.tensor([4, 7, -5, 2]), valid.clone(), None))
    assert not same_layout((idx, valid, None), (torch.tensor([7, 4, 99, 2]), valid, None))
    assert not same_layout((idx, valid, None), (idx, torch.tensor([True, True, True, True]), None))
    assert same_layout((idx[:2], None, None), (idx[:2].clone(), torch.tensor([True, True]), None))
    assert not same_layout((idx, None, None), (idx[:3], None, None))


def test_per_slot_layouts_also_compare_the_expert_of_each_row():
    idx, valid = torch.tensor([3, 3, 5]), torch.tensor([True, True, False])
    experts = torch.tensor([1, 6, 0])
    assert same_layout((idx, valid, experts), (idx, valid, torch.tensor([1, 6, 9])))
    assert not same_layout((idx, valid, experts), (idx, valid, torch.tensor([6, 1, 0])))
    assert not same_layout((idx, valid, experts), (idx, valid, None))


@pytest.mark.slow
def test_every_cpu_point_is_logged_as_timed_on_cpu_and_a_failed_gate_as_untimed(plugins, timing_log):
    from bench.sweep import SweepSpec, run_sweep

    spec = SweepSpec(backends=["reference_all_to_all", "test_wrong_byte"], tokens=[2, 4], hidden=256,
                     top_k=4, experts=16, activation_dtype="bf16", world_size=2, device="cpu",
                     min_time_s=0.02, timeout_s=1.0)
    results = run_sweep(spec)
    assert [(r.backend, r.status) for r in results] == [
        ("reference_all_to_all", "ok"), ("reference_all_to_all", "ok"),
        ("test_wrong_byte", "incorrect"), ("test_wrong_byte", "incorrect")]
    points = timing_log()
    assert all(e.pop("seconds") > 0 for e in points)
    assert points == [
        {"event": "point", "backend": "reference_all_to_all", "dtype": "bf16", "tokens": 2, "status": "ok",
         "timing": "cpu", "timing_note": None, "job": 1},
        {"event": "point", "backend": "reference_all_to_all", "dtype": "bf16", "tokens": 4, "status": "ok",
         "timing": "cpu", "timing_note": None, "job": 1},
        {"event": "point", "backend": "test_wrong_byte", "dtype": "bf16", "tokens": 2, "status": "incorrect",
         "timing": None, "timing_note": None, "job": 1},
        {"event": "point", "backend": "test_wrong_byte", "dtype": "bf16", "tokens": 4, "status": "incorrect",
         "timing": None, "timing_note": None, "job": 1},
    ]
    assert [(e["event"], e["backend"]) for e in timing_log("all") if e["event"] != "point"] == [
        ("start-up", "reference_all_to_all"), ("job", "reference_all_to_all"), ("close", "reference_all_to_all"),
        ("start-up", "test_wrong_byte"), ("job", "test_wrong_byte"), ("close", "test_wrong_byte")]


class _FakeEvent:
    """A CUDA event on the host clock: what ``time_cuda`` asks of ``torch.cuda.Event``."""

    def __init__(self, enable_timing=False):
        self.t = None

    def record(self, stream=None):
        import time

        self.t = time.perf_counter()

    def synchronize(self):
        pass

    def elapsed_time(self, end):
        return (end.t - self.t) * 1e3


@pytest.fixture
def fake_cuda(monkeypatch):
    """``torch.cuda``'s timing calls on the host (events, streams, synchronize), and a recorder in place of
    graph capture: ``time_cuda`` runs its CUDA path over CPU tensors and says whether it tried to capture."""
    import bench.measure.cuda_timing as cuda_timing

    captured = []

    def capture(adapter, ctx, point, *args):
        captured.append(point.tokens_per_rank)
        return None, "capture recorded by the test"

    monkeypatch.setattr(torch.cuda, "Event", _FakeEvent)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: None)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(cuda_timing, "capture", capture)
    return captured


@pytest.fixture
def one_rank(tmp_path):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield dist.group.WORLD
    dist.destroy_process_group()


def _time_on_fake_cuda(group, tokens, *, backend="allgather_reducescatter", arch="sm90", version="0.34.0"):
    from bench import backends
    from bench.backends import BenchContext
    from bench.measure.cuda_timing import time_cuda
    from bench.measure.sampling import Sampling

    ctx = BenchContext(rank=0, world_size=1, device="cpu", torch_device=torch.device("cpu"), group=group,
                       cpu_group=group, vllm_version=version, gpu_arch=arch)
    point = BenchPoint(tokens, 64, 2, 4, 1, "bf16")
    adapter = backends.load(backend)
    adapter.setup(ctx, point)
    batch = point.batch(0)
    received = adapter.dispatch(batch)
    expert_out = point.expert_output(0, received.x, received.topk_ids, received.topk_weights)
    rule = Sampling(min_samples=3, min_time_s=0.0, timeout_s=0.5)
    _, timing, note = time_cuda(adapter, ctx, batch, expert_out, rule, point=point, gate_layout=layout_of(received))
    adapter.teardown()
    return timing, note, rule.samples


def test_a_point_above_vllms_capture_size_is_timed_eagerly_on_cuda_and_says_so(fake_cuda, one_rank):
    timing, note, samples = _time_on_fake_cuda(one_rank, 513)
    assert fake_cuda == []  # never captured
    assert (timing, len(samples) >= 3) == ("eager", True)
    assert note == ("as vLLM runs it: 513 tokens per rank is above vLLM 0.34.0's largest CUDA-graph capture size on "
                    "sm90 (512 tokens): vLLM runs that step eagerly (vllm/config/vllm.py:2401-2408 (0.34.0))")


def test_a_point_vllm_captures_is_offered_to_the_graph_path(fake_cuda, one_rank):
    timing, note, _ = _time_on_fake_cuda(one_rank, 512)
    assert fake_cuda == [512]  # capture was attempted (the recorder declined, so it ran eagerly)
    assert (timing, note) == ("eager", "capture recorded by the test")
    # on Blackwell vLLM 0.34 captures steps up to 8192 tokens: 1024 is offered to the graph path too
    _time_on_fake_cuda(one_rank, 1024, arch="sm100")
    assert fake_cuda == [512, 1024]


def test_an_adapter_vllm_would_capture_but_that_cannot_be_captured_says_it_is_off_vllms_footing(fake_cuda, one_rank):
    from bench.backends.reference_all_to_all import ReferenceAllToAll

    timing, note, _ = _time_on_fake_cuda(one_rank, 4, backend="reference_all_to_all")
    assert (timing, note) == ("eager", eager_reason("not_allowed"))  # no vLLM backend: nothing to be off
    assert not ReferenceAllToAll.supports_cuda_graph


def test_the_recorder_stores_how_an_ok_point_was_timed_and_why():
    from bench.launch import PointDone
    from bench.sweep import SweepSpec, _Recorder

    spec = SweepSpec(backends=["allgather_reducescatter"], tokens=[1024], hidden=64, top_k=2, experts=4,
                     activation_dtype="bf16", world_size=1)
    out = []
    recorder = _Recorder(spec, None, None, None, 0, lambda e: None, out, {"allgather_reducescatter": "bf16"})
    recorder.point("allgather_reducescatter", PointDone("allgather_reducescatter", 1024, "ok", None,
                                                        {"calls": "grouped", "dp_sizes": "equal"}, "eager", "why"),
                   False)
    recorder.point("allgather_reducescatter", PointDone("allgather_reducescatter", 2048, "error", "boom", {},
                                                        "eager", "why"), False)
    assert [(r.timing, r.timing_note, r.calls, r.dp_sizes, r.via) for r in out] == [
        ("eager", "why", "grouped", "equal", "adapter"), (None, None, None, "equal", "adapter")]


# --------------------------------------------------------------------------------------
# GPU.


@pytest.mark.gpu
@needs_gpu
def test_allgather_reducescatter_is_graph_replayed_and_reference_eager_on_one_gpu_with_nccl(timing_log):
    from bench.sweep import run_sweep

    results = run_sweep(_spec(["allgather_reducescatter", "reference_all_to_all"]))
    assert [(r.backend, r.status) for r in results] == [
        ("allgather_reducescatter", "ok"), ("allgather_reducescatter", "ok"),
        ("reference_all_to_all", "ok"), ("reference_all_to_all", "ok")], [r.error for r in results]
    assert all(r.device == "cuda" and r.latency_us_p50 > 0 and r.dispatch_us_p50 > 0 for r in results)
    modes = [(e["backend"], e["tokens"], e["timing"], e["timing_note"]) for e in timing_log()]
    assert modes == [
        ("allgather_reducescatter", 1, "graph", None), ("allgather_reducescatter", 256, "graph", None),
        ("reference_all_to_all", 1, "eager", eager_reason("not_allowed")),
        ("reference_all_to_all", 256, "eager", eager_reason("not_allowed"))]
    assert [(r.timing, r.calls) for r in results[:2]] == [("graph", "grouped")] * 2
    assert "in one NCCL group" in results[0].versions["vllm_calls"]


@pytest.mark.gpu
@needs_gpu
def test_the_grouped_default_and_its_fused_variant_both_pass_and_a_point_above_the_capture_size_is_eager(timing_log):
    from bench.sweep import run_sweep

    # 1024 tokens per rank: above vLLM 0.34's capture size on sm90 (512), and on sm100 up to 0.33 (1024 is the
    # largest there, so 1024 itself is captured: the eager point is asserted for sm90, the test machine's arch)
    results = run_sweep(_spec(["allgather_reducescatter", "reference_allgather_fused"], tokens=[1, 1024],
                              gpu_arch="sm90", vllm_version="0.34.0"))
    assert [(r.backend, r.tokens_per_rank, r.status, r.calls) for r in results] == [
        ("allgather_reducescatter", 1, "ok", "grouped"), ("allgather_reducescatter", 1024, "ok", "grouped"),
        ("reference_allgather_fused", 1, "ok", "fused"), ("reference_allgather_fused", 1024, "ok", "fused")], \
        [r.error for r in results]
    assert [r.timing for r in results] == ["graph", "eager", "graph", "eager"]
    assert results[1].timing_note == eager_reason("vllm_eager", (
        "1024 tokens per rank is above vLLM 0.34.0's largest CUDA-graph capture size on sm90 (512 tokens): vLLM "
        "runs that step eagerly (vllm/config/vllm.py:2401-2408 (0.34.0))"))
    assert [e["timing"] for e in timing_log()] == ["graph", "eager", "graph", "eager"]


@pytest.mark.gpu
@needs_gpu
def test_an_adapter_claiming_capture_with_a_host_sync_is_timed_eagerly_and_says_why(plugins, timing_log):
    from bench.sweep import run_sweep

    (r,) = run_sweep(_spec(["test_graph_claim_with_host_sync"], tokens=[64]))
    assert r.status == "ok", r.error
    (entry,) = timing_log()
    assert entry["timing"] == "eager"
    assert entry["timing_note"].startswith("a round trip synchronizes with the host (RuntimeError: ")
    assert entry["timing_note"].endswith("; capture not attempted")


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("backend, timing", [("flashinfer_nvlink_one_sided", "graph"),
                                             ("flashinfer_nvlink_two_sided", "eager")])
def test_flashinfer_backends_pass_the_gate_at_world_size_1(backend, timing, timing_log):
    pytest.importorskip("flashinfer")
    from bench.sweep import run_sweep

    (r,) = run_sweep(_spec([backend], tokens=[256]))
    assert r.status == "ok", r.error
    assert timing_log()[0]["timing"] == timing, timing_log()


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("dtype", ["nvfp4", "fp8_block128"])
def test_one_sided_passes_the_gate_with_quantized_payloads(dtype, timing_log):
    pytest.importorskip("flashinfer")
    from bench.sweep import run_sweep

    (r,) = run_sweep(_spec(["flashinfer_nvlink_one_sided"], tokens=[64], activation_dtype=dtype))
    assert r.status == "ok", r.error
    assert timing_log()[0]["timing"] == "graph", timing_log()


@pytest.mark.gpu
@needs_gpu
def test_an_nvfp4_sized_one_sided_workspace_with_bf16_payload_is_never_ok(plugins):
    """The seed's bug (vLLM PR #39717): the gate (or the kernel's own combine check) stops it."""
    pytest.importorskip("flashinfer")
    from bench.sweep import run_sweep

    (r,) = run_sweep(_spec(["test_one_sided_nvfp4_workspace"], tokens=[256]))
    assert r.status in ("incorrect", "error") and r.samples == 0, (r.status, r.error)
