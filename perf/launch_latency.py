"""Wall time of `autoselect launch` deciding, as a fresh process, beside `python -c pass` and `import click`.

``launch`` stands between a container's start and vLLM's, so its decision must cost next to
nothing. This script times, interleaved in one run, fresh Python processes of:

* ``python -c pass``                  (the interpreter alone)
* ``python -c "import click"``        (the bare import the goal is measured against)
* ``launch --dry-run`` on each path the decision takes:
  - ``cpu``: vLLM's CPU platform (the line sets ``VLLM_TARGET_DEVICE=cpu``): a platform rule, no selector;
  - ``keep``: the line names a legal backend (``--gpu-arch sm100``, one-sided for an NVFP4 model);
  - ``refuse``: the line names an illegal one (exit 2; nothing would start);
  - ``reference``: the pick from NVIDIA's published tables (``--host-class ref-b200_sxm-x8``);
  - ``measured``: the pick from a results database (``--host-class`` of its measured class;
    the shipped fixtures with ``--quick``, else a filled database of ``--results`` rows);

then, in one warm process, the decision alone (:func:`autoselect.launch.plan_launch`, imports
done) for the same paths. ``--dry-run`` stops where ``launch`` would ``exec`` vLLM, so a row is
exactly what launch adds before the server starts.

Goals, judged on the medians (the script exits 1 when one is missed):

1. launch cold, on the paths that do not run the selector (cpu, keep, refuse): <= 2x ``import click``;
2. launch cold on every path, the picks included: what launch adds to the start (its median
   minus ``python -c pass``) <= 1 s, the bound the launcher promises in docs/launch.md;
3. the picks are printed beside ``recommend``'s own goal (< 3x ``import click``,
   perf/recommend_latency.py): a pick is one ``recommend``, and costs what it costs.

    python3 perf/launch_latency.py                 # 15 repeats, a 200,000-result database
    python3 perf/launch_latency.py --quick         # 5 repeats, the shipped fixtures (what the suite runs)
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODEL = str(ROOT / "tests" / "fixtures" / "models" / "deepseek-r1-nvfp4")
BF16 = str(ROOT / "tests" / "fixtures" / "models" / "qwen3-30b-a3b")
REFERENCE = "ref-b200_sxm-x8"
FIXTURE_CLASS = "b200x8-9a4f2b61"
CLICK = "python -c 'import click'"
PASS = "python -c pass"
#: Goal 1: launch on the paths without the selector, as a multiple of the bare ``import click``.
COLD_CLICK_RATIO = 2.0
#: Goal 2: what launch adds to a start at most, on any path (milliseconds over ``python -c pass``).
ADDED_MS = 1000.0
#: recommend's own goal, printed beside the picks (perf/recommend_latency.py).
RECOMMEND_CLICK_RATIO = 3.0
NO_SELECTOR = ("cpu", "keep", "refuse")


def line(*flags: str, model: str = MODEL) -> list[str]:
    return ["vllm", "serve", model, "-dp", "8", "--enable-expert-parallel", *flags]


def paths(db: Path, host_class: str) -> dict[str, tuple[dict[str, str], list[str], int]]:
    """path name -> (launch options as LaunchOptions fields, the server line, the exit status it must have)."""
    return {
        "cpu": ({}, ["VLLM_TARGET_DEVICE=cpu", *line()], 0),
        "keep": ({"gpu_arch": "sm100"}, line("--all2all-backend", "flashinfer_nvlink_one_sided"), 0),
        "refuse": ({"gpu_arch": "sm90"}, line("--all2all-backend", "flashinfer_nvlink_one_sided", model=BF16), 2),
        "reference": ({"host_class": REFERENCE, "db_path": str(db)}, line(), 0),
        "measured": ({"host_class": host_class, "db_path": str(db)}, line(), 0),
    }


def cli_options(fields: dict[str, str]) -> list[str]:
    """LaunchOptions fields as launch's command-line options."""
    return [w for k, v in fields.items() for w in ("--db" if k == "db_path" else f"--{k.replace('_', '-')}", v)]


def timed(argv: list[str], env: dict[str, str], expect: int = 0) -> float:
    """Wall milliseconds of one fresh process; fails loudly on another exit status."""
    t = time.perf_counter()
    out = subprocess.run(argv, capture_output=True, text=True, env=env)
    ms = (time.perf_counter() - t) * 1e3
    if out.returncode != expect:
        raise SystemExit(f"{' '.join(argv)} exited {out.returncode}, not {expect}:\n{out.stderr}")
    return ms


def decision_ms(cases: dict, repeats: int, env: dict[str, str]) -> dict[str, float]:
    """Median in-process milliseconds of plan_launch per path (one warm process, imports done)."""
    code = (
        "import json, statistics, sys, time\n"
        "from autoselect.errors import UserError\n"
        "from autoselect.launch import LaunchOptions, plan_launch\n"

        "cases, repeats = json.loads(sys.argv[1]), int(sys.argv[2])\n"
        "out = {}\n"
        "for name, (kw, words, _) in cases.items():\n"
        "    samples = []\n"
        "    for _ in range(repeats + 1):\n"
        "        t = time.perf_counter()\n"
        "        try:\n"
        "            plan_launch(words, LaunchOptions(**kw))\n"
        "        except UserError:\n"
        "            pass\n"
        "        samples.append((time.perf_counter() - t) * 1e3)\n"
        "    out[name] = statistics.median(samples[1:])\n"
        "print(json.dumps(out))\n"
    )
    import json

    done = subprocess.run([sys.executable, "-c", code, json.dumps(cases), str(repeats)], capture_output=True,
                          text=True, env=env, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def fill_db(path: Path, results: int) -> str:
    """A database of about ``results`` rows (perf/db_lookup.py's filler); its first host class."""
    sys.path.insert(0, str(ROOT / "perf"))
    from db_lookup import fill  # the lookup benchmark's filler: the same kind of database
    from recommend_latency import make_hosts_realistic

    fill(path, results, 60)
    make_hosts_realistic(path)
    return "b200x8-hgx"


def main() -> int:
    """Time every row interleaved, print medians and ratios, judge the goals."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="5 repeats on the shipped fixtures (what the test suite runs)")
    ap.add_argument("--repeats", type=int, default=None, help="timed runs of each row (default 15, --quick 5)")
    ap.add_argument("--results", type=int, default=200_000, help="rows of the filled database (not with --quick)")
    args = ap.parse_args()
    repeats = args.repeats or (5 if args.quick else 15)

    tmp = tempfile.TemporaryDirectory()
    db = Path(tmp.name) / "launch.db"
    if args.quick:
        from db.importing import import_file

        import_file(db, ROOT / "tests" / "fixtures" / "results" / "b200.jsonl")
        host_class = FIXTURE_CLASS
    else:
        t = time.perf_counter()
        host_class = fill_db(db, args.results)
        print(f"filled {args.results:,} results in {time.perf_counter() - t:.1f} s")
    # As installed: bytecode cached outside the tree; never the user's database or cache; no vLLM asked.
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", AUTOSELECT_DB=str(db),
               PYTHONPYCACHEPREFIX=str(Path(tmp.name) / "pycache"), AUTOSELECT_CACHE_DIR=str(Path(tmp.name) / "cache"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("AUTOSELECT_VLLM_PYTHON", None)
    py = sys.executable
    cases = paths(db, host_class)
    commands = {PASS: ([py, "-c", "pass"], 0), CLICK: ([py, "-c", "import click"], 0)}
    for name, (fields, words, expect) in cases.items():
        commands[f"launch {name}"] = ([py, "-m", "autoselect", "launch", "--dry-run", *cli_options(fields), "--",
                                       *words], expect)

    for argv, expect in commands.values():  # warm the page cache and the .pyc files once
        timed(argv, env, expect)
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(repeats):
        for name, (argv, expect) in commands.items():
            times[name].append(timed(argv, env, expect))
    inside = decision_ms(cases, repeats, env)

    medians = {name: statistics.median(v) for name, v in times.items()}
    click_ms, pass_ms = medians[CLICK], medians[PASS]
    print(f"{'row':<26} {'median ms':>10} {'min ms':>8} {'max ms':>8} {'/ import click':>15} {'added ms':>9} "
          f"{'decision ms':>12}")
    for name, v in times.items():
        path = name.removeprefix("launch ")
        decision = f"{inside[path]:>12.1f}" if path in inside else f"{'':>12}"
        print(f"{name:<26} {medians[name]:>10.1f} {min(v):>8.1f} {max(v):>8.1f} {medians[name] / click_ms:>14.2f}x "
              f"{medians[name] - pass_ms:>9.1f} {decision}")
    cold = max(medians[f"launch {p}"] for p in NO_SELECTOR)
    added = max(medians[n] for n in medians if n.startswith("launch")) - pass_ms
    picks = max(medians["launch reference"], medians["launch measured"])
    ok_cold = cold <= COLD_CLICK_RATIO * click_ms
    ok_added = added <= ADDED_MS
    print(f"goal 1, launch cold without the selector (cpu, keep, refuse): slowest {cold:.1f} ms = "
          f"{cold / click_ms:.2f}x import click (goal <= {COLD_CLICK_RATIO:g}x): {'OK' if ok_cold else 'MISSED'}")
    print(f"goal 2, what launch adds to a start on any path: at most {added:.1f} ms over python -c pass "
          f"(goal <= {ADDED_MS:g} ms): {'OK' if ok_added else 'MISSED'}")
    print(f"the picks (reference, measured) run one recommend: slowest {picks:.1f} ms = {picks / click_ms:.2f}x "
          f"import click (recommend's own goal < {RECOMMEND_CLICK_RATIO:g}x, perf/recommend_latency.py)")
    best = {n: min(v) for n, v in times.items()}
    print(f"least-disturbed runs (fastest of each): launch cpu {best['launch cpu']:.1f} ms, keep "
          f"{best['launch keep']:.1f} ms, import click {best[CLICK]:.1f} ms; load average {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} CPUs")
    return 0 if ok_cold and ok_added else 1


if __name__ == "__main__":
    raise SystemExit(main())
