"""Fleet runs on Ray: one benchmark task per node, results streamed to one writer.

:func:`run_fleet` is a few short steps over the objects of this package: validate the spec
(:mod:`~autoselect.fleet.spec`), connect to the cluster and size the run
(:class:`~autoselect.fleet.cluster.RayCluster`), reserve one bundle per node
(:class:`~autoselect.fleet.cluster.Placement`), probe each bundle's node (host fingerprint, GPU
load for ``--only-idle``: :mod:`~autoselect.fleet.probe`), then start one streaming bench task per
node (:mod:`~autoselect.fleet.task`) that runs the harness on that node's GPUs and yields every
:class:`db.records.Result` as it is measured. The driver is the single writer of the fleet
database: :class:`FleetRun` waits on all nodes' streams with ``ray.wait`` and writes each result in
its own transaction, under one run per node attempt (``runs.meta.fleet_run`` ties a fleet run's
node runs together; ``runs.trigger`` says what started it).

A node whose task fails or whose node disappears has its run closed ``failed`` with the reason in
``runs.meta.error``; its :class:`~autoselect.fleet.node.RetryPolicy` decides whether it runs again
(:mod:`~autoselect.fleet.node`), otherwise it is recorded failed or lost. The other nodes finish.
Node identity (machine ids scoped per Ray node where raylets share a machine) is
:mod:`~autoselect.fleet.identity`.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from autoselect.fleet.cluster import Placement, RayCluster
from autoselect.fleet.events import (FleetProgress, HarnessFailed, NodeDone, NodeEvent, NodeFailed, NodeResult,
                                     NodeSkipped, NodeStarted, Placed, ResultMeasured, TaskFinished)
from autoselect.fleet.identity import node_scoped_hosts, retry_host
from autoselect.fleet.node import NodeOutcome, NodeRun, RetryPolicy
from autoselect.fleet.probe import Probe, probe_node
from autoselect.fleet.spec import FleetShape, FleetSpec, NodeSettings, validate
from autoselect.fleet.task import bench_node
from db.errors import ReservedHostClass
from db.schema import check_path


@dataclass
class FleetReport:
    """``fleet run``'s answer."""

    fleet_run: str
    trigger: str
    db_path: str
    nodes: list[NodeOutcome]
    seconds: float

    @property
    def ok(self) -> bool:
        """True when no node failed or was lost (skipped busy nodes are fine)."""
        return all(n.status in ("complete", "skipped") for n in self.nodes)

    def to_dict(self) -> dict[str, Any]:
        """The JSON document of ``fleet run --format json``."""
        return {"schema_version": 1, "fleet_run": self.fleet_run, "trigger": self.trigger, "db": self.db_path,
                "ok": self.ok, "seconds": round(self.seconds, 3), "nodes": [n.to_dict() for n in self.nodes]}


def run_fleet(spec: FleetSpec, db_path=None, *,
              progress: Callable[[FleetProgress], None] | None = None) -> FleetReport:
    """Benchmark every node of the Ray cluster at ``spec.address``; write results to ``db_path``.

    Everything is validated, the cluster is reached and the placement group is scheduled before
    the database is opened. ``progress(event)`` receives the events of :mod:`autoselect.fleet.events`.
    """
    shapes = validate(spec)
    check_path(db_path)  # a garbage or newer --db fails here, not after the cluster was reached
    emit = progress or _ignore
    started = time.monotonic()
    with RayCluster(spec.address) as cluster:
        layout = cluster.layout(spec)
        with cluster.place(layout, timeout_s=spec.start_timeout_s) as placement:
            emit(Placed(nodes=layout.nodes, bundle=dict(layout.bundle)))
            tasks = NodeTasks(cluster, placement, spec.node_settings(layout.world_size))
            nodes = tasks.probe_all(timeout_s=spec.start_timeout_s)
            from db.store import Store  # heavy (sqlite_utils): only a run that reached the cluster pays for it

            with Store(db_path) as store:
                run = FleetRun(spec, shapes, tasks, store, nodes, emit=emit)
                run.run()
            return FleetReport(fleet_run=run.id, trigger=spec.trigger, db_path=str(store.path),
                               nodes=[n.outcome for n in nodes], seconds=time.monotonic() - started)


def _ignore(event: FleetProgress) -> None:
    pass


class NodeTasks:
    """The two remote tasks of a fleet run, the probe and the bench task, run in the bundles of its placement."""

    def __init__(self, cluster: RayCluster, placement: Placement, settings: NodeSettings):
        self.cluster = cluster
        self.placement = placement
        self.settings = settings
        self._probe = cluster.remote(probe_node)
        self._bench = cluster.remote(bench_node, num_returns="streaming")

    def probe(self, bundle: int):
        """Start the probe in ``bundle``; returns its object ref."""
        return self._probe.options(**self.placement.options(bundle)).remote(self.settings)

    def bench(self, bundle: int, shapes: list[FleetShape], host: dict):
        """Start the bench task in ``bundle``; returns its stream (a Ray object ref generator)."""
        return self._bench.options(**self.placement.options(bundle)).remote(self.settings, shapes, host)

    def probe_all(self, *, timeout_s: float) -> list[NodeRun]:
        """Probe every bundle at once; a probe that fails or does not answer in time fails its node."""
        refs = [self.probe(b) for b in range(self.placement.layout.nodes)]
        answered, _ = self.cluster.ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
        return [self._node(b, ref, ref in answered, timeout_s) for b, ref in enumerate(refs)]

    def _node(self, bundle: int, ref, answered: bool, timeout_s: float) -> NodeRun:
        try:
            if not answered:
                raise TimeoutError(f"no answer within {timeout_s:g}s")
            return NodeRun(bundle, self.cluster.ray.get(ref))
        except Exception as e:  # e.g. autoselect or torch not installed on that node
            self.cluster.ray.cancel(ref, force=True)
            return NodeRun(bundle, probe_error=f"probe failed: {self.cluster.failure_reason(e, None)[0]}")

    def reprobe(self, bundle: int, *, timeout_s: float) -> Probe:
        """Probe ``bundle`` again (before a retry); raises what the probe raised, or Ray's timeout."""
        ref = self.probe(bundle)
        try:
            return self.cluster.ray.get(ref, timeout=timeout_s)
        except Exception:
            self.cluster.ray.cancel(ref, force=True)
            raise


class FleetRun:
    """The driver's side of one fleet run: start each node, write what its stream yields, retry."""

    def __init__(self, spec: FleetSpec, shapes: list[FleetShape], tasks: NodeTasks, store, nodes: list[NodeRun],
                 *, emit: Callable[[FleetProgress], None]):
        self.id = uuid.uuid4().hex[:12]
        self.spec = spec
        self.shapes = shapes
        self.tasks = tasks
        self.ray = tasks.cluster.ray
        self.store = store
        self.nodes = nodes
        self.emit = emit
        self.policy = RetryPolicy.of(spec)
        self.meta = {"fleet_run": self.id, "models": list(spec.models), "tokens": list(spec.tokens),
                     "device": spec.device, "world_size": tasks.settings.world_size}
        self.live: dict[Any, NodeRun] = {}  # stream -> its node
        self.seen_machines: set[str] = set()

    def run(self) -> None:
        """Start every node, then write every stream's events until all have ended; on an
        interrupt (or any exception) the runs still streaming are closed ``interrupted``."""
        try:
            self.launch()
            while self.live:
                ready, _ = self.ray.wait(list(self.live), num_returns=1, timeout=1.0)
                for stream in ready:
                    self.advance(stream, self.live.pop(stream))
        except BaseException:
            for node in self.live.values():
                self.store.finish_run(node.attempt.run_id, "interrupted")
            raise

    def launch(self) -> None:
        """The first attempt on every node whose probe answered (busy ones skipped with ``--only-idle``)."""
        probed = [n for n in self.nodes if n.probe is not None]
        hosts = dict(zip((n.bundle for n in probed), node_scoped_hosts([n.probe for n in probed])))
        self.seen_machines = {n.probe.host["machine_id"] for n in probed}
        for node in self.nodes:
            if node.probe is None:
                self.emit(NodeFailed(bundle=node.bundle, hostname=None, error=node.outcome.error, retry=False))
            elif self.spec.only_idle and node.probe.busy:
                node.skip(hosts[node.bundle])
                self.emit(NodeSkipped(bundle=node.bundle, hostname=hosts[node.bundle]["hostname"],
                                      reasons=node.probe.busy))
            else:
                self.start(node, node.probe, hosts[node.bundle])

    def start(self, node: NodeRun, probe: Probe, host: dict) -> None:
        """Begin a run in the store for the node's next attempt and start its bench task; a node
        whose fingerprint the store refuses (a host class of the reserved ref- namespace) fails
        alone, nothing of it stored."""
        try:
            run_id = self.store.begin_run(host, trigger=self.spec.trigger, command=self.spec.command,
                                          meta={**self.meta, "bundle": node.bundle,
                                                "attempt": node.outcome.attempts + 1, "ray_node_id": probe.ray_node_id})
        except ReservedHostClass as e:
            node.give_up(node_alive=True, error=f"{host.get('hostname')}: {e}")
            self.emit(NodeFailed(bundle=node.bundle, hostname=host.get("hostname"), error=node.outcome.error,
                                 retry=False))
            return
        attempt = node.begin(probe, host, run_id)
        self.live[self.tasks.bench(node.bundle, self.shapes, host)] = node
        self.emit(NodeStarted(bundle=node.bundle, hostname=attempt.hostname, attempt=attempt.number,
                              ray_node_id=attempt.ray_node_id))

    def advance(self, stream, node: NodeRun) -> None:
        """Take the next event of a ready stream (it stays live unless it ended or failed)."""
        try:
            event = self.ray.get(next(stream))
        except StopIteration:
            return  # the TaskFinished event already closed the run
        except Exception as e:  # the task failed or its node is gone
            self.fail(node, e)
            return
        self.live[stream] = node
        self.record(node, event)

    def record(self, node: NodeRun, event: NodeEvent) -> None:
        """Write one event of the node's stream to the store."""
        attempt = node.attempt
        if isinstance(event, ResultMeasured):
            self.store.add_result(attempt.run_id, event.result)
            node.measured()
            self.emit(NodeResult(bundle=node.bundle, hostname=attempt.hostname, ray_node_id=attempt.ray_node_id,
                                 result=event.result))
        elif isinstance(event, HarnessFailed):
            r = event.result
            self.store.append_run_meta(attempt.run_id, "harness_failures", [
                {"backend": r.backend, "tokens_per_rank": r.tokens_per_rank, "error": r.error}])
        elif isinstance(event, TaskFinished):
            self.store.finish_run(attempt.run_id, "complete", meta={
                "budget_exhausted": event.budget_exhausted, "seconds": event.seconds, "startups": event.startups})
            node.complete(event.budget_exhausted)
            self.emit(NodeDone(bundle=node.bundle, hostname=attempt.hostname, results=node.outcome.results))

    def fail(self, node: NodeRun, exc: BaseException) -> None:
        """Close the failed attempt's run with the reason; retry when the policy and the cluster allow."""
        attempt = node.attempt
        reason, alive = self.tasks.cluster.failure_reason(exc, attempt.ray_node_id)
        self.store.finish_run(attempt.run_id, "failed", meta={"error": reason})
        node.failed(reason)
        rescheduled = (self.tasks.placement.node_of(node.bundle, self.policy.reschedule_wait_s)
                       if self.policy.allows(node.outcome.attempts) else None)
        self.emit(NodeFailed(bundle=node.bundle, hostname=attempt.hostname, error=reason,
                             retry=rescheduled is not None))
        if rescheduled is None:
            node.give_up(node_alive=alive)
        else:
            self.retry(node, reason)

    def retry(self, node: NodeRun, reason: str) -> None:
        """Probe the bundle's node again and start the next attempt there (lost when the probe fails)."""
        failed = node.attempt
        try:
            probe = self.tasks.reprobe(node.bundle, timeout_s=self.policy.probe_timeout_s)
        except Exception as e:  # a node the cluster has not noticed is gone yet never answers
            why = self.tasks.cluster.failure_reason(e, None)[0]
            node.give_up(node_alive=False, error=f"{reason}; the retry's probe failed: {why}")
            return
        host = retry_host(probe, failed_host=failed.host, failed_ray_node_id=failed.ray_node_id,
                          seen_machines=self.seen_machines)
        self.start(node, probe, host)
