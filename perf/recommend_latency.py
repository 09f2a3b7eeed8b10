"""Wall time of `autoselect recommend` as a fresh process on a 1,000,000-result database.

Fills a database with ``perf/db_lookup.py``'s :func:`fill` (the real
schema, several host classes, machines, backends, shapes, world sizes and token counts),
then times, interleaved in the same run, fresh Python processes of:

* ``python -c pass``                          (the interpreter alone)
* ``python -c "import click"``                (the bare import the goal is measured against)
* ``python -m autoselect recommend ...``      (the whole answer, text output)
* ``python -m autoselect recommend ... --format json``
* the same two on a reference class (``--host-class ref-b200_sxm-x8``: NVIDIA's published tables,
  the packaged read-only SQLite file next to the store; nothing of the store's million rows
  belongs to it), which must be no slower than on a local class
* the json command with ``$AUTOSELECT_VLLM_PYTHON`` set (``--vllm-python``, default the CI's
  ``/opt/vllm-venv/bin/python``): the target version is then read from that environment's
  package metadata, whose ``sys.path`` costs one subprocess the first time and is cached
  after (``autoselect/bridge/interpreter.py``); timed with the cache warm, and cold (a fresh empty
  ``$AUTOSELECT_CACHE_DIR`` for every run: the first run after installing a package)

and prints the medians and the ratio recommend / import click.

Goal: recommend under 150 ms wall, well under 3x the bare ``import click``. The
goal is judged on every row but the cold-cache one, which is printed beside it. Second goal:
recommend on a reference class no slower than on a local class (median of the reference rows <=
the local rows' median, with the two local classes' own difference printed as the noise).

    python3 perf/recommend_latency.py                        # 1,000,000 results in a temp dir
    python3 perf/recommend_latency.py --results 200000 --keep /tmp/big.db
"""

from __future__ import annotations

import argparse
import json
import os
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

MODEL = str(ROOT / "tests" / "fixtures" / "models" / "deepseek-r1-nvfp4")
#: (host class of the filler, what the model dispatches there): nvfp4 on Blackwell, bf16 on Hopper
TARGETS = ("b200x8-hgx", "h200x8-hgx")
#: A reference class of the same GPUs (answered from the packaged reference data).
REFERENCE = "ref-b200_sxm-x8"
CLICK = "python -c 'import click'"
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
    """Wall milliseconds of one fresh process; fails loudly on a non-zero exit.

    ``env["AUTOSELECT_CACHE_DIR"]`` ending in ``/cold``: a fresh empty cache directory for
    this run (the cold-cache row).
    """
    if env["AUTOSELECT_CACHE_DIR"].endswith("/cold"):
        env = dict(env, AUTOSELECT_CACHE_DIR=tempfile.mkdtemp(dir=env["AUTOSELECT_CACHE_DIR"]))
    t = time.perf_counter()
    out = subprocess.run(argv, capture_output=True, text=True, env=env)
    ms = (time.perf_counter() - t) * 1e3
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({out.returncode}):\n{out.stderr}")
    return ms


def main() -> int:
    """Fill (or reuse) the database, time the four commands interleaved, print medians and ratios."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=int, default=1_000_000, help="approximate number of results to fill")
    ap.add_argument("--shapes", type=int, default=60, help="distinct shapes in the filled database")
    ap.add_argument("--repeats", type=int, default=15, help="timed runs of each command")
    ap.add_argument("--keep", type=Path, default=None, help="keep (or reuse) the filled database at this path")
    ap.add_argument("--vllm-python", default=VLLM_PYTHON,
                    help="AUTOSELECT_VLLM_PYTHON for the vllm-python rows (any Python works: without vllm "
                         "the same lookup runs and finds none)")
    args = ap.parse_args()

    tmp = tempfile.TemporaryDirectory()
    path = args.keep or Path(tmp.name) / "perf.db"
    if not path.exists():
        written, fill_s = fill(path, args.results, args.shapes)
        make_hosts_realistic(path)
        print(f"filled {written:,} results in {fill_s:.1f} s ({os.path.getsize(path) / 1e6:.0f} MB)")
    else:
        print(f"reusing {path}")
    count = sqlite3.connect(path).execute("SELECT COUNT(*) FROM results").fetchone()[0]

    # As installed: bytecode cached (the warm-up run writes it, outside the tree); a shell
    # with PYTHONDONTWRITEBYTECODE=1 would recompile autoselect on every start.
    env = dict(os.environ, AUTOSELECT_DB=str(path), HF_HUB_OFFLINE="1",
               PYTHONPYCACHEPREFIX=str(Path(tmp.name) / "pycache"),
               AUTOSELECT_CACHE_DIR=str(Path(tmp.name) / "cache"))
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
        timed(argv, run_env)
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(args.repeats):
        for name, (argv, run_env) in commands.items():
            times[name].append(timed(argv, run_env))

    medians = {name: statistics.median(v) for name, v in times.items()}
    click_ms = medians[CLICK]
    print(f"{'command':<62} {'median ms':>10} {'min ms':>8} {'max ms':>8} {'/ import click':>14}")
    for name, v in times.items():
        print(f"{name:<62} {medians[name]:>10.1f} {min(v):>8.1f} {max(v):>8.1f} {medians[name] / click_ms:>13.2f}x")
    worst = max(medians[n] for n in medians if n.startswith("recommend") and COLD not in n)
    ok = worst < 150 and worst / click_ms < 3
    print(f"slowest recommend median {worst:.1f} ms = {worst / click_ms:.2f}x import click "
          f"(goal < 150 ms and < 3x): {'OK' if ok else 'MISSED'}")
    cold = next(n for n in medians if COLD in n)
    warm = cold.replace(f" {COLD}", "")
    print(f"AUTOSELECT_VLLM_PYTHON: cached {medians[warm]:.1f} ms, cache cold {medians[cold]:.1f} ms "
          f"(+{medians[cold] - medians[warm]:.1f} ms once per package change), vs no vllm python "
          f"{medians[warm.replace(', vllm python', '')]:.1f} ms")
    local = [medians[f"recommend {hc} ({f})"] for hc in TARGETS for f in ("text", "json")]
    reference = [medians[f"recommend {REFERENCE} ({f})"] for f in ("text", "json")]
    ref_ok = statistics.median(reference) <= statistics.median(local)
    print(f"reference class {REFERENCE}: median {statistics.median(reference):.1f} ms vs local classes "
          f"{statistics.median(local):.1f} ms (ratio {statistics.median(reference) / statistics.median(local):.2f}; "
          f"the two local classes differ by {abs(local[0] - local[2]):.1f} ms text, {abs(local[1] - local[3]):.1f} ms "
          f"json) (goal: no slower): {'OK' if ref_ok else 'MISSED'}")
    ok = ok and ref_ok
    best = {n: min(v) for n, v in times.items()}
    rec_min = min(best[n] for n in best if n.startswith("recommend") and COLD not in n)
    print(f"least-disturbed runs (fastest of each): recommend {rec_min:.1f} ms, import click "
          f"{best[CLICK]:.1f} ms, ratio {rec_min / best[CLICK]:.2f}x; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
