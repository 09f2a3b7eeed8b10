"""DeepEP's low-latency kernels (vLLM ``deepep_low_latency``)."""

from __future__ import annotations

from bench.backends import Backend
from bench.backends._flashinfer import has_module


class DeepepLowLatency(Backend):
    """Based on DeepEP's ``low_latency_dispatch`` / ``low_latency_combine`` (batched per-expert layout, weights applied in combine).

    Not measured yet: its receive side is one slot per (token, local expert) and its combine
    applies the routing weights itself, while the harness's synthetic experts return one
    weighted row per received token. Until the harness grows a per-expert mode this adapter
    reports itself unavailable with that reason, so sweeps record it honestly.
    """

    name = "deepep_low_latency"

    def unavailable_reason(self, ctx):
        """Always a reason: no CUDA, no deep_ep, or the layout the harness cannot check yet."""
        if ctx.device != "cuda":
            return "needs CUDA GPUs (DeepEP kernels); this run is on CPU"
        if not has_module("deep_ep"):
            return "deep_ep not installed (build it from github.com/deepseek-ai/DeepEP; not a vLLM dependency)"
        return ("the per-expert (batched) layout of low-latency mode is not supported by the "
                "harness's correctness gate yet")
