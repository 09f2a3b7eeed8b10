"""Slow nodes: each node's newest run against its own history, its host class, and NVIDIA's reference.

Every node (``machine_id``) is judged on its **newest run**: for each measured point its median
latency is compared with the same node's **history** (the median of its older runs' medians), with
its **host class** (the median of the other nodes' newest medians; leave-one-out, so one slow node
cannot drag the reference towards itself), and, where the node's GPUs are a published reference
system, with **NVIDIA's published numbers** (:mod:`autoselect.reference.health`: more than 1.5x a
published or transferred number is slow, whatever the noise; ``versus`` ``"reference"``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

from autoselect.fleet.drift.points import (MIN_SLOWDOWN, NOISE_K, Observation, Point, Reference, reference,
                                           slow_threshold)
from autoselect.reference.health import SLOWER_LIMIT, Measured, compare
from autoselect.reference.systems import match_host


@dataclass
class SlowPoint:
    """One point where a node's newest run is slower than its reference beyond the noise."""

    machine_id: str
    hostname: str
    host_class: str
    versus: str  # "history" (its own older runs), "class" (the other nodes' newest), "reference" (NVIDIA's)
    backend: str
    shape: str
    tokens_per_rank: int
    latency_us: float
    reference_us: float
    slowdown: float  # fraction: 0.25 = 25 % slower
    threshold: float  # the slowdown it had to exceed
    reference_count: int

    def to_dict(self) -> dict[str, Any]:
        """JSON form (latencies rounded to 0.001 µs, fractions to 1e-4)."""
        d = asdict(self)
        for k in ("latency_us", "reference_us"):
            d[k] = round(d[k], 3)
        for k in ("slowdown", "threshold"):
            d[k] = round(d[k], 4)
        return d


@dataclass
class NodeDrift:
    """The verdict on one node: compared points, slow points, the versions that changed."""

    machine_id: str
    hostname: str
    host_class: str
    newest_run_id: int
    newest_run_started_at: str
    compared_history: int = 0
    compared_class: int = 0
    compared_reference: int = 0
    reference_class: str | None = None  # the published system its GPUs are, when they are one
    slow: list[SlowPoint] = field(default_factory=list)
    versions_changed: dict[str, list] = field(default_factory=dict)  # key -> [before, now]

    @property
    def flagged(self) -> bool:
        """True when the node has any slow point."""
        return bool(self.slow)

    @property
    def worst_slowdown(self) -> float:
        """The largest slowdown among its slow points (0 when none)."""
        return max((s.slowdown for s in self.slow), default=0.0)

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "machine_id": self.machine_id,
            "hostname": self.hostname,
            "host_class": self.host_class,
            "newest_run_id": self.newest_run_id,
            "newest_run_started_at": self.newest_run_started_at,
            "flagged": self.flagged,
            "worst_slowdown": round(self.worst_slowdown, 4),
            "compared_history": self.compared_history,
            "compared_class": self.compared_class,
            "compared_reference": self.compared_reference,
            "reference_class": self.reference_class,
            "slow": [s.to_dict() for s in self.slow],
            "versions_changed": self.versions_changed,
        }


def node_drift(obs: list[Observation], *, min_slowdown: float = MIN_SLOWDOWN,
               noise_k: float = NOISE_K) -> list[NodeDrift]:
    """Judge every node's newest run against its history and its host class (pure function)."""
    by_node: dict[str, list[Observation]] = {}
    for o in obs:
        by_node.setdefault(o.machine_id, []).append(o)

    newest: dict[str, tuple[str, int]] = {}  # machine -> (started_at, run_id) of its newest run
    for m, rows in by_node.items():
        newest[m] = max((o.run_started_at, o.run_id) for o in rows)

    latest: dict[str, dict[Point, Observation]] = {}  # machine -> point -> newest-run observation
    history: dict[str, dict[Point, list[Observation]]] = {}
    for m, rows in by_node.items():
        run_id = newest[m][1]
        for o in sorted(rows, key=lambda o: (o.run_started_at, o.run_id)):
            if o.run_id == run_id:
                latest.setdefault(m, {})[o.point] = o
            else:
                history.setdefault(m, {}).setdefault(o.point, []).append(o)

    out = []
    for m in sorted(by_node, key=lambda m: (by_node[m][0].hostname, m)):
        first = by_node[m][0]
        nd = NodeDrift(machine_id=m, hostname=first.hostname, host_class=first.host_class,
                       newest_run_id=newest[m][1], newest_run_started_at=newest[m][0])
        mine = latest.get(m, {})
        nd.versions_changed = _versions_changed(mine.values(), history.get(m, {}))
        for point, o in sorted(mine.items(), key=lambda kv: _point_order(kv[0])):
            past = history.get(m, {}).get(point)
            if past:
                nd.compared_history += 1
                _judge(nd, o, "history", reference([p.latency_us for p in past], [p.noise_stdrel for p in past]),
                       min_slowdown, noise_k)
            peers = [latest[p][point] for p in latest
                     if p != m and point in latest[p] and by_node[p][0].host_class == nd.host_class]
            if peers:
                nd.compared_class += 1
                _judge(nd, o, "class", reference([p.latency_us for p in peers], [p.noise_stdrel for p in peers]),
                       min_slowdown, noise_k)
        out.append(nd)
    return out


def reference_drift(nodes: list[NodeDrift], obs: list[Observation], hosts: dict[str, Any]) -> None:
    """Judge each node's newest run against NVIDIA's published reference, where its host class's GPUs
    (``hosts``: host class -> its newest host) are a reference system: a point more than
    :data:`~autoselect.reference.health.SLOWER_LIMIT` times a published or transferred number is slow."""
    for nd in nodes:
        mine = [o for o in obs if o.machine_id == nd.machine_id and o.run_id == nd.newest_run_id
                and o.point.device == "cuda" and o.point.knobs == "{}"]
        host = hosts.get(nd.host_class)
        match = match_host(host, mine[0].point.world_size) if mine and host is not None else None
        if match is None:
            continue
        nd.reference_class = match.ref_class.name
        by_measured = {}
        for o in mine:
            s = o.point.shape
            by_measured[Measured(o.point.backend, s.hidden, s.top_k, s.experts, s.dtype, o.point.world_size,
                                 o.point.tokens_per_rank, o.latency_us)] = o
        for c in compare(by_measured, match.ref_class):
            nd.compared_reference += 1
            if c.slower:
                o = by_measured[c.measured]
                nd.slow.append(SlowPoint(
                    machine_id=o.machine_id, hostname=o.hostname, host_class=o.host_class, versus="reference",
                    backend=o.point.backend, shape=o.point.label(), tokens_per_rank=o.point.tokens_per_rank,
                    latency_us=o.latency_us, reference_us=c.reference_us, slowdown=c.ratio - 1.0,
                    threshold=SLOWER_LIMIT - 1.0, reference_count=1))


def _point_order(p: Point) -> tuple:
    s = p.shape
    return (s.hidden, s.top_k, s.experts, s.dtype, p.world_size, p.backend, p.tokens_per_rank, p.knobs)


def _judge(nd: NodeDrift, o: Observation, versus: str, ref: Reference, min_slowdown: float, noise_k: float) -> None:
    slowdown = o.latency_us / ref.latency_us - 1.0
    threshold = slow_threshold(o.noise_stdrel, ref.noise_stdrel, min_slowdown=min_slowdown, noise_k=noise_k)
    if slowdown > threshold:
        nd.slow.append(SlowPoint(
            machine_id=o.machine_id, hostname=o.hostname, host_class=o.host_class, versus=versus,
            backend=o.point.backend, shape=o.point.label(), tokens_per_rank=o.point.tokens_per_rank,
            latency_us=o.latency_us, reference_us=ref.latency_us, slowdown=slowdown,
            threshold=threshold, reference_count=ref.count,
        ))


def _versions_changed(latest: Iterable[Observation], history: dict[Point, list[Observation]]) -> dict[str, list]:
    """Software versions of the newest run that differ from the node's previous run."""
    now: dict[str, str] = {}
    for o in latest:
        now.update(dict(o.versions))
    before: dict[str, str] = {}
    prev = [o for rows in history.values() for o in rows]
    if prev:
        newest_prev = max((o.run_started_at, o.run_id) for o in prev)
        for o in prev:
            if (o.run_started_at, o.run_id) == newest_prev:
                before.update(dict(o.versions))
    return {k: [before.get(k), now.get(k)] for k in sorted(set(now) | set(before))
            if before and now.get(k) != before.get(k)}

