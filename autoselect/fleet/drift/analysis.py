"""``fleet drift``'s answer: every node's verdict and the recommendation changes, from one database."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from autoselect.errors import UnknownHostClass, UserError
from autoselect.fleet.drift.nodes import NodeDrift, node_drift, reference_drift
from autoselect.fleet.drift.points import MIN_SLOWDOWN, NOISE_K, observations
from autoselect.fleet.drift.recommendations import RecommendationChange, recommendation_changes
from db.queries import all_results, connect_readonly, host_classes, newest_host, runs


class BadThreshold(UserError):
    "A drift threshold that is not a usable number."


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
    hosts = {c: newest_host(conn, c) for c in sorted({r.host_class for r in results})}  # one query a class
    reference_drift(nodes, obs, hosts)
    return DriftReport(
        nodes=nodes,
        recommendations=recommendation_changes(conn, results, run_rows, hosts, models=models,
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


