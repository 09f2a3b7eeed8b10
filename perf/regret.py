"""Leave-one-out regret of autoselect's pick against two static policies.

For every measured point of a results database — one host class, shape, world size and
token count per rank with at least two legal backends measured ``ok`` — the ``ok``
measurements at that token count are held out, :func:`autoselect.selector.recommend` picks
from the rest (so the held-out count is estimated by the latency model), and the pick's
*true* latency (the held-out measurement) is divided by the true best legal latency there:

    regret = latency(pick) / latency(best legal backend)      (1.0 = the best was picked)

The same ratio is printed for two static policies:

* ``always-default``: vLLM's default, ``allgather_reducescatter``;
* ``fixed-priority``: one-sided, then two-sided, then allgather_reducescatter, skipping
  illegal ones (TensorRT-LLM's ``CommunicationFactory`` order).

Usage::

    python perf/regret.py                    # the shipped fixtures (tests/fixtures/results)
    python perf/regret.py --db results.db    # any results database
    python perf/regret.py --quick            # the same (the suite's run)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "perf"))  # goals.py, also when a test imports this file

from autoselect import rules  # noqa: E402
from autoselect.selector import recommend  # noqa: E402
from autoselect.workload import Deployment, Shape, WorkloadSpec  # noqa: E402
from goals import EXACT, Goals, add_quick  # noqa: E402

PRIORITY = ("flashinfer_nvlink_one_sided", "flashinfer_nvlink_two_sided", "allgather_reducescatter")
POLICIES = ("autoselect", "always-default", "fixed-priority")


def fixture_db(directory: Path) -> Path:
    """A database built by importing the shipped JSONL fixtures."""
    from db.importing import import_file

    path = directory / "fixtures.db"
    for name in ("h200.jsonl", "b200.jsonl"):
        import_file(path, ROOT / "tests" / "fixtures" / "results" / name)
    return path


def groups(conn):
    """(host_class, hidden, top_k, experts, activation_dtype, world_size) of every ok micro result."""
    from db.queries import all_results

    seen = set()
    for r in all_results(conn):
        if r.kind == "micro" and r.status == "ok" and not r.backend.startswith("reference_"):
            seen.add((r.host_class, r.hidden, r.top_k, r.experts, r.activation_dtype, r.world_size))
    return sorted(seen)


def study(conn, vllm_version: str | None):
    """Regrets per policy over every held-out point, and the points skipped (with why)."""
    from db.queries import newest_host, results_for

    regrets: dict[str, list[float]] = defaultdict(list)
    skipped: dict[str, int] = defaultdict(int)
    for host_class, hidden, top_k, experts, dtype, world_size in groups(conn):
        host = newest_host(conn, host_class)
        profile = Shape(hidden=hidden, top_k=top_k, experts=experts, dtype=dtype).profile()
        if world_size < 2 or world_size % 2:
            skipped["odd or single-rank world size"] += 1
            continue
        deployment = Deployment(dp=world_size, tp=1)
        version = vllm_version or rules.NEWEST_VLLM
        rows = results_for(conn, hidden=hidden, top_k=top_k, experts=experts, activation_dtype=dtype,
                           world_size=world_size, host_class=host_class, kind="micro")
        legal = {
            b for b in rules.recommendable_backends(version)
            if rules.legal(b, profile, host, world_size, version, gpu_arch=host.gpu_arch).ok
        }
        disqualified = {r.backend for r in rows if r.status in ("incorrect", "error")}
        by_tokens: dict[int, dict[str, float]] = defaultdict(dict)
        for r in sorted(rows, key=lambda r: r.created_at or ""):
            if r.status == "ok" and not r.illegal and r.backend in legal - disqualified:
                by_tokens[r.tokens_per_rank][r.backend] = r.latency_us_p50  # newest wins
        for tokens, truth in sorted(by_tokens.items()):
            if len(truth) < 2:
                skipped["fewer than two legal backends measured"] += 1
                continue
            rest = [r for r in rows if not (r.tokens_per_rank == tokens and r.status == "ok")]
            rec = recommend(profile, conn=None, rows=rest, deployment=deployment, host_class=host_class,
                            host=host, gpu_arch=host.gpu_arch, vllm_version=version,
                            workload=WorkloadSpec("explicit", ((tokens, 1.0),)))
            best = min(truth.values())
            priority = next((b for b in PRIORITY if b in truth), None)
            picks = {"autoselect": rec.backend, "always-default": rules.DEFAULT_BACKEND,
                     "fixed-priority": priority}
            for policy, backend in picks.items():
                if backend in truth:
                    regrets[policy].append(truth[backend] / best)
                else:
                    skipped[f"{policy}: pick not measured at the held-out point"] += 1
    return regrets, skipped


def summary(values: list[float]) -> dict[str, float]:
    """n, mean, median, p90, max and shares of exact / within-5 % picks of a regret list."""
    ordered = sorted(values)
    return {
        "n": len(ordered),
        "mean": statistics.fmean(ordered),
        "median": statistics.median(ordered),
        "p90": ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))],
        "max": ordered[-1],
        "best": sum(v == 1.0 for v in ordered) / len(ordered),
        "within5": sum(v <= 1.05 for v in ordered) / len(ordered),
    }


def main(argv=None) -> int:
    """Print the regret distribution of each policy."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, default=None, help="results database (default: the fixtures)")
    parser.add_argument("--vllm-version", default=None, help="target vLLM (default: the newest known)")
    add_quick(parser, "the same study (the fixtures are small)")
    args = parser.parse_args(argv)
    from db.queries import connect_readonly

    with tempfile.TemporaryDirectory() as tmp:
        path = args.db or fixture_db(Path(tmp))
        conn = connect_readonly(path)
        regrets, skipped = study(conn, args.vllm_version)
        conn.close()
    print(f"leave-one-out regret = latency(pick) / latency(best legal), database {args.db or 'fixtures'}")
    print(f"{'policy':<16} {'points':>6} {'mean':>7} {'median':>7} {'p90':>7} {'max':>7} {'best':>6} {'<=1.05':>7}")
    for policy in POLICIES:
        if not regrets[policy]:
            print(f"{policy:<16} {0:>6}")
            continue
        s = summary(regrets[policy])
        print(f"{policy:<16} {s['n']:>6} {s['mean']:>7.3f} {s['median']:>7.3f} {s['p90']:>7.3f} "
              f"{s['max']:>7.3f} {s['best']:>6.0%} {s['within5']:>7.0%}")
    for why, n in sorted(skipped.items()):
        print(f"skipped {n}: {why}")
    goals = Goals(args.quick)
    mean = {p: statistics.fmean(regrets[p]) if regrets[p] else float("inf") for p in POLICIES}
    goals.check("autoselect mean regret below both static policies",
                ", ".join(f"{p} {mean[p]:.3f}" for p in POLICIES), "autoselect lowest",
                mean["autoselect"] < min(mean["always-default"], mean["fixed-priority"]), EXACT)
    return goals.finish()


if __name__ == "__main__":
    raise SystemExit(main())
