"""What ``autoselect recommend`` imports before it answers, beside ``import click``, in one run.

``recommend``'s start is mostly imports: this times, interleaved, fresh Python processes of

* ``python -c pass``                               (the interpreter alone)
* ``python -c "import click"``                     (the yardstick of perf/recommend_latency.py)
* ``python -c "import autoselect.cli.recommend_cmd, autoselect.selector"``  (recommend's import path:
  what ``python -m autoselect recommend`` has loaded when its callback starts to work)

and prints the medians and the ratios to ``import click``; then, in one more process, how many
dataclasses that path creates and what they cost (on CPython 3.11 each one compiles its generated
methods one by one, ~0.08 ms each: ~0.3-1 ms a class, which is why the path's immutable records
are NamedTuples, ~0.1 ms a class), the modules that cost most, and how many modules of autoselect
and db it loads. The modules recommend must not load (the vLLM bridge's worker protocol, client
and quantization answers; the rules' --moe-backend table; the published reference's modules,
which the package face loads on first use; tune, fleet, report) are listed if they appear.

    python3 perf/recommend_imports.py                  # 21 runs of each
    python3 perf/recommend_imports.py --repeats 41
    python3 perf/recommend_imports.py --quick          # 3 runs of each
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "perf"))

from goals import EXACT, Goals, add_quick  # noqa: E402
from recommend_latency import timed  # noqa: E402  (the same fresh-process timer as the whole command's)

RECOMMEND_PATH = "import autoselect.cli.recommend_cmd, autoselect.selector"
#: Modules recommend's import path has no use for (loaded only by --validate, check, inspect, an answer
#: from the published reference, the regret study's given points, tune, fleet, report).
MUST_NOT_LOAD = ("autoselect.bridge.client", "autoselect.bridge.protocol", "autoselect.bridge.quant",
                 "autoselect.bridge.verdicts", "autoselect.rules.moe_backends", "autoselect.reference.",
                 "autoselect.selector.given", "autoselect.tune", "autoselect.fleet", "autoselect.report")

#: Run in a fresh process: count and time every dataclass the recommend path creates.
PROBE = f"""
import collections, dataclasses, json, sys, time
orig = dataclasses._process_class
cost = collections.Counter(); count = collections.Counter()
def timed(cls, *a, **k):
    t = time.perf_counter()
    out = orig(cls, *a, **k)
    cost[cls.__module__] += time.perf_counter() - t
    count[cls.__module__] += 1
    return out
dataclasses._process_class = timed
t = time.perf_counter()
{RECOMMEND_PATH}
total = time.perf_counter() - t
print(json.dumps({{"import_ms": total * 1e3, "cost_ms": {{m: v * 1e3 for m, v in cost.items()}}, "count": count,
                  "modules": sorted(m for m in sys.modules if m.split(".")[0] in ("autoselect", "db"))}}))
"""


def main() -> int:
    """Time the three imports interleaved, then probe the dataclasses; print medians, ratios, counts."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=None, help="timed runs of each command (default 21)")
    add_quick(ap, "3 runs of each")
    args = ap.parse_args()
    args.repeats = args.repeats or (3 if args.quick else 21)
    goals = Goals(args.quick)

    with tempfile.TemporaryDirectory() as tmp:
        # As installed: bytecode cached (the warm-up run writes it, outside the tree).
        env = dict(os.environ, PYTHONPYCACHEPREFIX=str(Path(tmp) / "pycache"), AUTOSELECT_CACHE_DIR=str(Path(tmp) / "cache"),
                   PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        py = sys.executable
        commands = {"python -c pass": [py, "-c", "pass"], "import click": [py, "-c", "import click"],
                    "recommend's imports": [py, "-c", RECOMMEND_PATH]}
        for argv in commands.values():  # warm the page cache and the .pyc files once
            timed(argv, env)
        times: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(args.repeats):
            for name, argv in commands.items():
                times[name].append(timed(argv, env))
        probe = json.loads(subprocess.run([py, "-c", PROBE], capture_output=True, text=True, env=env,
                                          check=True).stdout)

    medians = {name: statistics.median(v) for name, v in times.items()}
    base, click_ms = medians["python -c pass"], medians["import click"]
    print(f"{'command':<24} {'median ms':>10} {'min ms':>8} {'above pass':>11} {'/ import click':>15}")
    for name, v in times.items():
        print(f"{name:<24} {medians[name]:>10.1f} {min(v):>8.1f} {medians[name] - base:>10.1f} "
              f"{medians[name] / click_ms:>14.2f}x")
    own = medians["recommend's imports"] - base
    print(f"recommend's imports above the interpreter: {own:.1f} ms = "
          f"{own / (click_ms - base):.2f}x click's own import")
    count, cost = probe["count"], probe["cost_ms"]
    print(f"dataclasses created on the path: {sum(count.values())} ({sum(cost.values()):.1f} ms of "
          f"{probe['import_ms']:.1f} ms import in the probe); modules of autoselect and db loaded: "
          f"{len(probe['modules'])}")
    for module in sorted(cost, key=cost.get, reverse=True)[:10]:
        print(f"  {cost[module]:6.1f} ms {count[module]:3d}  {module}")
    loaded = [m for m in probe["modules"] if m.startswith(MUST_NOT_LOAD)]
    goals.check("modules recommend has no use for, loaded", ", ".join(loaded) or "none", "none", not loaded, EXACT)
    return goals.finish()


if __name__ == "__main__":
    raise SystemExit(main())
