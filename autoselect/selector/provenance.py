"""Which measurements an answer rests on: the JSON's ``data_used`` (host class, machines, runs, dates)."""

from __future__ import annotations

from autoselect.selector.answer import DataUsed, RunUsed
from autoselect.selector.evidence import when
from autoselect.selector.target import RecommendTarget
from db.queries import StoredResult


def data_used(target: RecommendTarget, rows: dict[int, StoredResult], stale: dict[str, set[str]],
              considered: int) -> DataUsed:
    """The :class:`DataUsed` of the rows behind the candidates' values (``rows``: result id -> row).

    :param considered: how many stored results the evidence looked at (a summarized row counts its group).
    """
    used = list(rows.values())
    runs: dict[int | None, RunUsed] = {}
    for r in used:
        run = runs.setdefault(r.run_id, RunUsed(run_id=r.run_id, hostname=r.hostname,
                                                started_at=r.run_started_at, versions=dict(r.versions or {}),
                                                synthetic=getattr(r, "synthetic", None)))
        run.results += 1
    dates = sorted(when(r) for r in used if when(r))
    gpu_names = sorted({r.gpu_name for r in used} - {None})
    host = target.host
    return DataUsed(
        host_class=target.host_class,
        gpu_name=gpu_names[0] if gpu_names else (host.gpu_name or host.cpu_model if host is not None else None),
        gpu_arch=target.gpu_arch,
        machines=sorted({r.hostname for r in used} - {None}),
        results=len(used),
        results_considered=considered,
        runs=sorted(runs.values(), key=lambda run: (run.started_at or "", run.run_id or 0)),
        oldest=dates[0] if dates else None,
        newest=dates[-1] if dates else None,
        target_versions={k: v for k, v in target.versions.items() if v},
        stale_versions={k: sorted(v) for k, v in stale.items()},
    )
