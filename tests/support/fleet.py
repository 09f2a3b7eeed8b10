"""Fleet fixtures: a store holding three fleet runs over four identical H200 nodes.

The scenario (deterministic; every number below is what the drift tests rely on):

* host class ``h200x8-fleet``, nodes ``gpu-a`` .. ``gpu-d``, DeepSeek-V3 shape
  (hidden 7168, top-8, 256 experts, fp8_block128 dispatch), world size 8, decode grid 1..256;
* backends ``allgather_reducescatter`` (the default) and ``flashinfer_nvlink_two_sided``;
  latency = a + bytes / bandwidth with a +-2 % deterministic wobble per node, run and point,
  and a stored noise (standard error of the median) of 1 %;
* fleet runs ``f1`` and ``f2``: two-sided is 15 % slower than the default -> the pick is the default;
* fleet run ``f3`` (flashinfer 0.7.2.post1 -> 0.7.3): two-sided became twice as fast on every node
  -> the pick changes to two-sided; and node ``gpu-c`` is 30 % slower on everything (a planted slow
  node, e.g. a degraded NVLink).
"""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

from support.paths import FIXTURES

from autoselect.hardware import GpuInfo, HostFingerprint
from autoselect.payload import combine_bytes_per_token, dispatch_bytes_per_token
from db.records import Result
from db.store import Store

MODELS = FIXTURES / "models"
DEEPSEEK_V3 = str(MODELS / "deepseek-v3")
HOST_CLASS = "h200x8-fleet"
NODES = ("gpu-a", "gpu-b", "gpu-c", "gpu-d")
SLOW_NODE = "gpu-c"
SLOWDOWN = 1.30
SHAPE = (7168, 8, 256, "fp8_block128")  # hidden, top_k, experts, dispatch dtype
WORLD = 8
TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
#: (a_us, bandwidth GB/s) per backend before the upgrade
MODEL = {"allgather_reducescatter": (30.0, 60.0), "flashinfer_nvlink_two_sided": (34.5, 52.0)}
VERSIONS_OLD = {"torch": "2.11.0+cu130", "nccl": "2.28.9", "flashinfer": "0.7.2.post1", "vllm": "0.33.0",
                "driver": "580.95.05", "cuda": "13.0"}
VERSIONS_NEW = dict(VERSIONS_OLD, flashinfer="0.7.3")


def h200_host(hostname: str, host_class: str = HOST_CLASS, versions: dict = VERSIONS_OLD) -> HostFingerprint:
    """An 8 x H200 NVSwitch node fingerprint (all 18 NVLinks per GPU up) with these software versions."""
    gpus = [GpuInfo(index=i, name="NVIDIA H200", uuid=f"GPU-{hostname}-{i}", memory_total_mib=143771,
                    sm_arch="sm90", compute_capability="9.0", nvlinks_up=18, nvlinks_total=18)
            for i in range(8)]
    return HostFingerprint(
        hostname=hostname, machine_id=hashlib.sha256(hostname.encode()).hexdigest()[:32],
        host_class=host_class, device="cuda", gpu_name="NVIDIA H200", gpu_count=8, gpu_arch="sm90",
        gpus=gpus, nvlink_matrix=[[0 if i == j else 18 for j in range(8)] for i in range(8)],
        all_nvlinks_up=True, nvlink_peak_gbps=450.0, driver_version="580.95.05", cuda_version="13.0",
        versions={k: v for k, v in versions.items() if k not in ("driver", "cuda")},
    )


def latency_us(backend: str, tokens: int, fleet_run: str, node: str, slow_node: str | None = SLOW_NODE) -> float:
    """The modelled median round trip of one point (before the wobble)."""
    hidden, top_k, _, dtype = SHAPE
    nbytes = tokens * (dispatch_bytes_per_token(dtype, hidden, top_k) + combine_bytes_per_token(hidden))
    a, bw = MODEL[backend]
    t = a + nbytes / (bw * 1e3)  # GB/s -> bytes per µs
    if fleet_run == "f3" and backend == "flashinfer_nvlink_two_sided":
        t *= 0.5
    if fleet_run == "f3" and node == slow_node:
        t *= SLOWDOWN
    return t


def build_fleet_db(path: Path, *, fleet_runs=("f1", "f2", "f3"), slow_node: str | None = SLOW_NODE) -> Path:
    """Write the scenario above into a new store at ``path``; returns ``path``."""
    with Store(path) as store:
        for f in fleet_runs:
            versions = VERSIONS_NEW if f == "f3" else VERSIONS_OLD
            for node in NODES:
                run = store.begin_run(h200_host(node, versions=versions), trigger="schedule", command="autoselect fleet run",
                                      meta={"fleet_run": f, "models": [DEEPSEEK_V3]})
                rng = random.Random(f"{f}/{node}")
                for backend in MODEL:
                    for t in TOKENS:
                        p50 = latency_us(backend, t, f, node, slow_node) * (1 + rng.uniform(-0.02, 0.02))
                        store.add_result(run, _result(backend, t, p50, versions))
                store.finish_run(run)
    return path


def _result(backend: str, tokens: int, p50: float, versions: dict) -> Result:
    hidden, top_k, experts, dtype = SHAPE
    return Result(
        backend=backend, world_size=WORLD, tokens_per_rank=tokens, hidden=hidden, top_k=top_k,
        experts=experts, activation_dtype=dtype, device="cuda", samples=200, latency_us_p50=p50,
        latency_us_mean=p50 * 1.01, latency_us_min=p50 * 0.97, latency_us_p10=p50 * 0.98,
        latency_us_p90=p50 * 1.03, latency_us_p99=p50 * 1.06, latency_stdrel=0.04, noise_stdrel=0.01,
        noise_target_met=False, versions=dict(versions),
    )
