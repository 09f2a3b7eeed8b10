"""What reading the built-in reference data costs a fresh `autoselect` process.

Times, interleaved in one run, fresh Python processes of

* ``python -c pass``                            (the interpreter alone)
* ``python -c "import click"``                  (the bare import recommend_latency.py measures against)
* ``import autoselect.reference``               (the package, no file opened)
* one recommend-sized lookup: open the packaged SQLite file, then for ``ref-h200_sxm-x8`` and
  ``ref-gb200-x4`` every published backend's rows at the DeepSeek-V3 shape and the derived
  allgather_reducescatter rows over the whole token grid (what an answer for one reference
  class needs)

and, in this process, the same lookup cold (new ReferenceData: open + sources) and warm. Prints
medians (wall and CPU time: the CPU column is steadier on a shared machine) and the ratio to
``import click``; children run with bytecode caching on, as an installed package does. The reference path must stay a small part of
recommend's ~75 ms per fresh process.

    python3 perf/reference_query.py            # 15 runs of each
    python3 perf/reference_query.py --runs 30
    python3 perf/reference_query.py --quick    # 2 runs of each
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from goals import Goals, add_quick  # noqa: E402

#: the reference classes a recommend-sized lookup reads, each at a dtype it publishes
CLASSES = (("ref-h200_sxm-x8", "bf16"), ("ref-gb200-x4", "nvfp4"))

LOOKUP = """
from autoselect.reference import ReferenceData
ref = ReferenceData()
n = 0
for cls, dtype in {classes!r}:
    for backend in {backends!r}:
        n += len(ref.query(cls, backend, hidden=7168, top_k=8, experts=256, dtype=dtype))
assert n > 50, n
"""

#: what recommend imports before it answers: the selector and the results store reader (sqlite3, json)
RECOMMEND_IMPORTS = "import json, autoselect.selector, db.queries"


def reference_backends() -> tuple[str, ...]:
    """Every backend :data:`CLASSES` have rows for, published or derived (the default), as the
    reference data itself lists them: the lookup reads what an answer for those classes reads."""
    from autoselect.reference import ReferenceData

    ref = ReferenceData()
    return tuple(dict.fromkeys(row["backend"] for cls, _ in CLASSES for row in ref.available(cls)))


def cases(backends: tuple[str, ...]) -> dict[str, str]:
    """Name -> the code one fresh process runs."""
    lookup = LOOKUP.format(classes=CLASSES, backends=backends)
    return {
        "python -c pass": "pass",
        "import click": "import click",
        "import autoselect.reference": "import autoselect.reference",
        f"open + lookup ({len(CLASSES)} classes, {len(backends)} backends)": lookup,
        "import autoselect.selector (recommend's library)": RECOMMEND_IMPORTS,
        "selector + reference open + lookup": RECOMMEND_IMPORTS + "\n" + lookup,
    }


def fresh(code: str, env: dict) -> tuple[float, float]:
    """(wall ms, CPU ms) of one fresh process running ``code``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT)
    ms = (time.perf_counter() - t) * 1e3
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        raise SystemExit(f"failed: {code!r}\n{out.stderr}")
    return ms, (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1e3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=None, help="runs of each (default 15)")
    add_quick(ap, "2 runs of each")
    args = ap.parse_args()
    args.runs = args.runs or (2 if args.quick else 15)
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    # as installed: bytecode cached (a PYTHONDONTWRITEBYTECODE shell would recompile every module)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    backends = reference_backends()
    codes = cases(backends)
    for code in codes.values():
        fresh(code, env)
    times = {k: [] for k in codes}
    cpu = {k: [] for k in codes}
    for _ in range(args.runs):
        for name, code in codes.items():
            wall, used = fresh(code, env)
            times[name].append(wall)
            cpu[name].append(used)

    from autoselect.reference import ReferenceData

    def lookup(ref):
        for cls, dtype in CLASSES:
            for backend in backends:
                ref.query(cls, backend, hidden=7168, top_k=8, experts=256, dtype=dtype)

    cold, warm = [], []
    for _ in range(args.runs):
        t = time.perf_counter()
        ref = ReferenceData()
        lookup(ref)
        cold.append((time.perf_counter() - t) * 1e3)
        t = time.perf_counter()
        lookup(ref)
        warm.append((time.perf_counter() - t) * 1e3)
        ref.close()

    click = statistics.median(times["import click"])
    size = (ROOT / "autoselect" / "reference" / "data" / "aiconfigurator-0.12.0.sqlite").stat().st_size
    print(f"reference file: {size / 1024:.0f} KiB; {args.runs} runs each, medians")
    print(f"{'fresh process':50s} {'wall ms':>8s} {'/ import click':>14s} {'CPU ms':>8s}")
    for name, ts in times.items():
        m = statistics.median(ts)
        print(f"{name:50s} {m:8.1f} {m / click:14.2f} {statistics.median(cpu[name]):8.1f}")
    print(f"{'in process: lookup, new ReferenceData (cold)':45s} {statistics.median(cold):8.2f}")
    print(f"{'in process: lookup again (warm)':45s} {statistics.median(warm):8.2f}")
    for label, series in (("wall", times), ("CPU", cpu)):
        med = {k: statistics.median(v) for k, v in series.items()}
        alone = med["open + lookup (2 classes, 5 backends)"] - med["python -c pass"]
        added = med["selector + reference open + lookup"] - med["import autoselect.selector (recommend's library)"]
        print(f"{label}: fresh lookup minus bare interpreter {alone:.1f} ms; added to recommend's imports {added:.1f} ms")
    return Goals(args.quick).finish()  # it states none: recommend_latency.py holds the whole command's goal


if __name__ == "__main__":
    raise SystemExit(main())
