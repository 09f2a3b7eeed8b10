"""Cold start of `autoselect recommend` and `autoselect check`: fresh processes beside `import click`.

Fills a database with ``perf/db_lookup.py``'s :func:`fill` (the real schema, several host
classes, machines, backends, shapes, world sizes and token counts; 1,000,000 results by
default), then times, interleaved in the same run, fresh Python processes of:

* ``python -c pass``                          (the interpreter alone: the floor)
* ``python -c "import click"``                (the yardstick of the goal)
* ``python -m autoselect recommend ...``      on two local classes of the database, text and json
* the same two on a reference class (``--host-class ref-b200_sxm-x8``: NVIDIA's published tables,
  the packaged read-only SQLite file next to the store; nothing of the store's million rows
  belongs to it)
* ``python -m autoselect check -- vllm serve ...`` as the docs write it (no ``--gpu-arch``: the
  local GPUs' arch is asked of NVML, and without vLLM installed nothing else is asked)
* the json command with ``$AUTOSELECT_VLLM_PYTHON`` set (``--vllm-python``, default the CI's
  ``/opt/vllm-venv/bin/python``): the target version is then read from that environment's
  package metadata, whose ``sys.path`` costs one subprocess the first time and is cached
  after (``autoselect/bridge/interpreter.py``); timed with the cache warm, and cold (a fresh empty
  ``$AUTOSELECT_CACHE_DIR`` for every run: the first run after installing a package)

and prints, per command, the median and fastest wall time, the median CPU time (user + system of
the child: steadier than wall time on a shared machine) and both ratios to ``import click``.
Children run as installed: bytecode cached (outside the tree), ``python -m autoselect``.

Goals (timing; judged in the full mode, see perf/goals.py): every recommend row and check at most
2x ``import click`` (median wall time; the cold-cache row is printed, not judged: it runs once per
package change), and recommend on a reference class no slower than on a local class (the median
of the reference rows <= that of the local rows, the two local classes' own difference printed as
the noise).

    python3 perf/recommend_latency.py                        # 1,000,000 results in a temp dir
    python3 perf/recommend_latency.py --results 200000 --keep /tmp/big.db
    python3 perf/recommend_latency.py --quick                # ~20,000 results, 3 runs each
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "perf"))

from db_lookup import fill  # noqa: E402  (the lookup benchmark's filler: both time the same kind of database)
from goals import Goals, add_quick  # noqa: E402

MODEL = str(ROOT / "tests" / "fixtures" / "models" / "deepseek-r1-nvfp4")
#: (host class of the filler, what the model dispatches there): nvfp4 on Blackwell, bf16 on Hopper
TARGETS = ("b200x8-hgx", "h200x8-hgx")
#: A reference class of the same GPUs (answered from the packaged reference data).
REFERENCE = "ref-b200_sxm-x8"
CLICK = "python -c 'import click'"
#: each fast command's cold start, at most this many times ``import click``'s
GOAL_RATIO = 2.0
VLLM_PYTHON = "/opt/vllm-venv/bin/python" if Path("/opt/vllm-venv/bin/python").exists() else sys.executable
COLD = "(cache cold)"


def make_hosts_realistic(path: Path) -> None:
    """Give the filler's hosts the packages and NVLinks an HGX node has.

    The filler stores empty ``versions`` and no GPU list, so the rules would reject every
    FlashInfer and DeepEP backend as "not installed" and recommend would only weigh the
    default. Declaring them installed makes every backend a candidate: the timed path is
    the full comparison over all five backends' rows.
    """
    versions = json.dumps({"torch": "2.11.0", "nccl": "2.28.9", "flashinfer": "0.7.2.post1",
                           "vllm": "0.33.0", "deep_ep": "1.2.1"}, sort_keys=True, separators=(",", ":"))
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("UPDATE hosts SET versions = ?, all_nvlinks_up = 1", (versions,))
    conn.close()


def timed(argv: list[str], env: dict[str, str]) -> float:
    """Wall milliseconds of one fresh process; fails loudly on a non-zero exit."""
    return measured(argv, env)[0]


def measured(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall ms, CPU ms) of one fresh process; fails loudly on an exit status other than 0 or 1
    (check's 1 is a finding).

    ``env["AUTOSELECT_CACHE_DIR"]`` ending in ``/cold``: a fresh empty cache directory for
    this run (the cold-cache row).
    """
    if env.get("AUTOSELECT_CACHE_DIR", "").endswith("/cold"):
        env = dict(env, AUTOSELECT_CACHE_DIR=tempfile.mkdtemp(dir=env["AUTOSELECT_CACHE_DIR"]))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    out = subprocess.run(argv, capture_output=True, text=True, env=env)
    ms = (time.perf_counter() - t) * 1e3
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(argv)} failed ({out.returncode}):\n{out.stderr}")
    return ms, (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1e3


def main() -> int:
    """Fill (or reuse) the database, time the commands interleaved, print medians, ratios and goals."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=int, default=None, help="approximate number of results to fill "
                    "(default 1,000,000)")
    ap.add_argument("--shapes", type=int, default=None, help="distinct shapes in the filled database (default 60)")
    ap.add_argument("--repeats", type=int, default=None, help="timed runs of each command (default 15)")
    ap.add_argument("--keep", type=Path, default=None, help="keep (or reuse) the filled database at this path")
    ap.add_argument("--vllm-python", default=VLLM_PYTHON,
                    help="AUTOSELECT_VLLM_PYTHON for the vllm-python rows (any Python works: without vllm "
                         "the same lookup runs and finds none)")
    add_quick(ap, "~20,000 results (6 shapes), 3 runs of each command")
    args = ap.parse_args()
    results = args.results or (20_000 if args.quick else 1_000_000)
    shapes = args.shapes or (6 if args.quick else 60)
    repeats = args.repeats or (3 if args.quick else 15)
    goals = Goals(args.quick)

    tmp = tempfile.TemporaryDirectory()
    path = args.keep or Path(tmp.name) / "perf.db"
    if not path.exists():
        written, fill_s = fill(path, results, shapes)
        make_hosts_realistic(path)
        print(f"filled {written:,} results in {fill_s:.1f} s ({os.path.getsize(path) / 1e6:.0f} MB)")
    else:
        print(f"reusing {path}")
    count = sqlite3.connect(path).execute("SELECT COUNT(*) FROM results").fetchone()[0]

    # As installed: bytecode cached (the warm-up run writes it, outside the tree); a shell
    # with PYTHONDONTWRITEBYTECODE=1 would recompile autoselect on every start.
    env = dict(os.environ, AUTOSELECT_DB=str(path), HF_HUB_OFFLINE="1",
               PYTHONPYCACHEPREFIX=str(Path(tmp.name) / "pycache"),
               AUTOSELECT_CACHE_DIR=str(Path(tmp.name) / "cache"),
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("AUTOSELECT_VLLM_PYTHON", None)
    with_vllm = dict(env, AUTOSELECT_VLLM_PYTHON=args.vllm_python)
    py = sys.executable
    commands = {"python -c pass": ([py, "-c", "pass"], env), CLICK: ([py, "-c", "import click"], env)}
    for hc in TARGETS:
        base = [py, "-m", "autoselect", "recommend", "--model", MODEL, "--host-class", hc]
        commands[f"recommend {hc} (text)"] = (base, env)
        commands[f"recommend {hc} (json)"] = (base + ["--format", "json"], env)
    vllm_json = base + ["--format", "json"]
    ref_base = [py, "-m", "autoselect", "recommend", "--model", MODEL, "--host-class", REFERENCE]
    commands[f"recommend {REFERENCE} (text)"] = (ref_base, env)
    commands[f"recommend {REFERENCE} (json)"] = (ref_base + ["--format", "json"], env)
    check = [py, "-m", "autoselect", "check", "--", "vllm", "serve", MODEL, "-dp", "8", "-ep",
             "--all2all-backend", "flashinfer_nvlink_one_sided"]
    commands["check -- vllm serve ... (no --gpu-arch)"] = (check, env)
    commands[f"recommend {TARGETS[-1]} (json, vllm python)"] = (vllm_json, with_vllm)
    cold = Path(tmp.name) / "cold"
    cold.mkdir()
    commands[f"recommend {TARGETS[-1]} (json, vllm python) {COLD}"] = (
        vllm_json, dict(with_vllm, AUTOSELECT_CACHE_DIR=str(cold)))

    answer = subprocess.run(commands[f"recommend {TARGETS[0]} (json)"][0], capture_output=True, text=True, env=env)
    doc = json.loads(answer.stdout)
    print(f"database: {count:,} results; answer for {TARGETS[0]}: {doc['backend']} "
          f"(confidence {doc['confidence']}, {doc['data_used']['results_considered']} results considered, "
          f"{len(doc['candidates'])} candidates)")
    answer = subprocess.run(commands[f"recommend {REFERENCE} (json)"][0], capture_output=True, text=True, env=env)
    doc = json.loads(answer.stdout)
    print(f"answer for {REFERENCE}: {doc['backend']} (confidence {doc['confidence']}, "
          f"{doc['reference']['points']} reference points, {len(doc['candidates'])} candidates)")
    answer = subprocess.run(vllm_json, capture_output=True, text=True, env=with_vllm)
    doc = json.loads(answer.stdout)
    print(f"with AUTOSELECT_VLLM_PYTHON={args.vllm_python}: vLLM {doc['vllm_version']} "
          f"({doc['vllm_version_source']})")
    Path(env["AUTOSELECT_CACHE_DIR"]).mkdir(exist_ok=True)

    for argv, run_env in commands.values():  # warm the page cache, .pyc files and the vllm-python cache once
        measured(argv, run_env)
    wall: dict[str, list[float]] = {name: [] for name in commands}
    cpu: dict[str, list[float]] = {name: [] for name in commands}
    load_before = os.getloadavg()[0]
    for _ in range(repeats):
        for name, (argv, run_env) in commands.items():
            w, c = measured(argv, run_env)
            wall[name].append(w)
            cpu[name].append(c)

    med = {name: statistics.median(v) for name, v in wall.items()}
    med_cpu = {name: statistics.median(v) for name, v in cpu.items()}
    click_ms, click_cpu = med[CLICK], med_cpu[CLICK]
    print(f"{repeats} runs of each, interleaved; load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} "
          f"after, on {os.cpu_count()} CPUs")
    print(f"{'command':<58} {'wall ms':>8} {'fastest':>8} {'/ click':>8} {'cpu ms':>8} {'/ click':>8}")
    for name in commands:
        print(f"{name:<58} {med[name]:>8.1f} {min(wall[name]):>8.1f} {med[name] / click_ms:>7.2f}x "
              f"{med_cpu[name]:>8.1f} {med_cpu[name] / click_cpu:>7.2f}x")
    judged = [n for n in commands if (n.startswith(("recommend", "check"))) and COLD not in n]
    for name in judged:
        ratio = med[name] / click_ms
        goals.check(f"{name} / import click (wall)", f"{ratio:.2f}x ({med[name]:.1f} / {click_ms:.1f} ms; "
                    f"cpu {med_cpu[name] / click_cpu:.2f}x)", f"<= {GOAL_RATIO:g}x", ratio <= GOAL_RATIO)
    cold_row = next(n for n in commands if COLD in n)
    warm = cold_row.replace(f" {COLD}", "")
    print(f"AUTOSELECT_VLLM_PYTHON: cached {med[warm]:.1f} ms, cache cold {med[cold_row]:.1f} ms "
          f"(+{med[cold_row] - med[warm]:.1f} ms once per package change), vs no vllm python "
          f"{med[warm.replace(', vllm python', '')]:.1f} ms")
    local = [med[f"recommend {hc} ({f})"] for hc in TARGETS for f in ("text", "json")]
    reference = [med[f"recommend {REFERENCE} ({f})"] for f in ("text", "json")]
    ref_ratio = statistics.median(reference) / statistics.median(local)
    goals.check(f"recommend {REFERENCE} / local classes", f"{ref_ratio:.2f} ({statistics.median(reference):.1f} vs "
                f"{statistics.median(local):.1f} ms; the two local classes differ by {abs(local[0] - local[2]):.1f} ms "
                f"text, {abs(local[1] - local[3]):.1f} ms json)", "<= 1 (no slower)", ref_ratio <= 1.0)
    return goals.finish()


if __name__ == "__main__":
    raise SystemExit(main())
