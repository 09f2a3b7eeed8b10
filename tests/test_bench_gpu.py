"""CUDA paths of the harness (events, graphs, NCCL groups); skipped without a CUDA GPU."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def _spec(backends, **kw):
    from bench.sweep import SweepSpec

    args = dict(tokens=[1, 256], hidden=2048, top_k=8, experts=32, dtype="bf16", world_size=1,
                device="cuda", min_time_s=0.1, timeout_s=3.0, setup_timeout_s=400.0, include_illegal=True)
    args.update(kw)
    return SweepSpec(backends=backends, **args)


def test_allgather_reducescatter_and_reference_are_ok_on_one_gpu_with_nccl():
    from bench.sweep import run_sweep

    results = run_sweep(_spec(["allgather_reducescatter", "reference_all_to_all"]))
    assert [(r.backend, r.status) for r in results] == [
        ("allgather_reducescatter", "ok"), ("allgather_reducescatter", "ok"),
        ("reference_all_to_all", "ok"), ("reference_all_to_all", "ok")], [r.error for r in results]
    assert all(r.device == "cuda" and r.latency_us_p50 > 0 and r.dispatch_us_p50 > 0 for r in results)


@pytest.mark.parametrize("backend", ["flashinfer_nvlink_one_sided", "flashinfer_nvlink_two_sided"])
def test_flashinfer_backends_pass_the_gate_at_world_size_1(backend):
    pytest.importorskip("flashinfer")
    from bench.sweep import run_sweep

    (r,) = run_sweep(_spec([backend], tokens=[256]))
    assert r.status == "ok", r.error


@pytest.mark.parametrize("dtype", ["nvfp4", "fp8_block128"])
def test_one_sided_passes_the_gate_with_quantized_payloads(dtype):
    pytest.importorskip("flashinfer")
    from bench.sweep import run_sweep

    (r,) = run_sweep(_spec(["flashinfer_nvlink_one_sided"], tokens=[64], dtype=dtype))
    assert r.status == "ok", r.error


def test_an_nvfp4_sized_one_sided_workspace_with_bf16_payload_is_never_ok(monkeypatch):
    """The seed's bug (vLLM PR #39717): the gate (or the kernel's own combine check) stops it."""
    import os
    from pathlib import Path

    pytest.importorskip("flashinfer")
    from bench.sweep import run_sweep

    plugins = str(Path(__file__).parent / "plugins")
    monkeypatch.syspath_prepend(plugins)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([plugins, os.environ.get("PYTHONPATH", "")]))
    (r,) = run_sweep(_spec(["test_one_sided_nvfp4_workspace"], tokens=[256]))
    assert r.status in ("incorrect", "error") and r.samples == 0, (r.status, r.error)
