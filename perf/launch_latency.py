"""Cold start of `autoselect launch` on every path, beside `import click` and `recommend`, in one run.

``launch`` stands between a container's start and vLLM's, and it is held to the cold-start goal
of ``recommend`` and ``check`` (perf/recommend_latency.py): at most 2x ``python -c "import
click"``, on every path, the picks included. This script times, interleaved in one run, fresh
Python processes of:

* ``python -c pass``                  (the interpreter alone: the floor)
* ``python -c "import click"``        (the yardstick of the goal)
* ``recommend`` asked what each pick asks (the reference class, the measured class, ``--dp 8``):
  a pick runs one recommend, so the difference is what launch adds to the selector's own work;
* ``launch`` as it is run, on each path the decision takes, up to the moment it becomes the
  server: the line's ``vllm`` is a stand-in on ``PATH`` (``#!/bin/sh`` + ``exit 7``), so a run
  ends when launch has replaced itself with it (``os.execvpe``) and the stand-in exits at once:
  - ``cpu``: vLLM's CPU platform (the line sets ``VLLM_TARGET_DEVICE=cpu``): a platform rule, no selector;
  - ``keep``: the line names a legal backend (``--gpu-arch sm100``, one-sided for an NVFP4 model);
  - ``refuse``: the line names an illegal one (exit 2; nothing starts);
  - ``reference``: the pick from NVIDIA's published tables (``--host-class ref-b200_sxm-x8``);
  - ``measured``: the pick from a results database (``--host-class`` of its measured class; the
    shipped fixtures with ``--quick``, else a filled database of ``--results`` rows);

then, in one warm process, the decision alone (:func:`autoselect.launch.plan_launch`, imports
done) for the same paths. The medians, the fastest runs, the CPU time of the children (steadier
than wall time on a shared machine) and the ratios to ``import click`` are printed.

Goals (perf/goals.py: timing goals are judged in the full mode only, exact ones always):

* each path: launch <= 2x ``import click`` (wall median) -- timing, one goal per path;
* what launch adds to a start, on its slowest path (median minus ``python -c pass``) <= 1 s, the
  bound docs/launch.md promises -- timing;
* every launch run ended as its path must: the stand-in server's exit status 7 (launch became
  it), 2 for the refusal -- exact.

    python3 perf/launch_latency.py                 # 15 runs of each, a 200,000-result database
    python3 perf/launch_latency.py --quick         # 5 runs of each, the shipped fixtures (the test suite)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "perf"))

from goals import EXACT, Goals, add_quick  # noqa: E402

MODEL = str(ROOT / "tests" / "fixtures" / "models" / "deepseek-r1-nvfp4")
BF16 = str(ROOT / "tests" / "fixtures" / "models" / "qwen3-30b-a3b")
REFERENCE = "ref-b200_sxm-x8"
FIXTURE_CLASS = "b200x8-9a4f2b61"
PASS = "python -c pass"
CLICK = "python -c 'import click'"
#: launch cold on each path, at most this many times ``import click`` (recommend's and check's goal)
CLICK_RATIO = 2.0
#: what launch adds to a start at most, on any path (milliseconds over ``python -c pass``)
ADDED_MS = 1000.0
#: the stand-in server's exit status: a run that ends with it has exec'd the server
SERVER_EXIT = 7
PICKS = ("reference", "measured")


def line(*flags: str, model: str = MODEL) -> list[str]:
    return ["vllm", "serve", model, "-dp", "8", "--enable-expert-parallel", *flags]


def paths(db: Path, host_class: str) -> dict[str, tuple[dict[str, str], list[str], int]]:
    """path -> (launch options as LaunchOptions fields, the server line, the exit status a run must end with)."""
    return {
        "cpu": ({}, ["VLLM_TARGET_DEVICE=cpu", *line()], SERVER_EXIT),
        "keep": ({"gpu_arch": "sm100"}, line("--all2all-backend", "flashinfer_nvlink_one_sided"), SERVER_EXIT),
        "refuse": ({"gpu_arch": "sm90"}, line("--all2all-backend", "flashinfer_nvlink_one_sided", model=BF16), 2),
        "reference": ({"host_class": REFERENCE, "db_path": str(db)}, line(), SERVER_EXIT),
        "measured": ({"host_class": host_class, "db_path": str(db)}, line(), SERVER_EXIT),
    }


def cli_options(fields: dict[str, str]) -> list[str]:
    """LaunchOptions fields as launch's command-line options."""
    return [w for k, v in fields.items() for w in ("--db" if k == "db_path" else f"--{k.replace('_', '-')}", v)]


def run_once(argv: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """(wall ms, CPU ms of the child, exit status) of one fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    out = subprocess.run(argv, capture_output=True, env=env, stdin=subprocess.DEVNULL)
    ms = (time.perf_counter() - t) * 1e3
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ms, (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1e3, out.returncode


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
    done = subprocess.run([sys.executable, "-c", code, json.dumps(cases), str(repeats)], capture_output=True,
                          text=True, env=env, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def fill_db(path: Path, results: int) -> str:
    """A database of about ``results`` rows (perf/db_lookup.py's filler, HGX hosts); its B200 class."""
    from db_lookup import fill  # the lookup benchmark's filler: the same kind of database
    from recommend_latency import make_hosts_realistic

    fill(path, results, 60)
    make_hosts_realistic(path)
    return "b200x8-hgx"


def main() -> int:
    """Time every row interleaved, print medians and ratios, judge the goals."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=None, help="timed runs of each row (default 15, --quick 5)")
    ap.add_argument("--results", type=int, default=200_000, help="rows of the filled database (not with --quick)")
    add_quick(ap, "5 runs of each row, the shipped fixtures as the measured database")
    args = ap.parse_args()
    repeats = args.repeats or (5 if args.quick else 15)
    goals = Goals(args.quick)

    tmp = tempfile.TemporaryDirectory()
    work = Path(tmp.name)
    db = work / "launch.db"
    if args.quick:
        from db.importing import import_file

        import_file(db, ROOT / "tests" / "fixtures" / "results" / "b200.jsonl")
        host_class = FIXTURE_CLASS
    else:
        t = time.perf_counter()
        host_class = fill_db(db, args.results)
        print(f"filled {args.results:,} results in {time.perf_counter() - t:.1f} s")
    server = work / "bin" / "vllm"  # the stand-in server: launch execs it, it exits at once
    server.parent.mkdir()
    server.write_text(f"#!/bin/sh\nexit {SERVER_EXIT}\n")
    server.chmod(0o755)
    # As installed: bytecode cached outside the tree; never the user's database or cache; no vLLM asked.
    env = dict(os.environ, HF_HUB_OFFLINE="1", AUTOSELECT_DB=str(db), PATH=f"{server.parent}{os.pathsep}"
               f"{os.environ.get('PATH', os.defpath)}", PYTHONPYCACHEPREFIX=str(work / "pycache"),
               AUTOSELECT_CACHE_DIR=str(work / "cache"),
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    for name in ("PYTHONDONTWRITEBYTECODE", "AUTOSELECT_VLLM_PYTHON", "VLLM_TARGET_DEVICE", "VLLM_ALL2ALL_BACKEND"):
        env.pop(name, None)
    py = sys.executable
    cases = paths(db, host_class)
    commands: dict[str, tuple[list[str], int]] = {PASS: ([py, "-c", "pass"], 0),
                                                  CLICK: ([py, "-c", "import click"], 0)}
    for pick in PICKS:
        fields = cases[pick][0]
        commands[f"recommend {pick}"] = ([py, "-m", "autoselect", "recommend", "--model", MODEL, "--dp", "8",
                                          *cli_options(fields)], 0)
    for name, (fields, words, expect) in cases.items():
        commands[f"launch {name}"] = ([py, "-m", "autoselect", "launch", *cli_options(fields), "--", *words], expect)

    for argv, _ in commands.values():  # warm the page cache and the .pyc files once
        run_once(argv, env)
    wall: dict[str, list[float]] = {name: [] for name in commands}
    cpu: dict[str, list[float]] = {name: [] for name in commands}
    wrong: dict[str, set[int]] = {}
    load_before = os.getloadavg()[0]
    for _ in range(repeats):
        for name, (argv, expect) in commands.items():
            w, c, status = run_once(argv, env)
            wall[name].append(w)
            cpu[name].append(c)
            if status != expect:
                wrong.setdefault(name, set()).add(status)
    inside = decision_ms(cases, repeats, env)

    med = {name: statistics.median(v) for name, v in wall.items()}
    med_cpu = {name: statistics.median(v) for name, v in cpu.items()}
    click_ms, click_cpu, pass_ms = med[CLICK], med_cpu[CLICK], med[PASS]
    print(f"{repeats} runs of each, interleaved; load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} "
          f"after, on {os.cpu_count()} CPUs")
    print(f"{'row':<22} {'wall ms':>8} {'fastest':>8} {'/ click':>8} {'cpu ms':>8} {'/ click':>8} {'added ms':>9} "
          f"{'decision ms':>12}")
    for name in commands:
        path = name.removeprefix("launch ")
        decision = f"{inside[path]:>12.1f}" if name.startswith("launch") else f"{'':>12}"
        print(f"{name:<22} {med[name]:>8.1f} {min(wall[name]):>8.1f} {med[name] / click_ms:>7.2f}x "
              f"{med_cpu[name]:>8.1f} {med_cpu[name] / click_cpu:>7.2f}x {med[name] - pass_ms:>9.1f} {decision}")
    for pick in PICKS:
        print(f"launch {pick} over recommend {pick}: {med[f'launch {pick}'] - med[f'recommend {pick}']:+.1f} ms wall, "
              f"{med_cpu[f'launch {pick}'] - med_cpu[f'recommend {pick}']:+.1f} ms cpu (reading and rewriting the "
              f"line, launch's own modules, the stand-in's exec)")

    for path in cases:
        name = f"launch {path}"
        ratio = med[name] / click_ms
        goals.check(f"{name} / import click (wall)", f"{ratio:.2f}x ({med[name]:.1f} / {click_ms:.1f} ms; cpu "
                    f"{med_cpu[name] / click_cpu:.2f}x)", f"<= {CLICK_RATIO:g}x", ratio <= CLICK_RATIO)
    slowest = max((n for n in commands if n.startswith("launch")), key=med.get)
    added = med[slowest] - pass_ms
    goals.check("what launch adds to a start, slowest path", f"{added:.1f} ms ({slowest}, over python -c pass)",
                f"<= {ADDED_MS:g} ms", added <= ADDED_MS)
    goals.check("every run exited as it must", "yes" if not wrong else "; ".join(
                f"{n} exited {sorted(s)}, not {commands[n][1]}" for n, s in wrong.items()),
                f"0; launch: the stand-in server's {SERVER_EXIT} (launch became it), 2 for the refusal", not wrong, EXACT)
    return goals.finish()


if __name__ == "__main__":
    raise SystemExit(main())
