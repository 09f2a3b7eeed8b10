"""What the parent and a worker group say to each other: the group's start-up settings, a job, a point's outcome.

A group is started once with a :class:`GroupConfig` (everything that only takes effect when
the processes start: the backend, the ranks, the device, environment variables such as
``NCCL_PROTO``) and then fed :class:`Job` after job (points of one shape with one stopping
rule) as JSON lines on each worker's stdin. Workers answer with JSON events appended to
``rank<N>.jsonl`` in the group's directory (:data:`EVENTS`); the parent turns rank 0's
into :class:`PointDone` and :class:`bench.events.PointPhase`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from autoselect.options import SETUP_TIMEOUT_S
from db.records import ADAPTER, EQUAL

#: Worker events (the ``event`` key of each line), in the order a job produces them.
#: ``ready`` (rank, pid, unavailable: reason or None) once per group; then per job ``phase``
#: (job, tokens, phase: setup|gate|measure), ``result`` (job, tokens, status, error, fields,
#: timing, timing_note, seconds) or ``fresh`` (job, tokens, reason: the adapter cannot set
#: this point up in this process), ``job_done`` (job, seconds); ``error`` (rank, job, message,
#: harness) before a worker exits on an exception.
EVENTS = ("ready", "phase", "result", "fresh", "job_done", "error")

#: Status of a point the harness itself could not build or run (an allocation that failed, an
#: integer overflow). Not one of the store's result statuses: a sweep reports it and keeps it
#: in its run's meta (``harness_failures``), never as a result row, so it never counts
#: against the backend.
HARNESS_ERROR = "harness_error"


@dataclass(frozen=True)
class GroupConfig:
    """The start-up settings of one backend's worker group; a change of any but the timeout restarts it.

    ``env``: environment variables of the workers (knobs that take effect at process start,
    e.g. ``NCCL_PROTO``), as sorted ``(name, value)`` pairs. ``setup_timeout_s``: wall-clock
    limit of the start-up (spawn to ready) and of each point's adapter setup. ``vllm_version``:
    the vLLM release whose calls the adapters mirror (:data:`autoselect.rules.flashinfer.VLLM_CALLS`;
    None: the newest the rules know). ``gpu_arch``: the arch family whose CUDA-graph capture size
    vLLM uses (None on CPU). ``dp_sizes``: vLLM's default's call path for equal or unequal token
    counts per DP rank (``db.records.DP_SIZES``). ``via``: the benchmark's adapters, or vLLM's own
    prepare / finalize objects (``db.records.VIAS``).
    """

    backend: str
    world_size: int
    device: str = "cpu"
    env: tuple[tuple[str, str], ...] = ()
    setup_timeout_s: float = SETUP_TIMEOUT_S
    nvlinks_all_up: bool | None = None
    vllm_version: str | None = None
    gpu_arch: str | None = None
    dp_sizes: str = EQUAL
    via: str = ADAPTER

    @classmethod
    def make(cls, backend: str, world_size: int, device: str, env: dict | None = None, **kw) -> "GroupConfig":
        """A config with ``env`` given as a dict."""
        pairs = tuple(sorted((str(k), str(v)) for k, v in (env or {}).items()))
        return cls(backend, world_size, device, pairs, **kw)

    @property
    def env_dict(self) -> dict[str, str]:
        """``env`` as a dict."""
        return dict(self.env)

    def startup_key(self) -> tuple:
        """What the running processes depend on (everything but the timeout)."""
        return (self.backend, self.world_size, self.device, self.env, self.nvlinks_all_up, self.vllm_version,
                self.gpu_arch, self.dp_sizes, self.via)

    def differences(self, other: "GroupConfig") -> str:
        """Why ``other`` needs a fresh group: ``start-up knobs changed (NCCL_PROTO=LL -> unset)`` and the like."""
        parts = []
        if (self.world_size, self.device) != (other.world_size, other.device):
            parts.append(f"world size / device {self.world_size}/{self.device} -> {other.world_size}/{other.device}")
        if self.env != other.env:
            old, new = self.env_dict, other.env_dict
            changed = [f"{k}={old.get(k, 'unset')} -> {new.get(k, 'unset')}"
                       for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
            parts.append("start-up knobs changed (" + ", ".join(changed) + ")")
        if self.nvlinks_all_up != other.nvlinks_all_up:
            parts.append("NVLink state changed")
        if self.vllm_version != other.vllm_version:
            parts.append(f"target vLLM {self.vllm_version} -> {other.vllm_version}")
        if self.gpu_arch != other.gpu_arch:
            parts.append(f"GPU arch {self.gpu_arch} -> {other.gpu_arch}")
        if (self.dp_sizes, self.via) != (other.dp_sizes, other.via):
            parts.append(f"footing {self.dp_sizes} DP sizes via {self.via} -> {other.dp_sizes} via {other.via}")
        return "; ".join(parts) or "configuration changed"


@dataclass(frozen=True)
class Job:
    """Points of one shape with one stopping rule, run in order by a started group.

    ``tokens``: the tokens per rank of its points, repeats allowed (each copy is measured:
    independent runs of a point within one job).
    """

    tokens: tuple[int, ...]
    hidden: int
    top_k: int
    experts: int
    wire_dtype: str  # what the payload carries: the backend's wire dtype (autoselect.rules.wire)
    routing: str = "uniform"
    seed: int = 0
    max_noise: float = 0.005
    min_samples: int = 10
    min_time_s: float = 0.5
    timeout_s: float = 15.0

    def with_tokens(self, tokens) -> "Job":
        """The same job for other points (what is left after a restart)."""
        return replace(self, tokens=tuple(tokens))

    def to_dict(self) -> dict:
        """The JSON form a worker reads."""
        d = asdict(self)
        d["tokens"] = list(self.tokens)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Job":
        """Inverse of :meth:`to_dict`."""
        return cls(**{**d, "tokens": tuple(d["tokens"])})

    @property
    def rule(self) -> dict:
        """The stopping-rule arguments of :func:`bench.measure.run_point`."""
        return {"max_noise": self.max_noise, "min_samples": self.min_samples,
                "min_time_s": self.min_time_s, "timeout_s": self.timeout_s}


@dataclass(frozen=True)
class PointDone:
    """A point's outcome as the parent hands it to the sweep: measured, failed or left unmeasured.

    ``status``: ``ok``, ``incorrect``, ``unavailable``, ``error``, ``timeout`` or
    :data:`HARNESS_ERROR`; ``seconds``: the point's wall time in the group (setup, gate,
    timing), None when the group failed before it ran.
    """

    backend: str
    tokens_per_rank: int
    status: str
    error: str | None = None
    fields: dict = field(default_factory=dict)
    timing: str | None = None
    timing_note: str | None = None
    seconds: float | None = None


@dataclass(frozen=True)
class StartUp:
    """One start of a group: spawn to ready, in seconds, and why it was started."""

    seconds: float
    reason: str


@dataclass
class JobReport:
    """What one :meth:`bench.launch.WorkerGroup.run` call cost: wall time and the start-ups it paid."""

    backend: str
    points: int
    seconds: float
    startups: list[StartUp] = field(default_factory=list)
