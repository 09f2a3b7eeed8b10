"""The fleet view: one shape, one backend, one token count, every node of the host class.

Each node's newest timed row at that point; the drift check (:mod:`autoselect.fleet.drift`) decides
which nodes are flagged.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Sequence

from autoselect.errors import UnknownBackend
from autoselect.fleet import drift
from autoselect.report.errors import FleetTokensNotMeasured
from autoselect.report.series import BackendSeries


@dataclass
class FleetNode:
    """One machine's measurement of the fleet figure's shape and backend."""

    hostname: str
    machine_id: str
    latency_us_p50: float
    latency_us_p10: float | None
    latency_us_p90: float | None
    measured_at: str | None
    drifted: bool = False
    drift_note: str | None = None


@dataclass
class FleetView:
    """The fleet figure's data: one shape, one backend, one token count, every node."""

    backend: str
    tokens_per_rank: int
    nodes: list[FleetNode]
    reference_us: float | None = None  # the fleet median the drift check compares against


def fleet_view(rows: Sequence[Any], series: Sequence[BackendSeries], recommended: str | None, *,
               backend: str | None = None, tokens: int | None = None) -> FleetView | None:
    """The per-node view of one backend at one token count; None when one machine measured.

    Each node's newest timed row at that point; the drift check (:mod:`autoselect.fleet.drift`)
    decides which nodes are flagged.
    """
    machines = {r.machine_id for r in rows}
    if len(machines) < 2:
        if backend is not None or tokens is not None:
            raise UnknownBackend(
                "--fleet-backend / --fleet-tokens need a fleet database (measurements from two or more "
                "machines of the host class); this one has one machine"
            )
        return None
    timed = {s.backend for s in series if s.timed}
    if backend is None:
        candidates = [s.backend for s in series if s.is_candidate]
        backend = recommended if recommended in timed else (candidates[0] if candidates else None)
        if backend is None:
            return None
    elif backend not in timed:
        raise UnknownBackend(
            f"--fleet-backend {backend} has no timed measurement of this shape; "
            f"use one of: {', '.join(sorted(timed)) or 'none'}"
        )
    ok = [r for r in rows if r.backend == backend and r.status == "ok" and r.latency_us_p50 is not None]
    per_tokens: dict[int, set[str]] = {}
    for r in ok:
        per_tokens.setdefault(r.tokens_per_rank, set()).add(r.machine_id)
    if tokens is None:
        tokens = max(per_tokens, key=lambda t: (len(per_tokens[t]), t))
    elif tokens not in per_tokens:
        raise FleetTokensNotMeasured(
            f"--fleet-tokens {tokens}: no node measured {backend} at that token count; "
            f"measured: {', '.join(map(str, sorted(per_tokens)))}"
        )
    newest: dict[str, Any] = {}
    for r in ok:
        if r.tokens_per_rank != tokens:
            continue
        key = (r.created_at or "", r.id)
        if r.machine_id not in newest or key > (newest[r.machine_id].created_at or "", newest[r.machine_id].id):
            newest[r.machine_id] = r
    names = [r.hostname or m for m, r in newest.items()]
    nodes = [
        FleetNode(
            (r.hostname or m) if names.count(r.hostname or m) == 1 else f"{r.hostname or m} ({m[:8]})",
            m, r.latency_us_p50, r.latency_us_p10, r.latency_us_p90, r.created_at,
        )
        for m, r in newest.items()
    ]
    view = FleetView(backend, tokens, nodes, statistics.median(n.latency_us_p50 for n in nodes))
    flag_drift(view, rows)
    return view


def flag_drift(view: FleetView, rows: Sequence[Any]) -> None:
    """Mark the nodes :func:`autoselect.fleet.drift.node_drift` flags, judged on this shape's rows.

    A node is ``drifted`` when its newest run is slow (beyond the noise) at the view's backend
    and token count, against its own history or the other nodes of its class; a node slow only
    at other points of this shape gets a note naming how many, but no red bar.
    """
    verdicts = {nd.machine_id: nd for nd in drift.node_drift(drift.observations(rows))}
    for node in view.nodes:
        nd = verdicts.get(node.machine_id)
        if nd is None or not nd.flagged:
            continue
        here = [sp for sp in nd.slow if sp.backend == view.backend and sp.tokens_per_rank == view.tokens_per_rank]
        if here:
            worst = max(here, key=lambda sp: sp.slowdown)
            versus = "the other nodes" if worst.versus == "class" else "its own history"
            node.drifted = True
            node.drift_note = f"+{worst.slowdown:.0%} vs {versus}"
        else:
            node.drift_note = f"slow at {len(nd.slow)} other point{'s' if len(nd.slow) != 1 else ''}"

