"""Fleet drift: which nodes got slower than their own history or than their host class.

Every node (``machine_id``) is judged on its **newest run**: for each measured point
(backend x shape x tokens per rank x dtype x world size) its median latency is compared

* with the same node's **history** (the median of its older runs' medians), and
* with its **host class** (the median of the other nodes' newest medians; leave-one-out, so
  one slow node cannot drag the reference towards itself), and
* where the node's GPUs are a published reference system, with **NVIDIA's published numbers**
  (:mod:`autoselect.reference.health`: more than 1.5x a published or transferred number is slow,
  whatever the noise; ``versus`` ``"reference"``).

A point is *slow* only beyond the measured noise: the slowdown must exceed both
``min_slowdown`` (default 5 %) and ``noise_k`` (default 3) times the combined relative noise
of the two sides, where each side's noise is the larger of the stored standard error of the
median (``noise_stdrel``) and the run-to-run spread of the reference values (1.4826 x MAD,
relative). A node is flagged when it has slow points; the report lists them with how much.

It also answers "did the recommended backend change since the previous run, and why": for each
known model (the models fleet runs were asked to measure, from their run meta) and host class,
:func:`autoselect.selector.recommend` is run on the rows of the previous fleet run and on the
rows of the newest one (on the token counts the newest run measured, equally weighted), and
the measurements that moved beyond the noise are listed.

Reads only (stdlib ``sqlite3`` through :mod:`db.queries`); no torch, numpy or sqlite-utils.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

from autoselect.errors import UnknownHostClass, UserError
from autoselect.model import load_profile
from autoselect.reference.health import SLOWER_LIMIT, Measured, compare
from autoselect.reference.systems import match_host
from autoselect.selector import recommend
from autoselect.workload import Deployment, Shape, equal_workload
from db.queries import all_results, connect_readonly, host_classes, newest_host, runs


class BadThreshold(UserError):
    "A drift threshold that is not a usable number."

#: a point must be at least this much slower (fraction) to count, whatever the noise
MIN_SLOWDOWN = 0.05
#: ... and slower than this many combined relative standard errors
NOISE_K = 3.0
#: scale of the median absolute deviation to a standard deviation (normal data)
MAD_SCALE = 1.4826

#: the fields besides the shape that identify one measured point across runs and nodes
POINT_FIELDS = ("backend", "world_size", "tokens_per_rank", "combine_dtype", "routing", "kind", "device")


@dataclass(frozen=True)
class Point:
    """One measured point, independent of node and run: a backend at a shape, EP size and tokens."""

    backend: str
    shape: Shape
    world_size: int
    tokens_per_rank: int
    combine_dtype: str
    routing: str
    kind: str
    device: str
    knobs: str = "{}"  # canonical JSON of the tuned knobs

    def label(self) -> str:
        """A short human label: ``H7168 top8 E256 fp8_block128 ws8 T64``."""
        return f"{self.shape.label()} ws{self.world_size} T{self.tokens_per_rank}"


def point_of(result: Any) -> Point:
    """The :class:`Point` a stored result (a :class:`db.queries.StoredResult`) measured."""
    shape = Shape(hidden=result.hidden, top_k=result.top_k, experts=result.experts, dtype=result.dispatch_dtype)
    return Point(shape=shape, knobs=json.dumps(result.knobs or {}, sort_keys=True),
                 **{f: getattr(result, f) for f in POINT_FIELDS})


@dataclass(frozen=True)
class Observation:
    """One ok, legal measurement of one point on one node in one run."""

    machine_id: str
    hostname: str
    host_class: str
    run_id: int
    run_started_at: str
    point: Point
    latency_us: float
    noise_stdrel: float  # relative standard error of the median (0 when unknown)
    versions: tuple = ()  # sorted (key, value) pairs


def observations(results: Iterable[Any]) -> list[Observation]:
    """The usable observations among stored results: status ok, not illegal, with a median."""
    out = []
    for r in results:
        if r.status != "ok" or r.illegal or not r.latency_us_p50 or r.latency_us_p50 <= 0:
            continue
        out.append(Observation(
            machine_id=r.machine_id, hostname=r.hostname, host_class=r.host_class,
            run_id=r.run_id, run_started_at=r.run_started_at, point=point_of(r),
            latency_us=float(r.latency_us_p50), noise_stdrel=float(r.noise_stdrel or 0.0),
            versions=tuple(sorted((r.versions or {}).items())),
        ))
    return out


@dataclass(frozen=True)
class Reference:
    """What a newest value is compared with: a median of other values and its relative noise."""

    latency_us: float
    noise_stdrel: float
    count: int


def reference(values: list[float], stderrs: list[float]) -> Reference:
    """The median of ``values`` with its relative noise: the larger of the typical stored standard
    error and the run-to-run spread (1.4826 x MAD / median; needs at least 3 values)."""
    med = statistics.median(values)
    stderr = statistics.median(stderrs) if stderrs else 0.0
    spread = 0.0
    if len(values) >= 3 and med > 0:
        spread = MAD_SCALE * statistics.median(abs(v - med) for v in values) / med
    return Reference(latency_us=med, noise_stdrel=max(stderr, spread), count=len(values))


def slow_threshold(new_noise: float, ref_noise: float, *, min_slowdown: float = MIN_SLOWDOWN,
                   noise_k: float = NOISE_K) -> float:
    """The slowdown (fraction) a point must exceed to be slow: max(min_slowdown, k x combined noise)."""
    return max(min_slowdown, noise_k * math.hypot(new_noise, ref_noise))


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


# -- recommendation changes ----------------------------------------------------------------------


@dataclass
class MovedPoint:
    """A measurement of a recommendation's shape that moved beyond the noise between two runs."""

    backend: str
    tokens_per_rank: int
    before_us: float
    now_us: float
    change: float  # fraction: +0.2 = 20 % slower now

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"backend": self.backend, "tokens_per_rank": self.tokens_per_rank,
                "before_us": round(self.before_us, 3), "now_us": round(self.now_us, 3),
                "change": round(self.change, 4)}


@dataclass
class RecommendationChange:
    """The recommended backend for a model on a host class, before and after the newest run."""

    model: str
    host_class: str
    before: str
    now: str
    before_run: str  # fleet run id (or run uid) of the previous data
    now_run: str
    moved: list[MovedPoint]

    @property
    def changed(self) -> bool:
        """True when the pick differs."""
        return self.before != self.now

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"model": self.model, "host_class": self.host_class, "changed": self.changed,
                "before": self.before, "now": self.now, "before_run": self.before_run,
                "now_run": self.now_run, "moved": [m.to_dict() for m in self.moved]}


def fleet_run_of(run: dict) -> str:
    """The fleet run a stored run belongs to (its ``meta.fleet_run``), else the run's own uid."""
    return str((run.get("meta") or {}).get("fleet_run") or run["uid"])


def moved_points(before: list[Any], now: list[Any], *, min_change: float = MIN_SLOWDOWN,
                 noise_k: float = NOISE_K) -> list[MovedPoint]:
    """Per (backend, tokens): the median over machines before vs now, kept when it moved beyond
    the noise (same threshold as a slow point, either direction), biggest move first."""
    def medians(rows):
        acc: dict[tuple, list] = {}
        for o in rows:
            acc.setdefault((o.point.backend, o.point.tokens_per_rank), []).append(o)
        return {k: reference([o.latency_us for o in v], [o.noise_stdrel for o in v]) for k, v in acc.items()}

    b, n = medians(before), medians(now)
    out = []
    for key in sorted(set(b) & set(n)):
        change = n[key].latency_us / b[key].latency_us - 1.0
        if abs(change) > slow_threshold(n[key].noise_stdrel, b[key].noise_stdrel,
                                        min_slowdown=min_change, noise_k=noise_k):
            out.append(MovedPoint(key[0], key[1], b[key].latency_us, n[key].latency_us, change))
    return sorted(out, key=lambda m: -abs(m.change))


def recommendation_changes(conn: Any, results: list[Any], run_rows: list[dict], *,
                           models: Iterable[str] | None = None, min_slowdown: float = MIN_SLOWDOWN,
                           noise_k: float = NOISE_K) -> list[RecommendationChange]:
    """For each known model and GPU host class with two fleet runs: the pick on the previous run's
    rows vs the newest run's rows, with the measurements that moved.

    :param results: every stored result (``db.queries.all_results``).
    :param run_rows: every run (``db.queries.runs``); ``meta.models`` names the known models.
    :param models: the models to check (default: every model named in a run's meta).
    """
    fleet_of = {r["id"]: fleet_run_of(r) for r in run_rows}
    started = {}
    for r in run_rows:
        f = fleet_of[r["id"]]
        started[f] = min(started.get(f, r["started_at"]), r["started_at"])
    explicit = models is not None
    if models is None:
        names: list[str] = []
        for r in run_rows:
            for m in (r.get("meta") or {}).get("models") or []:
                if m not in names:
                    names.append(m)
        models = names

    by_class: dict[str, list[Any]] = {}
    for r in results:
        by_class.setdefault(r.host_class, []).append(r)
    out = []
    for model in models:
        try:
            profile = load_profile(model)
        except UserError:
            if explicit:
                raise
            continue  # a model a past run measured that this machine cannot resolve any more
        for host_class, rows in sorted(by_class.items()):
            arch = next((r.gpu_arch for r in rows if r.gpu_arch), None)
            if arch is None:
                continue  # a CPU class: nothing vLLM would serve on
            shape = Shape.of(profile, arch)
            shape_rows = [r for r in rows if (r.hidden, r.top_k, r.experts, r.dispatch_dtype)
                          == (shape.hidden, shape.top_k, shape.experts, shape.dtype)]
            fleets = sorted({fleet_of[r.run_id] for r in shape_rows}, key=lambda f: started[f])
            if len(fleets) < 2:
                continue
            prev_f, now_f = fleets[-2], fleets[-1]
            # "before": everything measured up to and including the previous fleet run
            before_rows = [r for r in shape_rows if started[fleet_of[r.run_id]] <= started[prev_f]]
            ws = _common_world_size(shape_rows)
            dep = Deployment(dp=ws, tp=1)
            # compared on the token counts the newest fleet run measured, equally weighted
            measured = sorted({r.tokens_per_rank for r in shape_rows if fleet_of[r.run_id] == now_f})
            workload = equal_workload(measured)
            newest = newest_host(conn, host_class)
            picks = []
            for use in (before_rows, shape_rows):
                rec = recommend(profile, conn=conn, deployment=dep, host_class=host_class, gpu_arch=arch,
                                host=_host_as_of(newest, use), workload=workload,
                                rows=[r for r in use if r.world_size == ws])
                picks.append(rec.backend)
            prev_obs = observations(r for r in shape_rows if fleet_of[r.run_id] == prev_f and r.world_size == ws)
            now_obs = observations(r for r in shape_rows if fleet_of[r.run_id] == now_f and r.world_size == ws)
            out.append(RecommendationChange(
                model=model, host_class=host_class, before=picks[0], now=picks[1],
                before_run=prev_f, now_run=now_f,
                moved=moved_points(prev_obs, now_obs, min_change=min_slowdown, noise_k=noise_k),
            ))
    return out


def _host_as_of(host: Any, rows: list[Any]) -> Any:
    """The class's newest host with the software versions of the newest of ``rows``: what
    ``recommend`` targeted when those rows were the newest data (it prefers rows measured
    with the target's flashinfer / driver)."""
    if host is None or not rows:
        return host
    newest = max(rows, key=lambda r: (r.run_started_at, r.id))
    versions = dict(newest.versions or {})
    return dataclasses.replace(host, versions={**host.versions, **{k: v for k, v in versions.items()
                                                                   if k not in ("driver", "cuda")}},
                               driver_version=versions.get("driver", host.driver_version),
                               cuda_version=versions.get("cuda", host.cuda_version))


def _common_world_size(rows: list[Any]) -> int:
    sizes = [r.world_size for r in rows]
    return max(set(sizes), key=lambda s: (sizes.count(s), s))


# -- the report ----------------------------------------------------------------------------------


@dataclass
class DriftReport:
    """``fleet drift``'s answer: per-node verdicts and recommendation changes."""

    nodes: list[NodeDrift]
    recommendations: list[RecommendationChange]
    min_slowdown: float
    noise_k: float

    @property
    def flagged(self) -> list[NodeDrift]:
        """The nodes with slow points."""
        return [n for n in self.nodes if n.flagged]

    def to_dict(self) -> dict[str, Any]:
        """The stable JSON document of ``fleet drift --format json`` and ``GET /v1/drift``."""
        return {
            "schema_version": 1,
            "min_slowdown": self.min_slowdown,
            "noise_k": self.noise_k,
            "flagged": [n.machine_id for n in self.flagged],
            "nodes": [n.to_dict() for n in self.nodes],
            "recommendation_changes": [r.to_dict() for r in self.recommendations if r.changed],
            "recommendations": [r.to_dict() for r in self.recommendations],
        }


def analyze(conn: Any, *, models: Iterable[str] | None = None, host_class: str | None = None,
            min_slowdown: float = MIN_SLOWDOWN, noise_k: float = NOISE_K) -> DriftReport:
    """Drift of every node in the store behind ``conn`` (read-only sqlite3 connection).

    :param models: models whose recommendation to re-check (default: those fleet runs measured).
    :param host_class: only this host class.
    """
    check_thresholds(min_slowdown, noise_k)
    if host_class is not None:
        known = [h["host_class"] for h in host_classes(conn)]
        if host_class not in known:
            raise UnknownHostClass(f"host class {host_class!r} is not in the database; known: "
                                   f"{', '.join(known) or 'none'} (`autoselect db info` lists them)")
    results = all_results(conn, kind="micro", statuses=("ok",), host_class=host_class)
    obs = observations(results)
    run_rows = runs(conn)
    nodes = node_drift(obs, min_slowdown=min_slowdown, noise_k=noise_k)
    reference_drift(nodes, obs, {n.host_class: newest_host(conn, n.host_class) for n in nodes})
    return DriftReport(
        nodes=nodes,
        recommendations=recommendation_changes(conn, results, run_rows, models=models,
                                               min_slowdown=min_slowdown, noise_k=noise_k),
        min_slowdown=min_slowdown,
        noise_k=noise_k,
    )


def check_thresholds(min_slowdown: float, noise_k: float) -> None:
    """Raise :class:`BadThreshold` for a floor outside [0, 10) or a non-positive ``noise_k``."""
    if not 0 <= min_slowdown < 10:
        raise BadThreshold(f"--min-slowdown {min_slowdown} is not a fraction between 0 and 10; e.g. 0.05 for 5 %")
    if not 0 < noise_k <= 100:
        raise BadThreshold(f"--noise-k {noise_k} must be a positive number of standard errors; e.g. 3")


def analyze_at(path: Any = None, **kwargs: Any) -> DriftReport:
    """:func:`analyze` on the database at ``path`` (default: ``db.default_path()``), read-only."""
    check_thresholds(kwargs.get("min_slowdown", MIN_SLOWDOWN), kwargs.get("noise_k", NOISE_K))
    conn = connect_readonly(path)
    try:
        return analyze(conn, **kwargs)
    finally:
        conn.close()


# -- fleet status ----------------------------------------------------------------------------------


def node_status(conn: Any) -> list[dict]:
    """One dict per node (machine) in the store: its last run and health, and its drift flag.

    ``health``: ``ok`` (last run complete), ``failed`` (``error`` says why), ``interrupted`` or
    ``running``. ``flagged``/``worst_slowdown``/``slow_points`` come from :func:`node_drift`.
    """
    last: dict[str, dict] = {}
    for r in runs(conn):
        last[r["machine_id"]] = r  # oldest first: the last one wins
    verdicts = {n.machine_id: n for n in node_drift(observations(all_results(conn, statuses=("ok",))))}
    out = []
    for machine_id, r in sorted(last.items(), key=lambda kv: (kv[1]["hostname"], kv[0])):
        health = {"complete": "ok"}.get(r["status"], r["status"])
        nd = verdicts.get(machine_id)
        out.append({
            "machine_id": machine_id,
            "hostname": r["hostname"],
            "host_class": r["host_class"],
            "last_run_id": r["id"],
            "last_run_started_at": r["started_at"],
            "last_run_finished_at": r["finished_at"],
            "last_trigger": r["trigger"],
            "fleet_run": fleet_run_of(r),
            "results": r["results"],
            "health": health,
            "error": (r.get("meta") or {}).get("error"),
            "flagged": bool(nd and nd.flagged),
            "worst_slowdown": round(nd.worst_slowdown, 4) if nd else 0.0,
            "slow_points": len(nd.slow) if nd else 0,
        })
    return out


def status_at(path: Any = None) -> list[dict]:
    """:func:`node_status` of the database at ``path``, read-only."""
    conn = connect_readonly(path)
    try:
        return node_status(conn)
    finally:
        conn.close()
