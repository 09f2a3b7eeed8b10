"""The fleet: re-benchmark every node of a Ray cluster, watch it for drift, serve its answers.

The flow, one concern per module:

- :mod:`~autoselect.fleet.spec`: :class:`FleetSpec` (what to measure, where, how long), its
  validation into :class:`FleetShape` s, the :class:`NodeSettings` every node task receives;
- :mod:`~autoselect.fleet.cluster`: :class:`RayCluster` (connect / shut down as a context
  manager, size the run, place one bundle per node), its errors :class:`RayUnavailable`,
  :class:`NotEnoughNodes`, :class:`PlacementFailed`;
- :mod:`~autoselect.fleet.probe` and :mod:`~autoselect.fleet.task`: what runs on each node (the
  probe: fingerprint and GPU load; the bench task: the harness, streaming each result);
- :mod:`~autoselect.fleet.node`: one node as the driver sees it (:class:`NodeRun`, its
  attempts, :class:`NodeOutcome`, :class:`RetryPolicy`); :mod:`~autoselect.fleet.identity`:
  the machine id its results are stored under;
- :mod:`~autoselect.fleet.run`: :func:`run_fleet`, the driver, the one writer of the database;
- :mod:`~autoselect.fleet.events`: the typed progress and node-stream events;
- :mod:`~autoselect.fleet.schedule`: periodic runs in the foreground;
- :mod:`~autoselect.fleet.drift` (slow nodes, recommendation changes, ``fleet status``),
  :mod:`~autoselect.fleet.service` (``serve``, the read-only HTTP API),
  :mod:`~autoselect.fleet.deploy` (systemd / Kubernetes / Slurm templates).

Ray, FastAPI and uvicorn are imported where they are used, so importing this package is cheap.
"""

from autoselect.fleet import deploy, drift, service
from autoselect.fleet.cluster import (Layout, NotEnoughNodes, Placement, PlacementFailed, RayCluster, RayUnavailable,
                                      check_reachable)
from autoselect.fleet.drift import DriftReport, NodeDrift, NodeStatus, analyze, analyze_at, status_at
from autoselect.fleet.events import (FleetProgress, HarnessFailed, NodeDone, NodeEvent, NodeFailed, NodeResult,
                                     NodeSkipped, NodeStarted, Placed, ResultMeasured, TaskFinished)
from autoselect.fleet.identity import node_scoped_hosts, retry_host, scoped_host
from autoselect.fleet.node import Attempt, NodeOutcome, NodeRun, RetryPolicy
from autoselect.fleet.probe import Probe, busy_reasons, gpu_load, probe_node
from autoselect.fleet.run import FleetReport, FleetRun, NodeTasks, run_fleet
from autoselect.fleet.schedule import DATABASE_ERRORS, run_schedule, schedule_delays
from autoselect.fleet.service import create_app, serve
from autoselect.fleet.spec import (BUSY_THRESHOLDS, BadFleetOption, FleetShape, FleetSpec, NodeSettings,
                                   command_line, validate)
from autoselect.fleet.task import NodeTask, bench_node

__all__ = [
    "Attempt", "BUSY_THRESHOLDS", "BadFleetOption", "DATABASE_ERRORS", "DriftReport", "FleetProgress",
    "FleetReport", "FleetRun", "FleetShape", "FleetSpec", "HarnessFailed", "Layout", "NodeDone", "NodeDrift",
    "NodeEvent", "NodeFailed", "NodeOutcome", "NodeResult", "NodeRun", "NodeSettings", "NodeSkipped",
    "NodeStarted", "NodeStatus", "NodeTask", "NodeTasks", "NotEnoughNodes", "Placed", "Placement",
    "PlacementFailed", "Probe", "RayCluster", "RayUnavailable", "ResultMeasured", "RetryPolicy", "TaskFinished",
    "analyze", "analyze_at", "bench_node", "busy_reasons", "check_reachable", "command_line", "create_app", "deploy",
    "drift", "gpu_load", "node_scoped_hosts", "probe_node", "retry_host", "run_fleet", "run_schedule",
    "schedule_delays", "scoped_host", "serve", "service", "status_at", "validate",
]
