"""What ``confirm`` ran and measured: each backend's run, the report, and its text form."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from autoselect import rules
from autoselect.columns import aligned
from autoselect.confirm.plan import ConfirmPlan


@dataclass
class BackendRun:
    """One backend's ``vllm bench forward`` run: its command, outcome and result rows."""

    backend: str
    command: str
    status: str  # "ok", "error", "timeout"
    elapsed_s: float
    results: list = field(default_factory=list)
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (results as dicts, raw samples left out)."""
        rows = []
        for r in self.results:
            d = r.to_dict()
            d.pop("raw_samples_us", None)
            rows.append(d)
        return {"backend": self.backend, "command": self.command, "status": self.status,
                "elapsed_s": round(self.elapsed_s, 3), "error": self.error, "results": rows}


@dataclass
class ConfirmReport:
    """What ``confirm`` ran and measured, and where it was stored."""

    plan: ConfirmPlan
    vllm_version: str | None
    runs: list[BackendRun]
    run_id: int | None = None
    db_path: str | None = None

    @property
    def vllm_version_warning(self) -> str | None:
        """The line every command prints when the target release is newer than the rules tables."""
        return rules.newer_than_known(self.plan.vllm_version)

    def winners(self) -> dict[int, str]:
        """Tokens per rank -> the backend with the lowest e2e median there (ok rows only)."""
        best: dict[int, tuple[float, str]] = {}
        for run in self.runs:
            for r in run.results:
                if r.status == "ok" and r.latency_us_p50 is not None:
                    if r.tokens_per_rank not in best or r.latency_us_p50 < best[r.tokens_per_rank][0]:
                        best[r.tokens_per_rank] = (r.latency_us_p50, r.backend)
        return {t: b for t, (_, b) in sorted(best.items())}

    def to_dict(self) -> dict[str, Any]:
        """The JSON ``confirm --format json`` prints."""
        return {"schema_version": 2, "plan": self.plan.to_dict(), "vllm_version": self.vllm_version,
                "vllm_version_warning": self.vllm_version_warning, "run_id": self.run_id, "db": self.db_path,
                "runs": [r.to_dict() for r in self.runs],
                "winners": {str(t): b for t, b in self.winners().items()}}




def render_text(report: ConfirmReport) -> str:
    """The text ``confirm`` prints: the plan, then (after a run) one row per case and the winners."""
    plan = report.plan
    lines = [
        f"model       {plan.model}: hidden {plan.profile.hidden_size}, {plan.profile.num_experts} experts, "
        f"top-{plan.profile.top_k}, {plan.activation_dtype} dispatch on {plan.gpu_arch}",
        f"deployment  dp {plan.deployment.dp} x tp {plan.deployment.tp} = EP {plan.deployment.world_size}, "
        f"vLLM {report.vllm_version or plan.vllm_version}",
        f"cases       {' '.join(c.spec for c in plan.cases)}",
    ]
    if not report.runs:
        lines.append("")
        lines.append("dry run: the commands confirm would run, one per backend:")
        lines += [f"  {cmd}" for cmd in plan.to_dict()["commands"].values()]
        return "\n".join(lines)
    lines += ["", *_result_table(report)]
    winners = report.winners()
    lines.append("")
    lines.append("e2e winner  " + (", ".join(f"{t} tok/rank: {b}" for t, b in winners.items()) or "none (no ok row)"))
    lines.append(f"stored      run {report.run_id} in {report.db_path} (kind e2e)")
    return "\n".join(lines)


def _result_table(report: ConfirmReport) -> list[str]:
    """One aligned line per stored row: backend, tokens/rank, median, p90, stdrel, status."""
    rows = [["backend", "tokens/rank", "median", "p90", "stdrel", "status"],
            ["", "", "(us)", "(us)", "", ""]]
    for run in report.runs:
        for r in run.results:
            rows.append([
                r.backend, str(r.tokens_per_rank),
                "-" if r.latency_us_p50 is None else f"{r.latency_us_p50:.1f}",
                "-" if r.latency_us_p90 is None else f"{r.latency_us_p90:.1f}",
                "-" if r.latency_stdrel is None else f"{r.latency_stdrel:.4f}",
                r.status + (f" ({r.error})" if r.error else ""),
            ])
    return aligned(rows, right={1, 2, 3, 4})
