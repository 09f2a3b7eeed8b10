"""What a fleet run measures, where and how: :class:`FleetSpec`, its validation, the shapes each
node measures (:class:`FleetShape`) and the settings each node task receives (:class:`NodeSettings`).

Everything here is checked on the driver before Ray is reached or the database is opened, so a
mistake is one :class:`~autoselect.errors.UserError` and nothing is written.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from autoselect.errors import MissingShape, UserError
from autoselect.model import DenseModel, load_profile
from autoselect.options import FLEET_TOKENS, SETUP_TIMEOUT_S
from autoselect.stopping import STOPPING, StoppingRule
from autoselect.workload import Shape
from bench.backends import check_names
from bench.sweep import SweepSpec

#: --only-idle: a GPU above either fraction is busy (serving traffic is never disturbed)
BUSY_THRESHOLDS = {"utilization": 0.10, "memory_used": 0.10}


class BadFleetOption(UserError):
    "A fleet option that cannot work (node count, retries, budget, thresholds)."


@dataclass
class FleetSpec:
    """A fleet run: where, on how many nodes, which shapes, how long, what to do on failure.

    ``models`` are resolved on the driver (config files only); each node picks the activation
    dtype for its own GPU arch (a CPU node uses the ``cpu_arch`` dtype). ``shapes`` are explicit
    :class:`autoselect.workload.Shape` s (one dtype on every arch). ``budget_s`` bounds each node's measuring time:
    no new backend is started after it (the first one always runs). ``world_size`` defaults to ``gpus_per_node``.
    """

    address: str | None = None
    nodes: int | None = None
    gpus_per_node: int | None = None
    cpus_per_node: float = 1.0
    world_size: int | None = None
    device: str = "cuda"
    models: list[str] = field(default_factory=list)
    shapes: list[Shape] = field(default_factory=list)
    tokens: list[int] = field(default_factory=lambda: list(FLEET_TOKENS))
    backends: list[str] | None = None
    budget_s: float | None = None
    retries: int = 1
    only_idle: bool = False
    busy_utilization: float = BUSY_THRESHOLDS["utilization"]
    busy_memory: float = BUSY_THRESHOLDS["memory_used"]
    max_noise: float = STOPPING.max_noise
    min_samples: int = STOPPING.min_samples
    min_time_s: float = STOPPING.min_time_s
    timeout_s: float = STOPPING.timeout_s
    setup_timeout_s: float = SETUP_TIMEOUT_S
    start_timeout_s: float = 120.0
    reschedule_wait_s: float = 10.0
    cpu_arch: str = "sm90"
    trigger: str = "manual"
    command: str | None = None

    def node_settings(self, world_size: int) -> "NodeSettings":
        """What every node task of this run receives, with the world size the cluster allows."""
        return NodeSettings(
            world_size=world_size, device=self.device, tokens=tuple(self.tokens),
            backends=tuple(self.backends) if self.backends is not None else None, budget_s=self.budget_s,
            max_noise=self.max_noise, min_samples=self.min_samples, min_time_s=self.min_time_s,
            timeout_s=self.timeout_s, setup_timeout_s=self.setup_timeout_s, cpu_arch=self.cpu_arch,
            busy_utilization=self.busy_utilization, busy_memory=self.busy_memory)


@dataclass(frozen=True)
class FleetShape:
    """One MoE layer shape a fleet run measures, with the activation dtype per GPU arch.

    ``model`` names it in the run (the model as given, or ``shape:HxEXPERTSxTOPK:DTYPE`` for an
    explicit shape); ``activation_dtypes`` is ``((arch, dtype), ...)`` from the model's profile.
    """

    model: str
    hidden: int
    top_k: int
    experts: int
    activation_dtypes: tuple[tuple[str, str], ...]

    def activation_dtype(self, arch: str) -> str:
        """The activation dtype a node of ``arch`` dispatches (KeyError for an arch the profile lacks)."""
        return dict(self.activation_dtypes)[arch]


@dataclass(frozen=True)
class NodeSettings:
    """What a node task needs from the spec (sent to every node; frozen, pickled by Ray)."""

    world_size: int
    device: str
    tokens: tuple[int, ...]
    backends: tuple[str, ...] | None
    budget_s: float | None
    max_noise: float
    min_samples: int
    min_time_s: float
    timeout_s: float
    setup_timeout_s: float
    cpu_arch: str
    busy_utilization: float
    busy_memory: float

    def sweep(self, shape: FleetShape, backend: str, *, arch: str, gpu_arch: str | None) -> SweepSpec:
        """The harness sweep of one backend at ``shape`` on a node of ``arch`` (its GPU arch, or ``cpu_arch``)."""
        return SweepSpec(
            backends=[backend], tokens=list(self.tokens), hidden=shape.hidden, top_k=shape.top_k,
            experts=shape.experts, activation_dtype=shape.activation_dtype(arch), world_size=self.world_size, device=self.device,
            max_noise=self.max_noise, min_samples=self.min_samples, min_time_s=self.min_time_s,
            timeout_s=self.timeout_s, setup_timeout_s=self.setup_timeout_s, gpu_arch=gpu_arch,
        )


def validate(spec: FleetSpec) -> list[FleetShape]:
    """Check every option and resolve the shapes to measure; raise :class:`UserError`, touch nothing."""
    check_options(spec)
    return resolve_shapes(spec)


def check_options(spec: FleetSpec) -> None:
    """Raise :class:`BadFleetOption` (or the stopping rule's / backends' error) for an option that cannot work."""
    if spec.nodes is not None and spec.nodes < 1:
        raise BadFleetOption(f"--nodes must be at least 1, got {spec.nodes}")
    if spec.gpus_per_node is not None and spec.gpus_per_node < 0:
        raise BadFleetOption(f"--gpus-per-node must be 0 or more, got {spec.gpus_per_node}")
    if spec.device == "cuda" and spec.gpus_per_node == 0:
        raise BadFleetOption("--device cuda with --gpus-per-node 0 has no GPU to measure; pass --device cpu")
    if spec.device not in ("cpu", "cuda"):
        raise BadFleetOption(f"unknown device {spec.device!r}; use cuda or cpu")
    if spec.world_size is not None and spec.world_size < 2:
        raise BadFleetOption(f"--world-size must be at least 2 (an all2all needs peers), got {spec.world_size}")
    if spec.cpus_per_node <= 0:
        raise BadFleetOption(f"--cpus-per-node must be positive, got {spec.cpus_per_node}")
    if spec.retries < 0:
        raise BadFleetOption(f"--retries must be 0 or more, got {spec.retries}")
    if spec.budget_s is not None and spec.budget_s <= 0:
        raise BadFleetOption(f"--budget must be a positive duration, got {spec.budget_s}s")
    for name, value in (("--busy-utilization", spec.busy_utilization), ("--busy-memory", spec.busy_memory)):
        if not 0 <= value <= 1:
            raise BadFleetOption(f"{name} must be a fraction between 0 and 1, got {value}")
    if not spec.tokens or any(t < 1 for t in spec.tokens):
        raise BadFleetOption(f"--tokens must be positive integers, got {spec.tokens}")
    StoppingRule(spec.max_noise, spec.min_samples, spec.min_time_s, spec.timeout_s).validate()
    if spec.backends is not None:
        check_names(spec.backends)


def resolve_shapes(spec: FleetSpec) -> list[FleetShape]:
    """The models' shapes (their config files read here, on the driver), then the explicit shapes."""
    if not spec.models and not spec.shapes:
        raise MissingShape("nothing to measure; pass --model NAME (repeatable) or --hidden/--top-k/--experts/--dtype")
    out = []
    for model in spec.models:
        p = load_profile(model)
        if p.num_experts <= 0:
            raise DenseModel(f"{model} has no routed experts: a dense model has no MoE all2all to measure")
        out.append(FleetShape(model=model, hidden=p.hidden_size, top_k=p.top_k, experts=p.num_experts,
                              activation_dtypes=tuple(dict(p.activation_dtypes).items())))
    for shape in spec.shapes:
        p = shape.profile()
        out.append(FleetShape(model=p.model, hidden=shape.hidden, top_k=shape.top_k, experts=shape.experts,
                              activation_dtypes=tuple(dict(p.activation_dtypes).items())))
    return out


def command_line(argv: list[str]) -> str:
    """The command as recorded in ``runs.command``."""
    return " ".join(shlex.quote(a) for a in argv)
