"""The analysis of one shape's stored points: one series per backend, crossovers, bandwidth.

Pure functions of result rows (``db.records.Result`` / ``db.queries.StoredResult``): nothing
here reads the store or draws.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from autoselect.report.style import FAILURE_ORDER, STATE_LABEL, backend_order


@dataclass
class BackendSeries:
    """Every stored point of one backend for the report's shape, split into timed and not."""

    backend: str
    timed: list[Any] = field(default_factory=list)  # Result rows with status ok, ascending tokens
    failed: list[Any] = field(default_factory=list)  # Result rows that were not timed
    illegal_reasons: tuple[str, ...] = ()
    disqualified_reasons: tuple[str, ...] = ()  # the selector's: an incorrect / error row of this shape

    @property
    def tokens(self) -> list[int]:
        """Token counts per rank of the timed points."""
        return [r.tokens_per_rank for r in self.timed]

    @property
    def state(self) -> str:
        """``ok``, ``partial``, ``illegal`` or ``disqualified`` (timed, never a candidate), or the
        failure that kept every point untimed: a backend never timed is not "measured", whatever
        the rules say of it (the page lists why it is illegal apart)."""
        if self.timed:
            if self.illegal_reasons:
                return "illegal"
            if self.disqualified_reasons:
                return "disqualified"
            return "partial" if self.failed else "ok"
        statuses = {r.status for r in self.failed}
        for status in FAILURE_ORDER:
            if status in statuses:
                return status
        return "error"

    @property
    def is_candidate(self) -> bool:
        """Timed and legal: a line the selector may pick."""
        return (
            bool(self.timed)
            and not self.illegal_reasons
            and not self.disqualified_reasons
            and not self.backend.startswith("reference_")
        )

    def label(self) -> str:
        """The legend text: the backend name, plus what is wrong with it when something is."""
        state = self.state
        if state == "illegal":
            # the first clause of the first reason, without the backend's own name
            detail = self.illegal_reasons[0].split(";")[0].removeprefix(self.backend).strip()
            if len(detail) > 60:
                detail = detail[:57] + "..."
        elif state == "disqualified":
            bad = [r for r in self.failed if r.status in ("incorrect", "error")]
            detail = ", ".join(f"{r.status} at T={r.tokens_per_rank}" for r in bad[:2]) or "an older run failed"
        elif state == "partial":
            detail = ", ".join(f"T={r.tokens_per_rank} ({r.status})" for r in self.failed[:3])
            if len(self.failed) > 3:
                detail += f", +{len(self.failed) - 3} more"
        elif state == "unavailable":
            detail = next((r.error for r in self.failed if r.error), None) or "not installed here"
            detail = detail if len(detail) <= 80 else detail[:77] + "..."
        elif state == "incorrect":
            detail = f"{len(self.failed)} token count{'s' if len(self.failed) != 1 else ''}"
        else:
            detail = f"{len(self.failed)} point{'s' if len(self.failed) != 1 else ''}"
        return STATE_LABEL[state].format(backend=self.backend, detail=detail)


def newest_per_token(rows: Iterable[Any]) -> list[Any]:
    """Keep one row per token count: untuned (no knobs) before tuned, then the newest.

    Rows without ``created_at`` sort oldest; ``id`` breaks ties when present.
    """
    best: dict[int, Any] = {}
    for row in rows:
        key = (
            not row.knobs,
            row.created_at or "",
            getattr(row, "id", 0) or 0,
        )
        held = best.get(row.tokens_per_rank)
        if held is None or key > held[0]:
            best[row.tokens_per_rank] = (key, row)
    return [best[t][1] for t in sorted(best)]


def build_series(rows: Iterable[Any], illegal: dict[str, tuple[str, ...]] | None = None) -> list[BackendSeries]:
    """Group result rows into one :class:`BackendSeries` per backend.

    ``illegal`` maps a backend to the reasons it is illegal for the report's model; rows
    measured with ``--include-illegal`` (``illegal=True``) are illegal too. At each token count
    the newest row wins, so a timed point that a later run found incorrect is shown as failed.
    """
    illegal = illegal or {}
    by_backend: dict[str, list[Any]] = {}
    for row in rows:
        by_backend.setdefault(row.backend, []).append(row)
    out = []
    for backend in sorted(by_backend, key=backend_order):
        latest = newest_per_token(by_backend[backend])
        reasons = tuple(illegal.get(backend, ()))
        if not reasons and any(r.illegal for r in latest):
            reasons = ("measured with --include-illegal",)
        out.append(
            BackendSeries(
                backend=backend,
                timed=[r for r in latest if r.status == "ok" and r.latency_us_p50 is not None],
                failed=[r for r in latest if r.status != "ok" or r.latency_us_p50 is None],
                illegal_reasons=reasons,
            )
        )
    return out


@dataclass(frozen=True)
class Crossover:
    """Where two timed backends' median curves cross (interpolated in log-log space)."""

    faster_below: str  # the backend that is faster at smaller token counts
    faster_above: str
    tokens_per_rank: float
    latency_us: float
    on_envelope: bool = True  # no other candidate is faster there: the fastest backend changes here


def interpolate_latency(series: BackendSeries, tokens: float) -> float | None:
    """The median latency of a timed series at ``tokens``, interpolated in log-log space.

    None outside the measured range (no extrapolation).
    """
    pts = [(r.tokens_per_rank, r.latency_us_p50) for r in series.timed if r.latency_us_p50 and r.latency_us_p50 > 0]
    for (t0, y0), (t1, y1) in zip(pts, pts[1:]):
        if t0 <= tokens <= t1:
            if t0 == t1:
                return y0
            frac = (math.log(tokens) - math.log(t0)) / (math.log(t1) - math.log(t0))
            return math.exp(math.log(y0) + frac * (math.log(y1) - math.log(y0)))
    if len(pts) == 1 and pts[0][0] == tokens:
        return pts[0][1]
    return None


def crossovers(series: Sequence[BackendSeries]) -> list[Crossover]:
    """Every crossing of two candidate curves between consecutive shared token counts.

    The sign of ``log(a/b)`` changes between two shared token counts; the crossing is placed
    by linear interpolation of ``log latency`` against ``log tokens``. Exact ties at a
    measured point count as a crossing only when the order flips across it.
    """
    found = []
    cands = [s for s in series if s.is_candidate]
    for i, a in enumerate(cands):
        for b in cands[i + 1 :]:
            pa = {r.tokens_per_rank: r.latency_us_p50 for r in a.timed}
            pb = {r.tokens_per_rank: r.latency_us_p50 for r in b.timed}
            shared = sorted(set(pa) & set(pb))
            diffs = [(t, math.log(pa[t] / pb[t])) for t in shared if pa[t] > 0 and pb[t] > 0]
            nonzero = [(t, d) for t, d in diffs if d != 0.0]
            for (t0, d0), (t1, d1) in zip(nonzero, nonzero[1:]):
                if (d0 < 0) == (d1 < 0):
                    continue
                frac = d0 / (d0 - d1)
                lt = math.log(t0) + frac * (math.log(t1) - math.log(t0))
                la = math.log(pa[t0]) + frac * (math.log(pa[t1]) - math.log(pa[t0]))
                below, above = (a.backend, b.backend) if d0 < 0 else (b.backend, a.backend)
                t_cross, y_cross = math.exp(lt), math.exp(la)
                others = (interpolate_latency(o, t_cross) for o in cands if o is not a and o is not b)
                on_envelope = all(y is None or y >= y_cross for y in others)
                found.append(Crossover(below, above, t_cross, y_cross, on_envelope))
    return sorted(found, key=lambda c: c.tokens_per_rank)


def bandwidth_gbps(row: Any) -> float | None:
    """Logical bandwidth of a timed row in GB/s: stored ``algbw_gbps``, else bytes / t_p50."""
    if row.algbw_gbps is not None:
        return row.algbw_gbps
    if row.bytes_per_rank and row.latency_us_p50:
        return row.bytes_per_rank / (row.latency_us_p50 * 1e-6) / 1e9
    return None

