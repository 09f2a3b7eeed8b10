"""The records the store takes and returns: plain dataclasses, one per table row.

These are the contract between the benchmark (which produces :class:`Result`), the store
(which writes and reads them) and the selector / tuner / fleet / report (which read them).
Units are in the field names; fractions, not percents.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from autoselect.dataclass_methods import DataclassMethods

#: Result statuses. Only ``ok`` rows are timed; ``incorrect`` means the correctness gate
#: failed (the first mismatch is in ``error``) and disqualifies the backend for that shape.
STATUSES = ("ok", "incorrect", "unavailable", "error", "timeout")

#: Run statuses: a run that died before ``finish_run`` is found ``running`` on next open
#: (its writer process gone) and marked ``interrupted``.
RUN_STATUSES = ("running", "complete", "interrupted", "failed")

#: Measurement kinds: ``micro`` = autoselect's own all2all microbenchmark;
#: ``e2e`` = ``vllm bench`` end-to-end confirmation (``autoselect confirm``).
KINDS = ("micro", "e2e")

#: The key of a run's ``meta`` that marks its results as **synthetic**: made up, not measured on
#: any machine (the shipped example data, ``tests/fixtures/results/make_results.py``). Its value
#: says what made them. It travels with the run through export, import and merge (``meta`` is part
#: of every run record), and every reader shows it beside each number the run gave
#: (:class:`db.queries.StoredResult` ``synthetic``; ``recommend``'s evidence kind ``synthetic``).
SYNTHETIC = "synthetic"

#: The footing of a measured point: what it includes, so that only numbers on one footing are
#: compared. ``timing``: how it was timed (``graph``: CUDA-graph replay, ``eager``: CUDA events
#: around launched round trips, ``cpu``: wall clock on gloo); ``calls``: for vLLM's default and its
#: variant, vLLM's separate calls per tensor (``grouped``: one NCCL group on CUDA, in sequence on
#: gloo) or all of them packed in one collective (``fused``), None for a backend whose kernels move
#: the payload themselves; ``dp_sizes``: vLLM's call path for equal token counts per DP rank
#: (padded, as under a CUDA graph) or unequal ones (eager steps); ``via``: the benchmark's adapter
#: or vLLM's own prepare / finalize objects (``bench --via vllm``).
TIMINGS = ("graph", "eager", "cpu")
GROUPED, FUSED = "grouped", "fused"
CALLS = (GROUPED, FUSED)
EQUAL, UNEQUAL = "equal", "unequal"
DP_SIZES = (EQUAL, UNEQUAL)
ADAPTER, VLLM = "adapter", "vllm"
VIAS = (ADAPTER, VLLM)

#: ``tuned_configs.status`` values; only ``gain`` rows are shown by ``recommend``.
TUNED_STATUSES = ("gain", "no_gain", "no_legal_knobs", "budget", "not_searched")


@dataclass(repr=False, eq=False)  # DataclassMethods: the same methods, not compiled per class
class Result(DataclassMethods):
    """One measured point: one backend, one shape, one token count per rank."""

    backend: str
    world_size: int
    tokens_per_rank: int
    hidden: int
    top_k: int
    experts: int
    activation_dtype: str  # the model's, which the point is filed under (docs/terms.md)
    # what the payload carried (autoselect.rules.wire); None: not recorded (older rows, e2e rows)
    wire_dtype: str | None = None
    combine_dtype: str = "bf16"
    routing: str = "uniform"
    status: str = "ok"
    error: str | None = None
    kind: str = "micro"
    device: str = "cuda"  # "cuda" or "cpu"
    illegal: bool = False  # measured with --include-illegal: never a candidate
    knobs: dict[str, Any] = field(default_factory=dict)  # tuned settings (env vars, flags)
    samples: int = 0
    latency_us_p50: float | None = None
    latency_us_mean: float | None = None
    latency_us_min: float | None = None
    latency_us_p10: float | None = None
    latency_us_p90: float | None = None
    latency_us_p99: float | None = None
    latency_stdrel: float | None = None  # relative standard deviation of the samples
    noise_stdrel: float | None = None  # relative standard error of the median estimate
    dispatch_us_p50: float | None = None
    combine_us_p50: float | None = None
    bytes_per_rank: int | None = None  # dispatch + combine bytes one rank moves per round trip
    algbw_gbps: float | None = None  # bytes_per_rank / round-trip time
    busbw_gbps: float | None = None  # algbw * (n-1)/n
    noise_target_met: bool | None = None
    timing: str | None = None  # TIMINGS; None: not timed (a failed point), or stored before it was recorded
    timing_note: str | None = None  # why an eager point was not replayed from a CUDA graph
    calls: str | None = None  # CALLS for vLLM's default and its fused variant; None for other backends
    dp_sizes: str = EQUAL  # DP_SIZES: the call path for equal or unequal token counts per DP rank
    via: str = ADAPTER  # VIAS: the benchmark's adapter, or vLLM's own prepare / finalize
    versions: dict[str, str] = field(default_factory=dict)  # torch, nccl, flashinfer, vllm, driver, cuda
    created_at: str | None = None  # ISO-8601 UTC, set by the store when absent
    raw_samples_us: list[float] = field(default_factory=list)  # stored in the samples table

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field."""
        return asdict(self)

    @property
    def footing(self) -> str:
        """The footing in a few words: ``graph grouped``, ``eager grouped unequal``, ``graph via-vllm``
        (``-`` for the timing of a point not timed)."""
        return footing_words(self.timing, self.calls, self.dp_sizes, self.via)


def footing_words(timing: str | None, calls: str | None, dp_sizes: str | None, via: str | None) -> str:
    """The footing fields in a few words, as tables print them (see :data:`TIMINGS`)."""
    words = [timing or "-"]
    if calls:
        words.append(calls)
    if dp_sizes == UNEQUAL:
        words.append("unequal")
    if via == VLLM:
        words.append("via-vllm")
    return " ".join(words)
