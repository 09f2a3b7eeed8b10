"""The events of a fleet run, as frozen dataclasses; a caller dispatches on the type.

**Progress** (``run_fleet(progress=...)``, in this order): :class:`Placed` once the placement group
is scheduled; per node :class:`NodeSkipped` (busy, ``--only-idle``) or :class:`NodeStarted` (each
attempt), :class:`NodeResult` per stored result, then :class:`NodeDone` or :class:`NodeFailed`
(``retry`` says whether another attempt follows; a node whose probe failed gets one too).

**Node stream** (what a node's bench task yields to the driver, over Ray): :class:`ResultMeasured`
per result, :class:`HarnessFailed` per point the harness itself could not build or run (no result
row: the run's meta keeps it), then :class:`TaskFinished`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from db.records import Result

# -- progress: what the driver tells its caller ----------------------------------------------------


@dataclass(frozen=True)
class Placed:
    """The placement group is scheduled: ``nodes`` bundles of ``bundle`` resources, one per node."""

    nodes: int
    bundle: dict


@dataclass(frozen=True)
class NodeSkipped:
    """A node is busy (``--only-idle``): nothing is measured or written for it."""

    bundle: int
    hostname: str
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class NodeStarted:
    """A node's bench task started (``attempt`` 1, or a retry)."""

    bundle: int
    hostname: str
    attempt: int
    ray_node_id: str


@dataclass(frozen=True)
class NodeResult:
    """A node measured a point, and the driver stored it."""

    bundle: int
    hostname: str
    ray_node_id: str
    result: Result


@dataclass(frozen=True)
class NodeFailed:
    """A node's probe or task failed (``hostname`` None when its probe never answered)."""

    bundle: int
    hostname: str | None
    error: str
    retry: bool


@dataclass(frozen=True)
class NodeDone:
    """A node's task finished: its run is complete with ``results`` results (over all attempts)."""

    bundle: int
    hostname: str
    results: int


FleetProgress = Union[Placed, NodeSkipped, NodeStarted, NodeResult, NodeFailed, NodeDone]

# -- node stream: what a node's bench task yields ---------------------------------------------------


@dataclass(frozen=True)
class ResultMeasured:
    """A point measured on the node (any status the harness stores: ok, incorrect, error, ...)."""

    result: Result


@dataclass(frozen=True)
class HarnessFailed:
    """A point the harness itself could not build or run (memory, overflow): not a result row."""

    result: Result


@dataclass(frozen=True)
class TaskFinished:
    """The node task ended: whether the budget stopped it, its seconds, its worker start-ups.

    ``startups``: ``{backend: [{"seconds", "reason"}, ...]}`` (stored in the run's meta as is).
    """

    budget_exhausted: bool
    seconds: float
    startups: dict


NodeEvent = Union[ResultMeasured, HarnessFailed, TaskFinished]
