"""Process launch: one long-lived worker group per backend, fed job after job, isolated and timed.

- :mod:`~bench.launch.protocol`: the group's start-up settings (:class:`GroupConfig`), a
  :class:`Job`, a point's outcome (:class:`PointDone`), start-ups and job reports;
- :mod:`~bench.launch.worker`: one rank (:class:`WorkerSession`; ``python -m bench.launch``);
- :mod:`~bench.launch.group`: the parent's side of one group (:class:`WorkerGroup`: start,
  run a job, restart after a crash, a hang, a start-up knob change; close);
- :mod:`~bench.launch.pool`: one group per backend for a caller (:class:`WorkerGroups`);
- :mod:`~bench.launch.processes`: spawning, killing, the workers' environment, signals;
- :mod:`~bench.launch.timing_log`: ``$AUTOSELECT_BENCH_TIMING_LOG``.

Under ``torchrun`` (``RANK``/``WORLD_SIZE`` set) the sweep runs in the calling processes
instead (:func:`serve_in_process`): torchrun owns the processes.
"""

from bench.launch.pool import WorkerGroups
from bench.launch.processes import signals_raise, torchrun_rank, under_torchrun
from bench.launch.protocol import HARNESS_ERROR, GroupConfig, Job, PointDone
from bench.launch.worker import serve_in_process

__all__ = [
    "HARNESS_ERROR", "GroupConfig", "Job", "PointDone", "WorkerGroups", "serve_in_process", "signals_raise",
    "torchrun_rank", "under_torchrun",
]
