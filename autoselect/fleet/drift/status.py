"""``fleet status``: every node's last run, its health, and its drift flag."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from autoselect.fleet.drift.nodes import NodeDrift, node_drift
from autoselect.fleet.drift.points import observations
from autoselect.fleet.drift.recommendations import fleet_run_of
from db.queries import all_results, connect_readonly, runs


@dataclass(frozen=True)
class NodeStatus:
    """One node (machine) of the store: its last run, its health and its drift flag.

    ``health``: ``ok`` (last run complete), ``failed`` (``error`` says why), ``interrupted`` or
    ``running``. ``flagged``/``worst_slowdown``/``slow_points`` come from :func:`node_drift`.
    """

    machine_id: str
    hostname: str
    host_class: str
    last_run_id: int
    last_run_started_at: str
    last_run_finished_at: str | None
    last_trigger: str
    fleet_run: str
    results: int
    health: str
    error: str | None
    flagged: bool
    worst_slowdown: float
    slow_points: int

    @classmethod
    def of(cls, run: dict, drift: NodeDrift | None) -> "NodeStatus":
        """The status of the node whose last run is ``run`` (a ``db.queries.runs`` row), with its verdict."""
        return cls(
            machine_id=run["machine_id"], hostname=run["hostname"], host_class=run["host_class"],
            last_run_id=run["id"], last_run_started_at=run["started_at"], last_run_finished_at=run["finished_at"],
            last_trigger=run["trigger"], fleet_run=fleet_run_of(run), results=run["results"],
            health={"complete": "ok"}.get(run["status"], run["status"]), error=(run.get("meta") or {}).get("error"),
            flagged=bool(drift and drift.flagged), worst_slowdown=round(drift.worst_slowdown, 4) if drift else 0.0,
            slow_points=len(drift.slow) if drift else 0,
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON form (a row of ``fleet status --format json``)."""
        return asdict(self)


def node_status(conn: Any) -> list[NodeStatus]:
    """Every node (machine) in the store, by hostname."""
    last: dict[str, dict] = {}
    for r in runs(conn):
        last[r["machine_id"]] = r  # oldest first: the last one wins
    verdicts = {n.machine_id: n for n in node_drift(observations(all_results(conn, statuses=("ok",))))}
    return [NodeStatus.of(r, verdicts.get(machine_id))
            for machine_id, r in sorted(last.items(), key=lambda kv: (kv[1]["hostname"], kv[0]))]


def status_at(path: Any = None) -> list[NodeStatus]:
    """:func:`node_status` of the database at ``path``, read-only."""
    conn = connect_readonly(path)
    try:
        return node_status(conn)
    finally:
        conn.close()
