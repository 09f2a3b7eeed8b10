"""Step 2: the evidence per backend, from one or more evidence sources.

An evidence source (:class:`EvidenceSource`) answers, for one backend, with a
:class:`BackendEvidence`: the measured points the latency model is fitted on (each point carries
its evidence kind), the rows behind them, and what disqualifies the backend or makes it
unavailable. :func:`collect` asks the sources strongest first (:data:`EVIDENCE_KINDS` order) and
takes the first that has something to say about the backend; ``sources.py`` builds the list:
:class:`MeasuredEvidence` (this host class's ``micro`` results from the store), then, where it
applies, ``reference_evidence.ReferenceEvidence`` (NVIDIA's published tables), whose points
carry kind ``published``, ``derived`` or ``transferred`` and whose line the bucket values show.

:class:`MeasuredEvidence` reads every ``micro`` result of the host class for the model's
shape at the deployment's world size, summarized (``results_for(summarize=STALENESS_KEYS)``:
the newest row per point, status and versions, with its group's count and median range), so a
history of repeated sweeps costs SQL work, not one Python object per stored row. An
``incorrect`` or ``error`` row disqualifies its backend for the shape; rows measured with tuned
knobs or marked illegal are not the backend's evidence. Numbers are compared on one footing
(``db.records``): the equal-DP-size path only (the unequal path is a calibration of vLLM's
default alone); vLLM's own prepare / finalize (``bench --via vllm``) when every measured backend
has such rows, else the benchmark's adapters, never a mix; at a token count with a row of vLLM's
grouped calls, never the fused variant of the same backend (an ``allgather_reducescatter`` row
stored before the footing was recorded was one packed all_gather). Per token count the newest
up-to-date row wins (up-to-date: measured under the target's vllm / flashinfer / driver), and its
band is widened to the run-to-run spread of the medians when several runs measured the point.
"""

from __future__ import annotations

import sqlite3
from types import MappingProxyType
from typing import Mapping, NamedTuple, Protocol, Sequence

from autoselect.noise import point_rel_halfwidth
from autoselect.selector.answer import EVIDENCE_KINDS, MEASURED, SYNTHETIC
from autoselect.selector.estimate import ESTIMATE_FLOOR, MeasuredPoint
from autoselect.selector.target import STALENESS_KEYS, RecommendTarget
from db.queries import StoredResult, results_for
from db.records import ADAPTER, EQUAL, FUSED, GROUPED, VLLM

#: Result statuses that disqualify a backend for the whole shape.
DISQUALIFYING = ("incorrect", "error")


class BackendEvidence(NamedTuple):
    """What one evidence source knows about one backend (see the module docstring).

    ``points``: the chosen measurements, ascending in tokens; ``rows``: result id -> the stored
    row behind each point; ``disqualified`` / ``unavailable``: the reason, when the source rules
    the backend out; ``warnings``: what the candidate should say (e.g. timeouts); ``missing``:
    why a source that could have answered has nothing (no published rows, a refused transfer).
    """

    backend: str
    kind: str = MEASURED
    source: str = "this host class's measurements"
    points: tuple[MeasuredPoint, ...] = ()
    rows: Mapping[int, StoredResult] = MappingProxyType({})  # read only: one empty default for all
    disqualified: str | None = None
    unavailable: str | None = None
    warnings: tuple[str, ...] = ()
    missing: str | None = None
    estimate_error: float = ESTIMATE_FLOOR  # the least band of a value estimated between / beyond the points

    @property
    def decides(self) -> bool:
        """True when this evidence says something: points, or a reason to rule the backend out."""
        return bool(self.points or self.disqualified or self.unavailable)


class EvidenceSource(Protocol):
    """One kind of evidence about the backends' latency for a :class:`RecommendTarget`."""

    kind: str

    @property
    def considered(self) -> int:
        """How many stored results (or published rows) the source looked at (JSON ``results_considered``)."""
        ...

    def for_backend(self, backend: str) -> BackendEvidence:
        """What this source knows about ``backend`` (an empty :class:`BackendEvidence` when nothing)."""
        ...


def collect(sources: Sequence[EvidenceSource], backend: str) -> BackendEvidence:
    """The evidence of the strongest source that has any about ``backend``; else the strongest
    empty answer that says why it has nothing (``missing``), else the first's."""
    ordered = sorted(sources, key=lambda s: EVIDENCE_KINDS.index(s.kind))
    answers = [s.for_backend(backend) for s in ordered]
    return next((a for a in answers if a.decides), next((a for a in answers if a.missing), answers[0]))


# --------------------------------------------------------------------------------------
# This host class's measurements
# --------------------------------------------------------------------------------------


def when(row: StoredResult) -> str:
    """When a row was measured (its own timestamp, else its run's start; '' when neither)."""
    return str(row.created_at or row.run_started_at or "")


def group_of(row: StoredResult) -> tuple[int, float | None, float | None]:
    """``(count, lowest median, highest median)`` of the stored results a row stands for: a
    summarized row (``db.queries.SUMMARY_ATTRS``) its group's; any other row, itself alone."""
    extra = vars(row)
    count = extra.get("group_count") or 1
    lo, hi = extra.get("group_p50_min"), extra.get("group_p50_max")
    if lo is None or hi is None:
        lo = hi = row.latency_us_p50
    return count, lo, hi


def stale_keys(row: StoredResult, versions: dict[str, str | None]) -> list[str]:
    """The :data:`STALENESS_KEYS` whose version in ``row`` differs from the target's."""
    have = row.versions or {}
    return [k for k in STALENESS_KEYS if versions.get(k) and have.get(k) and have[k] != versions[k]]


def choose_rows(rows: list[StoredResult], versions: dict[str, str | None]) -> dict[int, StoredResult]:
    """The row used per token count: up-to-date rows before stale ones, then the newest.

    Hot path (every stored point of the shape passes here): plain loops, no helper calls.
    """
    targets = [(k, v) for k, v in versions.items() if v and k in STALENESS_KEYS]
    best: dict[int, tuple] = {}
    for row in rows:
        have = row.versions or {}
        fresh = True
        for k, v in targets:
            got = have.get(k)
            if got and got != v:
                fresh = False
                break
        key = (fresh, row.created_at or row.run_started_at or "", row.id or 0)
        current = best.get(row.tokens_per_rank)
        if current is None or key > current[0]:
            best[row.tokens_per_rank] = (key, row)
    return {t: row for t, (_, row) in best.items()}


def run_to_run_spread(rows: list[StoredResult], chosen: dict[int, StoredResult],
                      versions: dict[str, str | None]) -> dict[int, float]:
    """Per token count measured by several runs (as fresh as the chosen row): the relative
    half-range of their medians, ``(max - min) / 2 / chosen``. It widens the chosen point's
    band when repeated runs disagree more than one run's own noise says."""
    by_tokens: dict[int, list] = {}  # tokens -> [rows, lowest median, highest median]
    for row in rows:
        best = chosen.get(row.tokens_per_rank)
        if best is not None and bool(stale_keys(row, versions)) == bool(stale_keys(best, versions)):
            n, lo, hi = group_of(row)
            acc = by_tokens.get(row.tokens_per_rank)
            if acc is None:
                by_tokens[row.tokens_per_rank] = [n, lo, hi]
            else:
                acc[0] += n
                acc[1] = min(acc[1], lo)
                acc[2] = max(acc[2], hi)
    return {
        t: (hi - lo) / 2 / chosen[t].latency_us_p50
        for t, (n, lo, hi) in by_tokens.items()
        if n > 1 and chosen[t].latency_us_p50
    }


class MeasuredEvidence:
    """The ``micro`` results of the target's host class for its shape and EP size (kind ``measured``)."""

    kind = MEASURED

    def __init__(self, target: RecommendTarget, rows: list[StoredResult]):
        self.target = target
        self.rows = rows
        self.by_backend: dict[str, list[StoredResult]] = {}
        for r in rows:
            self.by_backend.setdefault(r.backend, []).append(r)
        self.via = comparison_path(rows)

    @classmethod
    def from_store(cls, target: RecommendTarget, conn: sqlite3.Connection | None) -> "MeasuredEvidence":
        """Read the store (no rows without a connection or a host class)."""
        rows: list[StoredResult] = []
        if conn is not None and target.host_class is not None:
            rows = results_for(
                conn, hidden=target.profile.hidden_size, top_k=target.profile.top_k,
                experts=target.profile.num_experts, activation_dtype=target.activation_dtype,
                world_size=target.world_size, host_class=target.host_class, kind="micro",
                summarize=STALENESS_KEYS,  # one row per point, status and versions: see results_for
            )
        return cls(target, rows)

    @property
    def considered(self) -> int:
        """How many stored results the rows stand for (a summarized row counts its group)."""
        return sum(group_of(r)[0] for r in self.rows)

    def for_backend(self, backend: str) -> BackendEvidence:
        """The chosen points of ``backend``, or why it is disqualified or unavailable here."""
        # Rows measured with tuned knobs (``autoselect tune``) are not the untuned backend's
        # evidence; their gain reaches the answer through db.tuned (the flags step).
        mine = [r for r in self.by_backend.get(backend, ()) if not r.illegal and not r.knobs]
        bad = sorted((r for r in mine if r.status in DISQUALIFYING), key=when)
        if bad:
            return BackendEvidence(backend, disqualified=_disqualification(bad))
        ok_rows = on_one_footing([r for r in mine if r.status == "ok" and r.latency_us_p50 is not None], self.via)
        if not ok_rows and mine and all(r.status == "unavailable" for r in mine):
            reason = sorted(mine, key=when)[-1].error or "no reason recorded"
            return BackendEvidence(backend, unavailable=f"unavailable on this host class: {reason}")
        timeouts = sorted({r.tokens_per_rank for r in mine if r.status == "timeout"})
        warnings = (f"timed out at {', '.join(map(str, timeouts))} tokens/rank",) if timeouts else ()
        versions = self.target.versions
        chosen = choose_rows(ok_rows, versions)
        spread = run_to_run_spread(ok_rows, chosen, versions)
        # a row of a synthetic run (db.records.SYNTHETIC) stands for nothing measured: its kind says so
        points = tuple(
            MeasuredPoint(t, r.latency_us_p50, max(point_rel_halfwidth(r), spread.get(t, 0.0)), r.id,
                          SYNTHETIC if getattr(r, "synthetic", None) else MEASURED)
            for t, r in sorted(chosen.items())
        )
        made_up = sorted({r.synthetic for r in chosen.values() if getattr(r, "synthetic", None)})
        source = f"synthetic example data ({'; '.join(made_up)})" if made_up else "this host class's measurements"
        return BackendEvidence(backend, source=source, points=points, rows={r.id: r for r in chosen.values()},
                               warnings=warnings)


def comparison_path(rows: list[StoredResult]) -> str:
    """``vllm`` when every backend with an ok equal-DP-size row has one measured through vLLM's own
    prepare / finalize, else ``adapter``: the one path the answer compares every backend on."""
    paths: dict[str, set] = {}
    for r in rows:
        if r.status == "ok" and r.dp_sizes == EQUAL and not r.illegal and not r.knobs:
            paths.setdefault(r.backend, set()).add(r.via)
    return VLLM if paths and all(VLLM in p for p in paths.values()) else ADAPTER


def on_one_footing(rows: list[StoredResult], via: str) -> list[StoredResult]:
    """The rows of one backend that stand on the comparison's footing: equal DP sizes, the path
    ``via``, and at a token count that has a row of vLLM's grouped calls, not the fused variant."""
    rows = [r for r in rows if r.dp_sizes == EQUAL and r.via == via]
    grouped = {r.tokens_per_rank for r in rows if r.calls == GROUPED}
    return [r for r in rows if not (r.calls == FUSED and r.tokens_per_rank in grouped)]


def _disqualification(bad: list[StoredResult]) -> str:
    """The newest incorrect / error result, and how many more there are."""
    r, n_bad = bad[-1], sum(group_of(b)[0] for b in bad)
    return (
        f"{r.status} result at {r.tokens_per_rank} tokens/rank (result {r.id}, run {r.run_id}, "
        f"{when(r) or 'undated'}): {r.error or 'no detail recorded'}"
        + (f"; {n_bad - 1} more such result(s)" if n_bad > 1 else "")
        # a run that measured a mistake (a typo in bench's arguments) must not disqualify for good
        + f"; if run {r.run_id} measured a mistake, `autoselect db drop-run {r.run_id} --yes` removes it"
    )
