"""Fleet runs on Ray: one benchmark task per node, results streamed to one writer.

``run_fleet`` reserves a Ray placement group with one bundle per node (``STRICT_SPREAD``: every
bundle on a distinct node, each holding all of that node's GPUs, ``{"GPU": g, "CPU": c}``),
probes each bundle's node (host fingerprint, GPU load for ``--only-idle``), then starts one
streaming task per node that runs the harness (:func:`bench.sweep.run_sweep`) on that node's
GPUs and yields every :class:`db.records.Result` as it is measured. The driver is the single
writer of the fleet database: it waits on all nodes' streams with ``ray.wait`` and writes each
result in its own transaction, under one run per node (``runs.meta.fleet_run`` ties a fleet
run's node runs together; ``runs.trigger`` says what started it).

A node whose task fails or whose node disappears has its run closed ``failed`` with the reason
in ``runs.meta.error``; it is retried (``--retries``) when its bundle is on a live node again
within ``reschedule_wait_s`` (the same node after a task error, or a spare node Ray moved the
bundle to), otherwise recorded as lost. The other nodes finish.

**Node identity.** Results are keyed by the node's ``machine_id`` (a hash of
``/etc/machine-id``), stable across runs. When several Ray nodes of one fleet run report the
same machine id (several raylets on one machine, as in a test cluster), each gets a
node-scoped id: ``sha256(machine_id + ":" + ray_node_id)`` and hostname ``host/<node id[:8]>``.
Those ids change whenever the raylet restarts, so history only accumulates on real
one-raylet-per-machine clusters.
"""

from __future__ import annotations

import hashlib
import queue
import random
import re
import shlex
import socket
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from autoselect.errors import MissingShape, UserError
from autoselect.hardware import HostFingerprint, fingerprint
from autoselect.model import DenseModel, load_profile
from autoselect.options import FLEET_TOKENS, STOPPING, BadDuration, StoppingRule
from autoselect.workload import Shape
from bench.backends import available, check_names
from bench.events import PointMeasured
from bench.launch import HARNESS_ERROR, WorkerGroups
from bench.sweep import SweepSpec, run_sweep
from db.errors import (DatabaseDamaged, DatabaseNeedsUpgrade, DatabaseNotWritable, DatabaseTooNew, ForeignDatabase,
                       NotADatabase)
from db.records import Result
from db.schema import check_path

#: --only-idle: a GPU above either fraction is busy (serving traffic is never disturbed)
BUSY_THRESHOLDS = {"utilization": 0.10, "memory_used": 0.10}


class BadFleetOption(UserError):
    "A fleet option that cannot work (node count, retries, budget, thresholds)."


class RayUnavailable(UserError):
    "Ray is not installed or the cluster cannot be reached."


class NotEnoughNodes(UserError):
    "The cluster has fewer alive nodes with the requested GPUs than --nodes asks for."


class PlacementFailed(UserError):
    "The placement group could not be scheduled in time."


# -- what to measure ------------------------------------------------------------------------------


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
    setup_timeout_s: float = 300.0
    start_timeout_s: float = 120.0
    reschedule_wait_s: float = 10.0
    cpu_arch: str = "sm90"
    trigger: str = "manual"
    command: str | None = None


def validate(spec: FleetSpec) -> list[dict]:
    """Check every option and resolve the workloads; raise :class:`UserError`, touch nothing.

    Returns the workloads: ``{"model", "hidden", "top_k", "experts", "dtypes": {arch: dtype}}``.
    """
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
    if not spec.models and not spec.shapes:
        raise MissingShape("nothing to measure; pass --model NAME (repeatable) or --hidden/--top-k/--experts/--dtype")
    workloads = []
    for model in spec.models:
        p = load_profile(model)
        if p.num_experts <= 0:
            raise DenseModel(f"{model} has no routed experts: a dense model has no MoE all2all to measure")
        workloads.append({"model": model, "hidden": p.hidden_size, "top_k": p.top_k, "experts": p.num_experts,
                          "dtypes": dict(p.activation_dtypes)})
    for shape in spec.shapes:
        p = shape.profile()
        workloads.append({"model": p.model, "hidden": shape.hidden, "top_k": shape.top_k, "experts": shape.experts,
                          "dtypes": dict(p.activation_dtypes)})
    return workloads


# -- busy GPUs (--only-idle) ------------------------------------------------------------------------


def busy_reasons(gpus: list[dict], *, utilization: float, memory_used: float) -> list[str]:
    """Why a node is busy: every GPU above a threshold (``gpus``: index, utilization, memory_used
    as fractions). Empty when idle; a node without GPUs is never busy."""
    out = []
    for g in gpus:
        if g["utilization"] > utilization:
            out.append(f"GPU {g['index']} at {g['utilization']:.0%} utilisation (limit {utilization:.0%})")
        if g["memory_used"] > memory_used:
            out.append(f"GPU {g['index']} has {g['memory_used']:.0%} of its memory in use (limit {memory_used:.0%})")
    return out


def gpu_load(indices: list[int] | None = None) -> list[dict]:
    """Utilisation and memory in use (fractions) of this node's GPUs from NVML; [] without NVML."""
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver / no GPU: nothing can be busy
        return []
    try:
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            if indices is not None and i not in indices:
                continue
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            util = pynvml.nvmlDeviceGetUtilizationRates(h)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            out.append({"index": i, "utilization": util.gpu / 100.0,
                        "memory_used": mem.used / mem.total if mem.total else 0.0})
        return out
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


# -- node identity --------------------------------------------------------------------------------


def node_scoped_hosts(probes: list[dict]) -> list[dict]:
    """Give each probe's host a node-scoped machine id where Ray nodes share a machine id.

    ``probes``: ``{"ray_node_id", "host": HostFingerprint dict, ...}``; returns new host dicts in
    the same order (unchanged where the machine id is unique in this fleet run).
    """
    counts: dict[str, int] = {}
    for p in probes:
        counts[p["host"]["machine_id"]] = counts.get(p["host"]["machine_id"], 0) + 1
    return [scoped_host(p["host"], p["ray_node_id"]) if counts[p["host"]["machine_id"]] > 1 else dict(p["host"])
            for p in probes]


def scoped_host(host: dict, ray_node_id: str) -> dict:
    """``host`` with a machine id and hostname scoped to one Ray node (see the module docstring)."""
    out = dict(host)
    out["machine_id"] = hashlib.sha256(f"{host['machine_id']}:{ray_node_id}".encode()).hexdigest()[:32]
    out["hostname"] = f"{host['hostname']}/{ray_node_id[:8]}"
    return out


# -- the node side (runs inside Ray workers) ------------------------------------------------------


def probe_node(spec: dict) -> dict:
    """On a node: its Ray node id, host fingerprint, GPU load and busy verdict."""
    import ray

    host = fingerprint()
    indices = None
    try:
        indices = [int(i) for i in ray.get_gpu_ids()]
    except Exception:
        pass
    load = gpu_load(indices) if host.device == "cuda" else []
    busy = busy_reasons(load, utilization=spec["busy_utilization"], memory_used=spec["busy_memory"])
    return {"ray_node_id": ray.get_runtime_context().get_node_id(), "host": host.to_dict(),
            "gpu_load": load, "busy": busy}


def bench_node(spec: dict, workloads: list[dict], host: dict):
    """On a node: run the harness for every workload and backend; yield events as they happen.

    Events: ``{"event": "result", "result": Result dict}`` per measured point (``"harness_failure"``
    for a point the harness itself could not build or run: not a result row), then
    ``{"event": "done", "budget_exhausted": bool, "seconds": float, "startups": {backend:
    [{"seconds", "reason"}]}}``. Each backend's worker group is started once for all the
    node's workloads (:class:`bench.launch.WorkerGroups`) and closed when the task ends. The
    sweeps run in a thread and hand results over a queue, so each one leaves the node as soon
    as it exists.
    """
    fp = HostFingerprint.from_dict(host)
    arch = fp.gpu_arch or spec["cpu_arch"]
    world = spec["world_size"]
    backends = spec["backends"] or list(available())
    q: queue.Queue = queue.Queue()
    started = time.monotonic()
    state = {"budget_exhausted": False, "startups": {}}

    def forward(ev):
        if isinstance(ev, PointMeasured):  # a harness failure is no result row: the run's meta keeps it
            q.put(("harness" if ev.result.status == HARNESS_ERROR else "result", ev.result.to_dict()))

    def work():
        try:
            with WorkerGroups() as groups:
                try:
                    first = True
                    for w in workloads:
                        for backend in backends:
                            # the budget is checked between sweeps: the first one always runs
                            if (not first and spec["budget_s"] is not None
                                    and time.monotonic() - started > spec["budget_s"]):
                                state["budget_exhausted"] = True
                                return
                            first = False
                            sweep = SweepSpec(
                                backends=[backend], tokens=list(spec["tokens"]), hidden=w["hidden"],
                                top_k=w["top_k"], experts=w["experts"], dtype=w["dtypes"][arch], world_size=world,
                                device=spec["device"], max_noise=spec["max_noise"], min_samples=spec["min_samples"],
                                min_time_s=spec["min_time_s"], timeout_s=spec["timeout_s"],
                                setup_timeout_s=spec["setup_timeout_s"], gpu_arch=fp.gpu_arch,
                            )
                            run_sweep(sweep, host=fp, groups=groups, progress=forward)
                finally:
                    state["startups"] = {b: [{"seconds": round(u.seconds, 4), "reason": u.reason} for u in ups]
                                         for b, ups in groups.startups().items()}
        except BaseException as e:  # reported to the driver, which records the reason
            q.put(("error", e))
        finally:
            q.put(("end", None))

    t = threading.Thread(target=work, name="autoselect-fleet-sweep", daemon=True)
    t.start()
    while True:
        kind, value = q.get()
        if kind == "result":
            yield {"event": "result", "result": value}
        elif kind == "harness":
            yield {"event": "harness_failure", "result": value}
        elif kind == "error":
            raise value
        else:
            break
    t.join()
    yield {"event": "done", "budget_exhausted": state["budget_exhausted"],
           "seconds": round(time.monotonic() - started, 3), "startups": state["startups"]}


# -- the driver -----------------------------------------------------------------------------------


@dataclass
class NodeOutcome:
    """What happened on one bundle (node) of a fleet run, over all its attempts."""

    bundle: int
    status: str  # "complete", "failed", "lost", "skipped"
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


def _node_spec(spec: FleetSpec, world: int) -> dict:
    return {"world_size": world, "device": spec.device, "tokens": list(spec.tokens), "backends": spec.backends,
            "budget_s": spec.budget_s, "max_noise": spec.max_noise, "min_samples": spec.min_samples,
            "min_time_s": spec.min_time_s, "timeout_s": spec.timeout_s, "setup_timeout_s": spec.setup_timeout_s,
            "cpu_arch": spec.cpu_arch, "busy_utilization": spec.busy_utilization, "busy_memory": spec.busy_memory}


def _eligible_nodes(ray, gpus: int, cpus: float) -> list[dict]:
    return [n for n in ray.nodes() if n.get("Alive") and n["Resources"].get("GPU", 0) >= gpus
            and n["Resources"].get("CPU", 0) >= cpus]


def _gpus_per_node(ray, spec: FleetSpec) -> int:
    if spec.gpus_per_node is not None:
        return spec.gpus_per_node
    counts = [int(n["Resources"].get("GPU", 0)) for n in ray.nodes() if n.get("Alive")]
    with_gpus = [c for c in counts if c > 0]
    if with_gpus:
        return min(with_gpus)
    if spec.device == "cuda":
        raise NotEnoughNodes("no alive Ray node declares GPUs; start nodes with GPUs, or pass --device cpu")
    return 0


def _failure_reason(ray, exc: BaseException, ray_node_id: str | None) -> tuple[str, bool]:
    """(reason, node_alive) for a failed node task."""
    cause = getattr(exc, "cause", None)  # RayTaskError: the exception raised on the node
    if isinstance(cause, BaseException):
        exc = cause
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).strip().splitlines()
    reason = f"{type(exc).__name__}: {text[0] if text else ''}".strip()
    alive = True
    if ray_node_id:
        for n in ray.nodes():
            if n["NodeID"] == ray_node_id:
                alive = bool(n.get("Alive"))
                if not alive:
                    death = n.get("DeathReasonMessage") or n.get("DeathReason") or "no reason given"
                    reason = f"node {ray_node_id[:8]} died ({death}); {reason}"
    return reason, alive


def _bundle_node(ray, pg, bundle: int, wait_s: float) -> str | None:
    """The alive node that holds ``bundle`` now, waiting up to ``wait_s`` for Ray to reschedule it."""
    from ray.util import placement_group_table

    deadline = time.monotonic() + wait_s
    while True:
        node = placement_group_table(pg).get("bundles_to_node_id", {}).get(bundle)
        alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
        if node in alive:
            return node
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.5)


def check_reachable(address: str | None, timeout_s: float = 5.0) -> None:
    """Fail fast on a ``host:port`` (or ``ray://host:port``) nobody listens on: ``ray.init`` itself
    waits minutes for a GCS that will never answer. ``auto``/None (a local cluster) is not checked."""
    if not address or address == "auto":
        return
    hostport = address.split("://", 1)[-1]
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise RayUnavailable(f"--address {address!r} is not HOST:PORT (e.g. 10.0.0.1:6379) or 'auto'")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as e:
        raise RayUnavailable(f"cannot reach the Ray cluster at {address}: {e.strerror or e}; "
                             "start one with `ray start --head` or pass --address") from None


def _retry_host(p: dict, failed: dict, seen_machines: set) -> dict:
    """The host a retry records: the same node keeps its (possibly scoped) host; a spare node
    Ray moved the bundle to gets a node-scoped id when its machine already takes part."""
    if p["ray_node_id"] == failed["ray_node_id"]:
        return failed["host"]
    if p["host"]["machine_id"] in seen_machines:
        return scoped_host(p["host"], p["ray_node_id"])
    seen_machines.add(p["host"]["machine_id"])
    return dict(p["host"])


def run_fleet(spec: FleetSpec, db_path=None, *, progress: Callable[[dict], None] | None = None) -> FleetReport:
    """Benchmark every node of the Ray cluster at ``spec.address``; write results to ``db_path``.

    Everything is validated, the cluster is reached and the placement group is scheduled
    before the database is opened. ``progress(event)`` receives ``placed`` (nodes),
    ``node_started`` (bundle, hostname, attempt), ``result`` (bundle, hostname, result),
    ``node_failed`` (bundle, error, retry), ``node_done`` (bundle, results), ``skipped`` (bundle,
    reasons).
    """
    workloads = validate(spec)
    check_path(db_path)  # a garbage or newer --db fails here, not after the cluster was reached
    emit = progress or (lambda event: None)
    try:
        import ray
        from ray.util.placement_group import placement_group, remove_placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
    except ImportError:
        raise RayUnavailable("ray is not installed; pip install 'autoselect[fleet]'") from None

    t0 = time.monotonic()
    we_started = not ray.is_initialized()
    if we_started:
        check_reachable(spec.address)
        try:
            ray.init(address=spec.address or "auto", logging_level="WARNING", log_to_driver=False)
        except Exception as e:  # ConnectionError, RpcError, version mismatch ...: all mean "not usable"
            raise RayUnavailable(f"cannot reach the Ray cluster at {spec.address or 'auto'}: "
                                 f"{str(e).splitlines()[0]}; start one with `ray start --head` or pass --address") from None
    pg = None
    try:
        gpus = _gpus_per_node(ray, spec)
        world = spec.world_size or gpus
        if world < 2:
            raise BadFleetOption(f"a world size of {world} has no all2all; pass --world-size 2 or more")
        if spec.device == "cuda" and world > gpus:
            raise BadFleetOption(f"--world-size {world} needs {world} GPUs per node; bundles hold {gpus}")
        eligible = _eligible_nodes(ray, gpus, spec.cpus_per_node)
        n = spec.nodes or len(eligible)
        if n == 0 or n > len(eligible):
            raise NotEnoughNodes(f"{len(eligible)} alive Ray node(s) have {gpus} GPU(s) and "
                                 f"{spec.cpus_per_node:g} CPU(s); asked for {n}. Lower --nodes or --gpus-per-node")
        bundle = {"CPU": spec.cpus_per_node, **({"GPU": gpus} if gpus else {})}
        pg = placement_group([dict(bundle)] * n, strategy="STRICT_SPREAD")
        ready, _ = ray.wait([pg.ready()], timeout=spec.start_timeout_s)
        if not ready:
            raise PlacementFailed(f"could not place {n} bundles of {bundle} on distinct nodes within "
                                  f"{spec.start_timeout_s:g}s; free the GPUs or lower --nodes")
        emit({"event": "placed", "nodes": n, "bundle": bundle})
        node_spec = _node_spec(spec, world)
        task_opts = {"num_cpus": spec.cpus_per_node, "num_gpus": gpus, "max_retries": 0}
        probe = ray.remote(probe_node)
        bench = ray.remote(num_returns="streaming")(bench_node)

        def on(b):
            return PlacementGroupSchedulingStrategy(placement_group=pg, placement_group_bundle_index=b)

        probe_refs = [probe.options(scheduling_strategy=on(b), **task_opts).remote(node_spec) for b in range(n)]
        answered, _ = ray.wait(probe_refs, num_returns=n, timeout=spec.start_timeout_s)
        probes: list[dict | None] = []
        probe_errors: dict[int, str] = {}
        for b, ref in enumerate(probe_refs):
            try:
                if ref not in answered:
                    raise TimeoutError(f"no answer within {spec.start_timeout_s:g}s")
                probes.append(ray.get(ref))
            except Exception as e:  # e.g. autoselect or torch not installed on that node
                ray.cancel(ref, force=True)
                probes.append(None)
                probe_errors[b] = f"probe failed: {_failure_reason(ray, e, None)[0]}"
        hosts = node_scoped_hosts([p for p in probes if p is not None])
        hosts_by_bundle = iter(hosts)
        hosts = [next(hosts_by_bundle) if p is not None else None for p in probes]
        seen_machines = {p["host"]["machine_id"] for p in probes if p is not None}

        from db.store import Store  # heavy (sqlite_utils): only a run that reached the cluster pays for it

        fleet_run = uuid.uuid4().hex[:12]
        outcomes = [NodeOutcome(bundle=b, status="running") for b in range(n)]
        meta_base = {"fleet_run": fleet_run, "models": list(spec.models), "tokens": list(spec.tokens),
                     "device": spec.device, "world_size": world}
        store = Store(db_path)
        live: dict[Any, dict] = {}  # generator -> {"bundle", "run_id", "host", "ray_node_id"}

        def start(b: int, probe_result: dict, host: dict) -> None:
            o = outcomes[b]
            o.attempts += 1
            o.hostname, o.machine_id, o.ray_node_id = host["hostname"], host["machine_id"], probe_result["ray_node_id"]
            run_id = store.begin_run(host, trigger=spec.trigger, command=spec.command,
                                     meta={**meta_base, "bundle": b, "attempt": o.attempts,
                                           "ray_node_id": probe_result["ray_node_id"]})
            o.run_ids.append(run_id)
            gen = bench.options(scheduling_strategy=on(b), **task_opts).remote(node_spec, workloads, host)
            live[gen] = {"bundle": b, "run_id": run_id, "host": host, "ray_node_id": probe_result["ray_node_id"]}
            emit({"event": "node_started", "bundle": b, "hostname": host["hostname"], "attempt": o.attempts,
                  "ray_node_id": probe_result["ray_node_id"]})

        try:
            for b, (p, host) in enumerate(zip(probes, hosts)):
                if p is None:
                    outcomes[b].status, outcomes[b].error = "failed", probe_errors[b]
                    emit({"event": "node_failed", "bundle": b, "hostname": None, "error": probe_errors[b],
                          "retry": False})
                    continue
                if spec.only_idle and p["busy"]:
                    outcomes[b].status, outcomes[b].error = "skipped", "; ".join(p["busy"])
                    outcomes[b].hostname, outcomes[b].machine_id = host["hostname"], host["machine_id"]
                    outcomes[b].ray_node_id = p["ray_node_id"]
                    emit({"event": "skipped", "bundle": b, "hostname": host["hostname"], "reasons": p["busy"]})
                    continue
                start(b, p, host)

            while live:
                ready, _ = ray.wait(list(live), num_returns=1, timeout=1.0)
                for gen in ready:
                    info = live.pop(gen)
                    b, o = info["bundle"], outcomes[info["bundle"]]
                    try:
                        event = ray.get(next(gen))
                    except StopIteration:
                        continue  # the "done" event already closed the run
                    except Exception as e:  # the task failed or its node is gone
                        reason, alive = _failure_reason(ray, e, info["ray_node_id"])
                        store.finish_run(info["run_id"], "failed", meta={"error": reason})
                        o.error = reason
                        retry = o.attempts <= spec.retries
                        node = _bundle_node(ray, pg, b, spec.reschedule_wait_s if retry else 0) if retry else None
                        emit({"event": "node_failed", "bundle": b, "hostname": info["host"]["hostname"],
                              "error": reason, "retry": node is not None})
                        if node is None:
                            o.status = "failed" if alive else "lost"
                            continue
                        ref = probe.options(scheduling_strategy=on(b), **task_opts).remote(node_spec)
                        try:  # a node the cluster has not noticed is gone yet never answers
                            p = ray.get(ref, timeout=max(spec.reschedule_wait_s, 30.0))
                        except Exception as probe_error:
                            ray.cancel(ref, force=True)
                            o.status = "lost"
                            o.error = f"{reason}; the retry's probe failed: {_failure_reason(ray, probe_error, None)[0]}"
                            continue
                        start(b, p, _retry_host(p, info, seen_machines))
                        continue
                    live[gen] = info
                    if event["event"] == "result":
                        store.add_result(info["run_id"], Result(**event["result"]))
                        o.results += 1
                        emit({"event": "result", "bundle": b, "hostname": info["host"]["hostname"],
                              "ray_node_id": info["ray_node_id"], "result": event["result"]})
                    elif event["event"] == "harness_failure":
                        r = event["result"]
                        store.append_run_meta(info["run_id"], "harness_failures", [
                            {"backend": r["backend"], "tokens_per_rank": r["tokens_per_rank"], "error": r["error"]}])
                    elif event["event"] == "done":
                        store.finish_run(info["run_id"], "complete",
                                         meta={"budget_exhausted": event["budget_exhausted"],
                                               "seconds": event["seconds"], "startups": event.get("startups", {})})
                        o.status, o.error, o.budget_exhausted = "complete", None, event["budget_exhausted"]
                        emit({"event": "node_done", "bundle": b, "hostname": info["host"]["hostname"],
                              "results": o.results})
        except BaseException:
            for info in live.values():
                store.finish_run(info["run_id"], "interrupted")
            raise
        finally:
            store.close()
        return FleetReport(fleet_run=fleet_run, trigger=spec.trigger, db_path=str(store.path), nodes=outcomes,
                           seconds=time.monotonic() - t0)
    finally:
        if pg is not None:
            try:
                remove_placement_group(pg)
            except Exception:
                pass
        if we_started:
            ray.shutdown()


# -- periodic runs ---------------------------------------------------------------------------------


def schedule_delays(every_s: float, jitter_s: float, rng: random.Random):
    """The waits between scheduled runs: ``every_s`` plus a uniform jitter in [-jitter_s, +jitter_s]
    (never negative), so a fleet's nodes do not all re-benchmark at the same minute."""
    while True:
        yield max(0.0, every_s + rng.uniform(-jitter_s, jitter_s))


#: Errors about the --db file itself: raised by :func:`run_schedule` instead of retried.
DATABASE_ERRORS = (NotADatabase, ForeignDatabase, DatabaseTooNew, DatabaseNeedsUpgrade, DatabaseNotWritable,
                   DatabaseDamaged)


def run_schedule(run_once: Callable[[], Any], *, every_s: float, jitter_s: float = 0.0, count: int | None = None,
                 sleep: Callable[[float], None] = time.sleep, rng: random.Random | None = None,
                 on_wait: Callable[[float], None] | None = None,
                 on_error: Callable[[UserError], None] | None = None) -> list:
    """Call ``run_once`` now and then after each delay of :func:`schedule_delays`, ``count`` times
    (forever when None); returns what the calls returned. A run's :class:`UserError` (an
    unreachable cluster, say) is handed to ``on_error`` at once, kept in the list, and the loop
    goes on, except one about the database file (:data:`DATABASE_ERRORS`), which no later run
    can fix: it is raised."""
    if every_s <= 0:
        raise BadDuration(f"--every must be positive, got {every_s}s")
    if jitter_s < 0 or jitter_s >= every_s:
        raise BadDuration(f"--jitter must be between 0 and --every ({every_s:g}s), got {jitter_s:g}s")
    if count is not None and count < 1:
        raise BadFleetOption(f"--count must be at least 1, got {count}")
    delays = schedule_delays(every_s, jitter_s, rng or random.Random())
    out = []
    i = 0
    while count is None or i < count:
        if i:
            delay = next(delays)
            if on_wait:
                on_wait(delay)
            sleep(delay)
        try:
            out.append(run_once())
        except UserError as e:
            if isinstance(e, DATABASE_ERRORS):
                raise  # a bad --db is bad in every run: stop instead of repeating it
            if on_error:
                on_error(e)
            out.append(e)
        i += 1
    return out


def command_line(argv: list[str]) -> str:
    """The command as recorded in ``runs.command``."""
    return " ".join(shlex.quote(a) for a in argv)
