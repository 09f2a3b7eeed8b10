"""Helpers for the results-store tests: fingerprints from the NVML fixtures and sample results."""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

from support.nvml import ReplayNvml, load

from autoselect.hardware import HostFingerprint, cpu_fingerprint, fingerprint
from db.records import Result
from db.store import Store


#: The software of a recorded GPU node: what :func:`autoselect.hardware.software_versions` would read
#: there (the torch and NCCL of :func:`make_result`'s rows, a FlashInfer its vLLM pins). A recorded
#: node's fingerprint carries these, never the packages of the machine running the tests: with the
#: live ones, an install without flashinfer judged the node's FlashInfer backends unavailable.
NODE_VERSIONS = {"torch": "2.11.0", "nccl": "2.28.9", "flashinfer": "0.6.6", "vllm": "0.19.1", "autoselect": "0.1.0"}


def hgx_host(machine: str = "node-a") -> HostFingerprint:
    """The HGX H200 8-GPU fingerprint, as if taken on the machine named ``machine``."""
    return _recorded("hgx_h200_8gpu", machine)


def single_h200_host(machine: str = "h200-vm") -> HostFingerprint:
    """The 1x H200 (no NVLink) fingerprint, as if taken on ``machine``."""
    return _recorded("h200_1gpu_no_nvlink", machine)


#: The software of a CPU machine as the README installs it (torch's CPU build; no FlashInfer, vLLM or
#: DeepEP), for the tests that answer for "this machine, without a GPU" whatever the test machine has.
CPU_VERSIONS = {"torch": "2.13.0+cpu", "autoselect": "0.1.0"}


def cpu_host() -> HostFingerprint:
    """This machine's CPU fingerprint with :data:`CPU_VERSIONS`, not the installed packages."""
    fp = cpu_fingerprint()
    fp.versions = dict(CPU_VERSIONS)
    return fp


def _recorded(nvml_fixture: str, machine: str) -> HostFingerprint:
    fp = fingerprint(ReplayNvml(load(nvml_fixture)))
    fp.hostname = machine
    fp.machine_id = hashlib.sha256(machine.encode()).hexdigest()[:32]
    fp.versions = dict(NODE_VERSIONS)
    return fp


def make_result(backend: str = "allgather_reducescatter", tokens: int = 64, **kw) -> Result:
    """A fully populated ok result for the DeepSeek-V3 shape (7168 / 256 / top-8, fp8 block)."""
    samples = kw.pop("raw_samples_us", [100.0 + tokens / 8 + i * 0.25 for i in range(12)])
    if not samples:  # an unmeasured point: no statistics at all
        return Result(backend=backend, world_size=kw.pop("world_size", 8), tokens_per_rank=tokens, hidden=7168,
                      top_k=8, experts=256, activation_dtype="fp8_block128", **kw)
    fields = dict(
        backend=backend, world_size=8, tokens_per_rank=tokens, hidden=7168, top_k=8, experts=256,
        activation_dtype="fp8_block128", combine_dtype="bf16", routing="uniform", status="ok",
        kind="micro", device="cuda", knobs={"NCCL_PROTO": "LL128"}, samples=len(samples),
        latency_us_p50=sorted(samples)[len(samples) // 2], latency_us_mean=sum(samples) / len(samples),
        latency_us_min=min(samples), latency_us_p10=samples[1], latency_us_p90=samples[-2],
        latency_us_p99=samples[-1], latency_stdrel=0.0123, noise_stdrel=0.0041,
        dispatch_us_p50=41.5, combine_us_p50=58.25, bytes_per_rank=tokens * 8 * 7424,
        algbw_gbps=123.456, busbw_gbps=108.024, noise_target_met=True,
        versions={"torch": "2.11.0", "nccl": "2.28.9", "driver": "570.133.20", "cuda": "12.8"},
        raw_samples_us=samples,
    )
    fields.update(kw)
    return Result(**fields)


def file_state(path: Path) -> tuple:
    """(sha256, mtime_ns, size) of a file plus the sidecar files next to it: to prove nothing changed."""
    data = path.read_bytes()
    st = path.stat()
    sidecars = sorted(p.name for p in path.parent.iterdir() if p.name.startswith(path.name) and p != path)
    return hashlib.sha256(data).hexdigest(), st.st_mtime_ns, st.st_size, sidecars


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    import subprocess

    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


__all__ = ["hgx_host", "single_h200_host", "make_result", "file_state", "dead_pid", "os"]


def filled_db(path: Path) -> Path:
    """A database with two machines (HGX H200 and 1x H200), three runs and six results."""
    with Store(path) as s:
        run = s.begin_run(hgx_host("node-a"), trigger="bench", command="autoselect bench", meta={"sweep": 1})
        s.add_result(run, make_result("allgather_reducescatter", 1))
        s.add_result(run, make_result("flashinfer_nvlink_two_sided", 1, knobs={}, latency_us_p99=None))
        s.add_result(run, make_result("deepep_low_latency", 1, status="unavailable", error="deep_ep not installed",
                                      raw_samples_us=[], versions={"torch": "2.11.0"}))
        s.finish_run(run)
        run = s.begin_run(single_h200_host("h200-vm"), trigger="fleet")
        s.add_result(run, make_result("allgather_reducescatter", 64, world_size=1))
        s.add_result(run, make_result("flashinfer_nvlink_one_sided", 64, world_size=1, status="incorrect",
                                      error="rank 0 token 3: byte 17 differs", illegal=True))
        s.finish_run(run, "failed")
        run = s.begin_run(hgx_host("node-b"), trigger="bench")
        s.add_result(run, make_result("allgather_reducescatter", 128, activation_dtype="nvfp4"))
        s.finish_run(run)
    return path
