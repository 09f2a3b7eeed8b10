"""Fixture databases for the report tests, written through the real store (db.store.Store).

The latencies follow ``latency = a + bytes / bandwidth`` per backend with fixed constants, so
the curves cross where the constants say and every number in a test is predictable.
"""

from __future__ import annotations

from pathlib import Path

from support.paths import FIXTURES

from autoselect.hardware import GpuInfo, HostFingerprint
from autoselect.payload import combine_bytes_per_token, dispatch_bytes_per_token
from db.records import Result
from db.store import Store

MODELS = FIXTURES / "models"
#: Qwen3-30B-A3B: hidden 2048, 128 routed experts, top-8, bf16 activations on every arch.
QWEN = str(MODELS / "qwen3-30b-a3b")
HIDDEN, TOP_K, EXPERTS, DTYPE = 2048, 8, 128, "bf16"
BYTES_PER_TOKEN = dispatch_bytes_per_token(DTYPE, HIDDEN, TOP_K) + combine_bytes_per_token(HIDDEN)
TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)

#: backend -> (fixed cost a in µs, bandwidth in GB/s) of the synthetic latency model.
CURVES = {
    "allgather_reducescatter": (30.0, 60.0),
    "flashinfer_nvlink_two_sided": (12.0, 40.0),
    "deepep_high_throughput": (55.0, 150.0),
    "flashinfer_nvlink_one_sided": (8.0, 45.0),
    "reference_all_to_all": (900.0, 0.5),  # CPU-like: gloo between two processes
}


#: DeepSeek-R1 in NVFP4: hidden 7168, 256 experts, top-8; bf16 activations on Hopper, nvfp4 on
#: Blackwell. Its Hopper shape is one AIConfigurator published for DeepEP on 8 x H200.
DSR1_NVFP4 = str(MODELS / "deepseek-r1-nvfp4")
DSR1_SHAPE = (7168, 8, 256, "bf16")


def bytes_per_token(shape=(HIDDEN, TOP_K, EXPERTS, DTYPE)) -> int:
    """Dispatch + combine bytes one token moves for a (hidden, top_k, experts, dtype) shape."""
    hidden, top_k, _, dtype = shape
    return dispatch_bytes_per_token(dtype, hidden, top_k) + combine_bytes_per_token(hidden)


def latency_us(backend: str, tokens: int, shape=(HIDDEN, TOP_K, EXPERTS, DTYPE)) -> float:
    """The fixture's p50 round-trip latency of a backend at a token count per rank."""
    a, gbps = CURVES[backend]
    return a + tokens * bytes_per_token(shape) / (gbps * 1e3)


def gpu_host(machine_id: str = "m-node-00", hostname: str = "node-00", host_class: str = "h200x8-test",
             nvlink_peak_gbps: float | None = 450.0, gpu_name: str = "NVIDIA H200") -> HostFingerprint:
    """An 8 x H200 NVLink host (all links up, 450 GB/s per GPU per direction, FlashInfer and DeepEP
    installed): the GPUs of the reference system h200_sxm unless ``gpu_name`` says otherwise."""
    gpus = [GpuInfo(i, gpu_name, f"GPU-{machine_id}-{i}", 143771, "sm90", "9.0", 18, 18) for i in range(8)]
    return HostFingerprint(
        hostname=hostname, machine_id=machine_id, host_class=host_class, device="cuda",
        gpu_name=gpu_name, gpu_count=8, gpu_arch="sm90", gpus=gpus,
        nvlink_matrix=[[0 if i == j else 18 for j in range(8)] for i in range(8)], all_nvlinks_up=True,
        nvlink_peak_gbps=nvlink_peak_gbps, driver_version="580.95.05", cuda_version="13.0",
        versions={"torch": "2.11.0+cu130", "nccl": "2.28.9", "flashinfer": "0.7.2.post1", "deep_ep": "1.2.1",
                  "vllm": "0.33.0"},
    )


def cpu_host() -> HostFingerprint:
    """A CPU-only host: no GPU arch, no NVLink peak."""
    return HostFingerprint(
        hostname="laptop", machine_id="m-cpu", host_class="cpu-test-x2", device="cpu",
        gpu_name=None, gpu_count=0, gpu_arch=None, versions={"torch": "2.13.0"}, cpu_model="test cpu",
    )


def timed(backend: str, tokens: int, *, world_size: int = 8, scale: float = 1.0, device: str = "cuda",
          illegal: bool = False, shape=(HIDDEN, TOP_K, EXPERTS, DTYPE)) -> Result:
    """A timed (status ok) result on the fixture's curve, ``scale`` times slower."""
    p50 = latency_us(backend, tokens, shape) * scale
    nbytes = tokens * bytes_per_token(shape)
    hidden, top_k, experts, dtype = shape
    return Result(
        backend=backend, world_size=world_size, tokens_per_rank=tokens, hidden=hidden, top_k=top_k,
        experts=experts, activation_dtype=dtype, device=device, illegal=illegal, samples=50,
        latency_us_p50=p50, latency_us_mean=p50 * 1.01, latency_us_min=p50 * 0.95,
        latency_us_p10=p50 * 0.97, latency_us_p90=p50 * 1.05, latency_us_p99=p50 * 1.2,
        latency_stdrel=0.02, noise_stdrel=0.003, noise_target_met=True,
        dispatch_us_p50=p50 * 0.45, combine_us_p50=p50 * 0.55, bytes_per_rank=nbytes,
        algbw_gbps=nbytes / (p50 * 1e-6) / 1e9, busbw_gbps=nbytes / (p50 * 1e-6) / 1e9 * 7 / 8,
    )


def failed(backend: str, tokens: int, status: str, error: str, *, world_size: int = 8) -> Result:
    """A result that was not timed (incorrect, unavailable, error, timeout)."""
    return Result(
        backend=backend, world_size=world_size, tokens_per_rank=tokens, hidden=HIDDEN, top_k=TOP_K,
        experts=EXPERTS, activation_dtype=DTYPE, status=status, error=error,
    )


def write_db(path, runs: list[tuple[HostFingerprint, list[Result]]]) -> Path:
    """Write one complete run per (host, results) pair through the store; returns the path."""
    with Store(path) as store:
        for host, results in runs:
            run = store.begin_run(host, command="pytest fixture")
            for r in results:
                store.add_result(run, r)
            store.finish_run(run)
    return Path(path)


#: the token counts the README's Quick start measures
QUICK_START_TOKENS = (1, 16, 256)
#: why a GPU backend is unavailable on CPU (bench's words)
CPU_UNAVAILABLE = {
    "flashinfer_nvlink_two_sided": "needs CUDA GPUs (FlashInfer NVLink kernels); this run is on CPU",
    "deepep_high_throughput": "needs CUDA GPUs (DeepEP kernels); this run is on CPU",
    "deepep_low_latency": "needs CUDA GPUs (DeepEP kernels); this run is on CPU",
}


def cpu_quick_start_sweep() -> list[Result]:
    """What the Quick start's `bench --device cpu --world-size 2 --tokens 1,16,256` stores: vLLM's
    default and the reference all2all timed over gloo, the GPU backends unavailable (never run)."""
    rows = [timed(b, t, world_size=2, device="cpu", scale=30.0)
            for b in ("allgather_reducescatter", "reference_all_to_all") for t in QUICK_START_TOKENS]
    rows += [failed(b, t, "unavailable", why, world_size=2) for b, why in CPU_UNAVAILABLE.items()
             for t in QUICK_START_TOKENS]
    return rows


def full_sweep(**kw) -> list[Result]:
    """The main fixture: three legal backends timed at every token count, one-sided measured
    with --include-illegal (bf16 activations), DeepEP low-latency incorrect, NIXL unavailable."""
    rows = [timed(b, t, **kw) for b in ("allgather_reducescatter", "flashinfer_nvlink_two_sided",
                                        "deepep_high_throughput") for t in TOKENS]
    rows += [timed("flashinfer_nvlink_one_sided", t, illegal=True, **kw) for t in TOKENS]
    rows += [failed("deepep_low_latency", t, "incorrect", f"rank 3: token {t - 1} byte 17 differs")
             for t in TOKENS[:4]]
    rows += [failed("nixl_ep", 1, "unavailable", "nixl_ep not installed")]
    return rows
