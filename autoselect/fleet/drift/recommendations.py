"""Recommendation changes: did the recommended backend change since the previous fleet run, and why.

For each known model (the models fleet runs were asked to measure, from their run meta) and host
class, :func:`autoselect.selector.recommend` is run on the rows of the previous fleet run and on the
rows of the newest one (on the token counts the newest run measured, equally weighted), and the
measurements that moved beyond the noise are listed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Iterable

from autoselect import rules
from autoselect.errors import UserError
from autoselect.fleet.drift.points import MIN_SLOWDOWN, NOISE_K, observations, reference, slow_threshold
from autoselect.model import load_profile
from autoselect.selector import recommend
from autoselect.workload import Deployment, Shape, equal_workload


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


class FleetRuns:
    """Which fleet run each stored run belongs to, and when each fleet run started (its first node run)."""

    def __init__(self, run_rows: list[dict]):
        self.of_run = {r["id"]: fleet_run_of(r) for r in run_rows}
        self.started: dict[str, str] = {}
        for r in run_rows:
            f = self.of_run[r["id"]]
            self.started[f] = min(self.started.get(f, r["started_at"]), r["started_at"])

    def of(self, row: Any) -> str:
        """The fleet run of a stored result."""
        return self.of_run[row.run_id]

    def in_order(self, rows: list[Any]) -> list[str]:
        """The fleet runs of ``rows``, oldest first."""
        return sorted({self.of(r) for r in rows}, key=lambda f: self.started[f])


def known_models(run_rows: list[dict]) -> list[str]:
    """Every model named in a run's meta (``meta.models``), in first-seen order."""
    names: list[str] = []
    for r in run_rows:
        for m in (r.get("meta") or {}).get("models") or []:
            if m not in names:
                names.append(m)
    return names


def recommendation_changes(conn: Any, results: list[Any], run_rows: list[dict], hosts: dict[str, Any], *,
                           models: Iterable[str] | None = None, min_slowdown: float = MIN_SLOWDOWN,
                           noise_k: float = NOISE_K) -> list[RecommendationChange]:
    """For each known model and GPU host class with two fleet runs: the pick on the previous run's
    rows vs the newest run's rows, with the measurements that moved.

    :param results: every stored result (``db.queries.all_results``).
    :param run_rows: every run (``db.queries.runs``); ``meta.models`` names the known models.
    :param hosts: host class -> its newest host (``db.queries.newest_host``), for every class of ``results``.
    :param models: the models to check (default: every model named in a run's meta).
    """
    fleets = FleetRuns(run_rows)
    explicit = models is not None
    by_class: dict[str, list[Any]] = {}
    for r in results:
        by_class.setdefault(r.host_class, []).append(r)
    out = []
    for model in (models if explicit else known_models(run_rows)):
        try:
            profile = load_profile(model)
        except UserError:
            if explicit:
                raise
            continue  # a model a past run measured that this machine cannot resolve any more
        for host_class, rows in sorted(by_class.items()):
            change = _class_change(conn, model, profile, host_class, rows, fleets, hosts[host_class],
                                   min_slowdown=min_slowdown, noise_k=noise_k)
            if change is not None:
                out.append(change)
    return out


def _class_change(conn: Any, model: str, profile: Any, host_class: str, rows: list[Any], fleets: FleetRuns,
                  newest: Any, *,
                  min_slowdown: float, noise_k: float) -> RecommendationChange | None:
    """The pick for ``model`` on one host class before and after its newest fleet run (None for a
    CPU class, or fewer than two fleet runs of the model's shape)."""
    arch = next((r.gpu_arch for r in rows if r.gpu_arch), None)
    if arch is None:
        return None  # a CPU class: nothing vLLM would serve on
    shape = Shape.of(profile, arch)
    shape_rows = [r for r in rows if (r.hidden, r.top_k, r.experts, r.activation_dtype)
                  == (shape.hidden, shape.top_k, shape.experts, shape.dtype)]
    order = fleets.in_order(shape_rows)
    if len(order) < 2:
        return None
    prev_f, now_f = order[-2], order[-1]
    # "before": everything measured up to and including the previous fleet run
    before_rows = [r for r in shape_rows if fleets.started[fleets.of(r)] <= fleets.started[prev_f]]
    ws = _common_world_size(shape_rows)
    dep = Deployment(dp=ws, tp=1)
    # compared on the token counts the newest fleet run measured, equally weighted
    workload = equal_workload(sorted({r.tokens_per_rank for r in shape_rows if fleets.of(r) == now_f}))
    picks = [recommend(profile, conn=conn, deployment=dep, host_class=host_class, gpu_arch=arch,
                       host=_host_as_of(newest, use), vllm_version=_vllm_as_of(use), workload=workload,
                       rows=[r for r in use if r.world_size == ws]).backend
             for use in (before_rows, shape_rows)]
    prev_obs = observations(r for r in shape_rows if fleets.of(r) == prev_f and r.world_size == ws)
    now_obs = observations(r for r in shape_rows if fleets.of(r) == now_f and r.world_size == ws)
    return RecommendationChange(model=model, host_class=host_class, before=picks[0], now=picks[1],
                                before_run=prev_f, now_run=now_f,
                                moved=moved_points(prev_obs, now_obs, min_change=min_slowdown, noise_k=noise_k))


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


def _vllm_as_of(rows: list[Any]) -> str | None:
    """The vLLM the newest of ``rows`` was measured under: the release ``recommend`` targeted then
    (None: not recorded, or not a release the rules can read; the usual resolution applies)."""
    if not rows:
        return None
    version = (max(rows, key=lambda r: (r.run_started_at, r.id)).versions or {}).get("vllm")
    try:
        rules.parse_version(version or "")
    except rules.InvalidVllmVersion:
        return None
    return version


def _common_world_size(rows: list[Any]) -> int:
    sizes = [r.world_size for r in rows]
    return max(set(sizes), key=lambda s: (sizes.count(s), s))


