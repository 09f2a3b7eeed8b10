"""The Ray cluster: connecting to it, sizing the run on it, and placing one bundle per node.

:class:`RayCluster` is a context manager: it connects (``ray.init``) unless this process already
is connected, and shuts Ray down on exit when it connected. :meth:`RayCluster.layout` sizes a run
on the alive nodes; :meth:`RayCluster.place` reserves a placement group with one bundle per node
(``STRICT_SPREAD``: every bundle on a distinct node, each holding all of that node's GPUs,
``{"GPU": g, "CPU": c}``), removed when its ``with`` block ends. Every way this can go wrong is
one :class:`~autoselect.errors.UserError`: :class:`RayUnavailable`, :class:`NotEnoughNodes`,
:class:`PlacementFailed` (and :class:`~autoselect.fleet.spec.BadFleetOption` for a world size
the nodes cannot hold). Ray is imported here only, on first use.
"""

from __future__ import annotations

import re
import socket
import time
from dataclasses import dataclass
from typing import Any, Callable

from autoselect.errors import UserError
from autoselect.fleet.spec import BadFleetOption, FleetSpec


class RayUnavailable(UserError):
    "Ray is not installed or the cluster cannot be reached."


class NotEnoughNodes(UserError):
    "The cluster has fewer alive nodes with the requested GPUs than --nodes asks for."


class PlacementFailed(UserError):
    "The placement group could not be scheduled in time."


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


def import_ray():
    """The ``ray`` module, or :class:`RayUnavailable` when it is not installed."""
    try:
        import ray
        import ray.util.placement_group  # noqa: F401  (the submodules this module uses)
        import ray.util.scheduling_strategies  # noqa: F401
    except ImportError:
        raise RayUnavailable("ray is not installed; pip install 'autoselect[fleet]'") from None
    return ray


@dataclass(frozen=True)
class Layout:
    """How a run sits on the cluster: ``nodes`` bundles of ``bundle`` resources, ``world_size`` ranks each."""

    nodes: int
    gpus_per_node: int
    world_size: int
    bundle: dict


class RayCluster:
    """A connection to the Ray cluster at ``address`` (None: ``auto``), for one ``with`` block."""

    def __init__(self, address: str | None):
        self.address = address
        self.ray: Any = None
        self.connected_here = False

    def __enter__(self) -> "RayCluster":
        self.ray = import_ray()
        self.connected_here = not self.ray.is_initialized()
        if self.connected_here:
            check_reachable(self.address)
            try:
                self.ray.init(address=self.address or "auto", logging_level="WARNING", log_to_driver=False)
            except Exception as e:  # ConnectionError, RpcError, version mismatch ...: all mean "not usable"
                raise RayUnavailable(f"cannot reach the Ray cluster at {self.address or 'auto'}: "
                                     f"{str(e).splitlines()[0]}; start one with `ray start --head` or pass --address"
                                     ) from None
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.connected_here:
            self.ray.shutdown()

    # -- the nodes ------------------------------------------------------------------------------

    def alive_nodes(self) -> list[dict]:
        """``ray.nodes()`` entries of the nodes alive now."""
        return [n for n in self.ray.nodes() if n.get("Alive")]

    def layout(self, spec: FleetSpec) -> Layout:
        """Size the run: GPUs per bundle (``--gpus-per-node`` or the smallest GPU node), the world
        size, and how many eligible nodes (``--nodes`` or all of them)."""
        gpus = self._gpus_per_node(spec)
        world = spec.world_size or gpus
        if world < 2:
            raise BadFleetOption(f"a world size of {world} has no all2all; pass --world-size 2 or more")
        if spec.device == "cuda" and world > gpus:
            raise BadFleetOption(f"--world-size {world} needs {world} GPUs per node; bundles hold {gpus}")
        eligible = [n for n in self.alive_nodes() if n["Resources"].get("GPU", 0) >= gpus
                    and n["Resources"].get("CPU", 0) >= spec.cpus_per_node]
        n = spec.nodes or len(eligible)
        if n == 0 or n > len(eligible):
            raise NotEnoughNodes(f"{len(eligible)} alive Ray node(s) have {gpus} GPU(s) and "
                                 f"{spec.cpus_per_node:g} CPU(s); asked for {n}. Lower --nodes or --gpus-per-node")
        return Layout(nodes=n, gpus_per_node=gpus, world_size=world,
                      bundle={"CPU": spec.cpus_per_node, **({"GPU": gpus} if gpus else {})})

    def _gpus_per_node(self, spec: FleetSpec) -> int:
        if spec.gpus_per_node is not None:
            return spec.gpus_per_node
        with_gpus = [c for c in (int(n["Resources"].get("GPU", 0)) for n in self.alive_nodes()) if c > 0]
        if with_gpus:
            return min(with_gpus)
        if spec.device == "cuda":
            raise NotEnoughNodes("no alive Ray node declares GPUs; start nodes with GPUs, or pass --device cpu")
        return 0

    def failure_reason(self, exc: BaseException, ray_node_id: str | None) -> tuple[str, bool]:
        """(reason, node alive) for a failed node task: the exception raised on the node (one line,
        without colour codes), prefixed with the node's death when Ray says it died."""
        cause = getattr(exc, "cause", None)  # RayTaskError: the exception raised on the node
        if isinstance(cause, BaseException):
            exc = cause
        text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).strip().splitlines()
        reason = f"{type(exc).__name__}: {text[0] if text else ''}".strip()
        node = next((n for n in self.ray.nodes() if n["NodeID"] == ray_node_id), None) if ray_node_id else None
        if node is None or node.get("Alive"):
            return reason, True
        death = node.get("DeathReasonMessage") or node.get("DeathReason") or "no reason given"
        return f"node {ray_node_id[:8]} died ({death}); {reason}", False

    # -- tasks and placement ----------------------------------------------------------------------

    def remote(self, function: Callable, **options: Any):
        """``function`` as a Ray remote function (``options``: e.g. ``num_returns="streaming"``)."""
        return self.ray.remote(**options)(function) if options else self.ray.remote(function)

    def place(self, layout: Layout, *, timeout_s: float) -> "Placement":
        """Reserve ``layout.nodes`` bundles on distinct nodes; :class:`PlacementFailed` after ``timeout_s``."""
        placement = Placement(self, layout)
        try:
            ready, _ = self.ray.wait([placement.group.ready()], timeout=timeout_s)
        except BaseException:  # interrupted while waiting: give the bundles back
            placement.remove()
            raise
        if not ready:
            placement.remove()
            raise PlacementFailed(f"could not place {layout.nodes} bundles of {layout.bundle} on distinct nodes "
                                  f"within {timeout_s:g}s; free the GPUs or lower --nodes")
        return placement


class Placement:
    """A ``STRICT_SPREAD`` placement group of a :class:`Layout`; removed at the end of its ``with`` block."""

    def __init__(self, cluster: RayCluster, layout: Layout):
        from ray.util.placement_group import placement_group

        self.cluster = cluster
        self.layout = layout
        self.group = placement_group([dict(layout.bundle)] * layout.nodes, strategy="STRICT_SPREAD")

    def __enter__(self) -> "Placement":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.remove()

    def remove(self) -> None:
        """Give the bundles back (a cluster already gone has nothing to give back)."""
        from ray.util.placement_group import remove_placement_group

        try:
            remove_placement_group(self.group)
        except Exception:
            pass

    def options(self, bundle: int) -> dict:
        """Task options that run a task in ``bundle`` with all of its resources."""
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        strategy = PlacementGroupSchedulingStrategy(placement_group=self.group, placement_group_bundle_index=bundle)
        return {"scheduling_strategy": strategy, "num_cpus": self.layout.bundle["CPU"],
                "num_gpus": self.layout.gpus_per_node, "max_retries": 0}

    def node_of(self, bundle: int, wait_s: float) -> str | None:
        """The alive node that holds ``bundle`` now, waiting up to ``wait_s`` for Ray to reschedule it."""
        from ray.util import placement_group_table

        deadline = time.monotonic() + wait_s
        while True:
            node = placement_group_table(self.group).get("bundles_to_node_id", {}).get(bundle)
            if node in {n["NodeID"] for n in self.cluster.alive_nodes()}:
                return node
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.5)
