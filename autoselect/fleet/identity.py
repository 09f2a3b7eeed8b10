"""Node identity: which machine id and hostname a node's results are stored under.

Results are keyed by the node's ``machine_id`` (a hash of ``/etc/machine-id``), stable across
runs. When several Ray nodes of one fleet run report the same machine id (several raylets on one
machine, as in a test cluster), each gets a node-scoped id: ``sha256(machine_id + ":" +
ray_node_id)`` and hostname ``host/<node id[:8]>``. Those ids change whenever the raylet
restarts, so history only accumulates on real one-raylet-per-machine clusters.
"""

from __future__ import annotations

import hashlib
from typing import Sequence

from autoselect.fleet.probe import Probe


def node_scoped_hosts(probes: Sequence[Probe]) -> list[dict]:
    """Each probe's host, with a node-scoped machine id where Ray nodes of this run share one.

    Returns new host dicts in the same order (unchanged where the machine id is unique).
    """
    counts: dict[str, int] = {}
    for p in probes:
        counts[p.host["machine_id"]] = counts.get(p.host["machine_id"], 0) + 1
    return [scoped_host(p.host, p.ray_node_id) if counts[p.host["machine_id"]] > 1 else dict(p.host) for p in probes]


def scoped_host(host: dict, ray_node_id: str) -> dict:
    """``host`` with a machine id and hostname scoped to one Ray node (see the module docstring)."""
    out = dict(host)
    out["machine_id"] = hashlib.sha256(f"{host['machine_id']}:{ray_node_id}".encode()).hexdigest()[:32]
    out["hostname"] = f"{host['hostname']}/{ray_node_id[:8]}"
    return out


def retry_host(probe: Probe, *, failed_host: dict, failed_ray_node_id: str, seen_machines: set[str]) -> dict:
    """The host a retry records: the same node keeps its (possibly scoped) host; a spare node Ray
    moved the bundle to gets a node-scoped id when its machine already takes part (``seen_machines``
    gains its machine id otherwise)."""
    if probe.ray_node_id == failed_ray_node_id:
        return failed_host
    if probe.host["machine_id"] in seen_machines:
        return scoped_host(probe.host, probe.ray_node_id)
    seen_machines.add(probe.host["machine_id"])
    return dict(probe.host)
