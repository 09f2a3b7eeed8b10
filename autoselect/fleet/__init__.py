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

from autoselect.fleet.run import run_fleet
from autoselect.fleet.schedule import run_schedule
from autoselect.fleet.spec import FleetSpec, command_line, validate

__all__ = [
    "FleetSpec", "command_line", "run_fleet", "run_schedule", "validate",
]
