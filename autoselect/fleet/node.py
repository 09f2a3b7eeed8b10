"""One node of a fleet run, as the driver sees it: its probe, its attempts, its outcome.

A :class:`NodeRun` is one bundle of the placement group. Its probe (:mod:`autoselect.fleet.probe`)
says which node holds the bundle and whether it is busy; each :class:`Attempt` is one bench task
(:mod:`autoselect.fleet.task`) streaming into one run of the store; its :class:`NodeOutcome` is
what the report says. When a task fails or its node disappears, :class:`RetryPolicy` (data, read
from the spec) decides whether the node is run again: at most ``retries`` more attempts, each only
when the bundle is on a live node again within ``reschedule_wait_s`` (the same node after a task
error, or a spare node Ray moved the bundle to); otherwise the node is recorded failed (its node
is alive) or lost.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from autoselect.fleet.probe import Probe
from autoselect.fleet.spec import FleetSpec

#: the shortest wait for a retry's probe: a node the cluster has not noticed is gone never answers
MIN_PROBE_WAIT_S = 30.0


@dataclass(frozen=True)
class RetryPolicy:
    """When a failed node runs again: up to ``retries`` more attempts, each once its bundle is on a
    live node within ``reschedule_wait_s``, after a probe that answers within ``probe_timeout_s``."""

    retries: int = 1
    reschedule_wait_s: float = 10.0
    probe_timeout_s: float = MIN_PROBE_WAIT_S

    @classmethod
    def of(cls, spec: FleetSpec) -> "RetryPolicy":
        """The policy of ``spec`` (``--retries``, ``--reschedule-wait``)."""
        return cls(retries=spec.retries, reschedule_wait_s=spec.reschedule_wait_s,
                   probe_timeout_s=max(spec.reschedule_wait_s, MIN_PROBE_WAIT_S))

    def allows(self, attempts: int) -> bool:
        """Whether a node that failed after ``attempts`` attempts may run again."""
        return attempts <= self.retries


@dataclass
class NodeOutcome:
    """What happened on one bundle (node) of a fleet run, over all its attempts."""

    bundle: int
    status: str  # "running" until it ends; then "complete", "failed", "lost", "skipped"
    hostname: str | None = None
    machine_id: str | None = None
    ray_node_id: str | None = None
    attempts: int = 0
    results: int = 0
    run_ids: list[int] = field(default_factory=list)
    error: str | None = None
    budget_exhausted: bool = False

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return asdict(self)


@dataclass(frozen=True)
class Attempt:
    """One bench task of a node: the run it writes to, the host it records, the node it runs on."""

    number: int
    run_id: int
    host: dict
    ray_node_id: str

    @property
    def hostname(self) -> str:
        """The hostname its results are stored under."""
        return self.host["hostname"]


class NodeRun:
    """One bundle of a fleet run: probed once, then attempted until it completes or gives up."""

    def __init__(self, bundle: int, probe: Probe | None = None, *, probe_error: str | None = None):
        self.bundle = bundle
        self.probe = probe
        self.outcome = NodeOutcome(bundle=bundle, status="running")
        self.attempt: Attempt | None = None
        if probe is None:
            self.outcome.status, self.outcome.error = "failed", probe_error

    def begin(self, probe: Probe, host: dict, run_id: int) -> Attempt:
        """A new attempt on the node ``probe`` found, recorded as ``host`` in run ``run_id``."""
        o = self.outcome
        o.attempts += 1
        o.hostname, o.machine_id, o.ray_node_id = host["hostname"], host["machine_id"], probe.ray_node_id
        o.run_ids.append(run_id)
        self.attempt = Attempt(number=o.attempts, run_id=run_id, host=host, ray_node_id=probe.ray_node_id)
        return self.attempt

    def skip(self, host: dict) -> None:
        """The node is busy: nothing is measured on it."""
        o = self.outcome
        o.status, o.error = "skipped", "; ".join(self.probe.busy)
        o.hostname, o.machine_id, o.ray_node_id = host["hostname"], host["machine_id"], self.probe.ray_node_id

    def measured(self) -> None:
        """One more result stored."""
        self.outcome.results += 1

    def complete(self, budget_exhausted: bool) -> None:
        """The current attempt finished."""
        self.outcome.status, self.outcome.error = "complete", None
        self.outcome.budget_exhausted = budget_exhausted

    def failed(self, reason: str) -> None:
        """The current attempt failed for ``reason`` (a retry may follow)."""
        self.outcome.error = reason

    def give_up(self, *, node_alive: bool, error: str | None = None) -> None:
        """No further attempt: failed when its node is alive, lost when it is not."""
        self.outcome.status = "failed" if node_alive else "lost"
        if error is not None:
            self.outcome.error = error
