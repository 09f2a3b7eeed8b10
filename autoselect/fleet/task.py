"""The bench task: what runs on each node (a Ray streaming task) to measure it.

:func:`bench_node` runs the harness (:func:`bench.sweep.run_sweep`) on the node's GPUs for every
shape and backend, and yields each result as it is measured (:mod:`autoselect.fleet.events`:
:class:`ResultMeasured`, :class:`HarnessFailed`, finally :class:`TaskFinished`). Each backend's
worker group is started once for all the node's shapes (:class:`bench.launch.WorkerGroups`) and
closed when the task ends. The sweeps run in a thread and hand results over a queue, so each one leaves
the node as soon as it exists. The node never opens the database: the driver is the one writer.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Iterator

from autoselect.fleet.events import HarnessFailed, NodeEvent, ResultMeasured, TaskFinished
from autoselect.fleet.spec import FleetShape, NodeSettings
from autoselect.hardware import HostFingerprint
from bench.backends import available
from bench.events import PointMeasured
from bench.launch import HARNESS_ERROR, WorkerGroups
from bench.sweep import SweepSpec, run_sweep

#: what the sweep thread puts on the queue last
_END = object()


def bench_node(settings: NodeSettings, shapes: list[FleetShape], host: dict) -> Iterator[NodeEvent]:
    """On a node: measure every shape with every backend; yield the events as they happen."""
    yield from NodeTask(settings, shapes, host).events()


class NodeTask:
    """One node's measuring: the sweeps in order, the budget, the worker groups' start-ups.

    ``budget_s`` is checked between sweeps: no new backend starts after it, the first always runs.
    """

    def __init__(self, settings: NodeSettings, shapes: list[FleetShape], host: dict):
        self.settings = settings
        self.shapes = shapes
        self.host = HostFingerprint.from_dict(host)
        self.arch = self.host.gpu_arch or settings.cpu_arch
        self.backends = list(settings.backends) if settings.backends else list(available())
        self.budget_exhausted = False
        self.startups: dict[str, list[dict]] = {}
        self._queue: queue.Queue = queue.Queue()
        self._started = 0.0

    def events(self) -> Iterator[NodeEvent]:
        """Run the sweeps in a thread; yield each event it queues, re-raise its exception."""
        self._started = time.monotonic()
        thread = threading.Thread(target=self._work, name="autoselect-fleet-sweep", daemon=True)
        thread.start()
        while (item := self._queue.get()) is not _END:
            if isinstance(item, BaseException):
                raise item
            yield item
        thread.join()
        yield TaskFinished(budget_exhausted=self.budget_exhausted,
                           seconds=round(time.monotonic() - self._started, 3), startups=self.startups)

    def sweeps(self) -> Iterator[SweepSpec]:
        """One sweep per (shape, backend), until the budget is spent."""
        first = True
        for shape in self.shapes:
            for backend in self.backends:
                if not first and self._over_budget():
                    self.budget_exhausted = True
                    return
                first = False
                yield self.settings.sweep(shape, backend, arch=self.arch, gpu_arch=self.host.gpu_arch)

    def _over_budget(self) -> bool:
        budget = self.settings.budget_s
        return budget is not None and time.monotonic() - self._started > budget

    def _work(self) -> None:
        """The sweep thread: every exception goes to the driver, which records it as the reason."""
        try:
            with WorkerGroups() as groups:
                self._measure(groups)
        except BaseException as e:
            self._queue.put(e)
        finally:
            self._queue.put(_END)

    def _measure(self, groups: WorkerGroups) -> None:
        try:
            for sweep in self.sweeps():
                run_sweep(sweep, host=self.host, groups=groups, progress=self._forward)
        finally:
            self.startups = groups.startups()

    def _forward(self, event) -> None:
        if isinstance(event, PointMeasured):  # a harness failure is no result row: the run's meta keeps it
            kind = HarnessFailed if event.result.status == HARNESS_ERROR else ResultMeasured
            self._queue.put(kind(event.result))
