#!/usr/bin/env bash
# GPU check of the benchmark harness on ONE GPU (no NVLink peers needed), < 8 minutes.
#
# Run from the repository root on the device machine (torch+CUDA, NCCL, setuptools; no network):
#     bash perf/gpu_check.sh
# FlashInfer wheels are taken from .whl/ (flashinfer-python 0.7.2.post1 and its pure-Python
# deps), installed with --no-index --no-deps into /tmp/site. The repo is not pip-installed:
# the adapter registry falls back to its built-in list, and tests/plugins on PYTHONPATH adds
# the test adapter with the nvfp4-sized workspace. Output is tee'd to $OUT/gpu_log.txt.
#
# Sections: environment · install · bench (world size 1: allgather_reducescatter as vLLM calls it
# (one all_gather per tensor in one NCCL group), its fused variant reference_allgather_fused, the
# reference all_to_all, both FlashInfer backends; bf16 payloads, rows marked illegal because
# one-sided is nvfp4-only) · a point above vLLM's capture size (1024 tokens on sm90: vLLM 0.34
# captures up to 512) timed eagerly, the grouped default next to the fused variant (~15 s)
# · bench nvfp4, two-sided (x and scales in two alltoallv calls, the token index on the scales, ~20 s)
# · the seed's bug (one-sided workspace sized for nvfp4, bf16 payload: must not be ok)
# · information only: two-sided declared capturable (~15 s) · pytest -m gpu.
# Budget: one-sided JIT ~200 s, two-sided ~44 s (first use), the rest ~3.5 min.
#
# Nothing may pass silently: every ok row must say how it was timed (the sweep appends point
# lines, and each worker group's start-up / job / close lines, to $OUT/timing.jsonl,
# AUTOSELECT_BENCH_TIMING_LOG, and each result row's timing column) and allgather_reducescatter,
# its fused variant and one-sided must have been replayed from CUDA graphs at the points vLLM
# captures (an eager fallback prints its reason and FAILs), and timed eagerly above that, saying so;
# every ok row needs >= 10 samples, device cuda, and sane times (round trip >= 1 us, dispatch
# and combine > 0); pytest -m gpu must run all its GPU tests with none skipped.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/autoselect-gpu-check}"
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu_log.txt") 2>&1
START=$(date +%s)
section() { echo; echo "=================== $* ($(( $(date +%s) - START )) s) ==================="; }
FAILED=0

section "environment"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'gpus', torch.cuda.device_count(), 'nccl', torch.cuda.nccl.version())"
which nvcc || echo "nvcc not on PATH (FlashInfer JIT looks at CUDA_HOME and /usr/local/cuda too)"

section "install FlashInfer wheels from .whl/"
# perf/pack_device_wheels.sh ships FlashInfer as an unpacked tree in an xz tarball (19 MB
# instead of a 62 MB wheel); the other packages are wheels.
if [ -f .whl/flashinfer-site.tar.xz ]; then
  mkdir -p /tmp/site && tar -xJf .whl/flashinfer-site.tar.xz -C /tmp/site || echo "tarball unpack failed"
fi
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl || echo "wheel install failed"
else
  echo "no .whl/ directory: FlashInfer backends will be recorded unavailable"
fi
export PYTHONPATH="$PWD:/tmp/site:$PWD/tests/plugins${PYTHONPATH:+:$PYTHONPATH}"
export AUTOSELECT_DB="$OUT/gpu_check.db"
export AUTOSELECT_BENCH_TIMING_LOG="$OUT/timing.jsonl"
rm -f "$AUTOSELECT_DB"* "$AUTOSELECT_BENCH_TIMING_LOG"
python3 -c "import flashinfer, flashinfer.comm; print('flashinfer', flashinfer.__version__)" || echo "flashinfer not importable"
python3 - <<'PY'
import importlib.util
need = ["click", "rich", "sqlite_utils", "platformdirs", "pynvml", "numpy", "pytest"]
missing = [m for m in need if importlib.util.find_spec(m) is None]
print("python deps:", "all present" if not missing else "MISSING " + ", ".join(missing) + " (carry their wheels in .whl/)")
PY
python3 -c "from bench.backends import available; print('adapters:', ', '.join(available()))"

section "bench: world size 1, bf16, tokens 1,256 (JIT builds happen here)"
timeout 480 python3 -m autoselect bench --device cuda --world-size 1 --gpu-arch sm90 \
  --hidden 2048 --top-k 8 --experts 32 --dtype bf16 --tokens 1,256 --include-illegal \
  --backends allgather_reducescatter,reference_allgather_fused,reference_all_to_all,flashinfer_nvlink_one_sided,flashinfer_nvlink_two_sided \
  --min-time 0.2 --timeout 5 --setup-timeout 400 || FAILED=1
python3 - <<'PY' || FAILED=1
import os, sqlite3, sys
try:
    conn = sqlite3.connect(os.environ["AUTOSELECT_DB"])
    rows = conn.execute("select backend, tokens_per_rank, status, coalesce(error, '') from results").fetchall()
except sqlite3.Error as e:
    print("CHECK bench ok rows: FAIL (no results:", e, ")"); sys.exit(1)
need = {"allgather_reducescatter", "reference_allgather_fused", "flashinfer_nvlink_one_sided",
        "flashinfer_nvlink_two_sided"}
ok = {b for b, t, s, e in rows if s == "ok"}
print("ok backends:", sorted(ok)); missing = need - ok
print("CHECK bench ok rows:", "PASS" if not missing else f"FAIL (no ok row for {sorted(missing)})")
sys.exit(1 if missing else 0)
PY

section "above vLLM's capture size: 1024 tokens (sm90, vLLM 0.34: captured up to 512), grouped default and fused variant"
timeout 180 python3 -m autoselect bench --device cuda --world-size 1 --gpu-arch sm90 --vllm-version 0.34.0 \
  --hidden 2048 --top-k 8 --experts 32 --dtype bf16 --tokens 1024 \
  --backends allgather_reducescatter,reference_allgather_fused --min-time 0.2 --timeout 5 --setup-timeout 100 || FAILED=1
python3 - <<'PY' || FAILED=1
# The grouped default: vLLM's calls in one NCCL group, its footing stored; the fused variant under its own
# name; at 1024 tokens both eager, each row saying why (vLLM runs that step eagerly).
import os, sqlite3, sys
conn = sqlite3.connect(os.environ["AUTOSELECT_DB"])
rows = conn.execute("select backend, tokens_per_rank, status, timing, coalesce(timing_note, ''), calls, dp_sizes, via, "
                    "coalesce(json_extract(versions, '$.vllm_calls'), '') from results where activation_dtype = 'bf16' "
                    "and backend in ('allgather_reducescatter', 'reference_allgather_fused') order by id").fetchall()
bad = []
for b, t, s, timing, note, calls, dp, via, path in rows:
    print(f"  {b:28} {t:>5} {s:8} timing={timing} calls={calls} dp_sizes={dp} via={via}" + (f"  note: {note}" if note else ""))
    if path:
        print(f"      vllm_calls: {path}")
    want_calls = "grouped" if b == "allgather_reducescatter" else "fused"
    if s != "ok" or calls != want_calls or dp != "equal" or via != "adapter":
        bad.append(f"{b}@{t}: status {s}, calls {calls} (want {want_calls}), dp_sizes {dp}, via {via}")
    if b == "allgather_reducescatter" and "in one NCCL group" not in path:
        bad.append(f"{b}@{t}: vllm_calls {path!r} does not say the gathers ran in one NCCL group")
    if t == 1024 and (timing != "eager" or not note.startswith("as vLLM runs it: 1024 tokens per rank is above")):
        bad.append(f"{b}@{t}: timed {timing} ({note!r}); vLLM runs it eagerly and the row must say so")
    if t <= 512 and timing != "graph":
        bad.append(f"{b}@{t}: timed {timing} ({note!r}); vLLM replays it from a CUDA graph")
seen = {(b, t) for b, t, *_ in rows}
for b in ("allgather_reducescatter", "reference_allgather_fused"):
    for t in (1, 256, 1024):
        if (b, t) not in seen:
            bad.append(f"{b}@{t}: no row")
print("CHECK grouped default, fused variant, eager above the capture size:", "PASS" if not bad else "FAIL")
for line in bad:
    print("   ", line)
sys.exit(1 if bad else 0)
PY

section "bench: world size 1, nvfp4, two-sided (x and scales in two alltoallv calls, the index on the scales)"
# Kernels are built by now: worker start-up and two points (~20 s). One-sided nvfp4 is in pytest -m gpu.
timeout 240 python3 -m autoselect bench --device cuda --world-size 1 --gpu-arch sm90 \
  --hidden 2048 --top-k 8 --experts 32 --dtype nvfp4 --tokens 1,256 --include-illegal \
  --backends flashinfer_nvlink_two_sided --min-time 0.2 --timeout 5 --setup-timeout 200 || FAILED=1
python3 - <<'PY' || FAILED=1
import os, sqlite3, sys
conn = sqlite3.connect(os.environ["AUTOSELECT_DB"])
rows = conn.execute("select backend, tokens_per_rank, status, coalesce(error, '') from results "
                    "where activation_dtype = 'nvfp4'").fetchall()
print(rows)
ok = {(b, t) for b, t, s, e in rows if s == "ok"}
need = {("flashinfer_nvlink_two_sided", t) for t in (1, 256)}
print("CHECK two-sided nvfp4 ok rows:", "PASS" if need <= ok else f"FAIL (not ok: {sorted(need - ok)})")
sys.exit(0 if need <= ok else 1)
PY

section "how every ok row was timed (graph replay or eager), and its numbers"
python3 - <<'PY' || FAILED=1
# How each ok row was timed, and whether its numbers are sane (nothing passes silently).
import json, os, sqlite3, sys
conn = sqlite3.connect(os.environ["AUTOSELECT_DB"])
rows = conn.execute("select activation_dtype, backend, tokens_per_rank, status, device, samples, latency_us_p50, "
                    "dispatch_us_p50, combine_us_p50, timing from results where backend not like 'test_%' "
                    "order by id").fetchall()
path = os.environ["AUTOSELECT_BENCH_TIMING_LOG"]
log = [json.loads(l) for l in open(path)] if os.path.exists(path) else []
timing = {}  # (dtype, backend, tokens) -> point entries in run order
for e in log:
    if e.get("event") != "point":  # start-up, job and close lines: how long the worker groups took
        print(f"  group: {e}")
        continue
    timing.setdefault((e.get("dtype"), e["backend"], e["tokens"]), []).append(e)
want_graph = {"allgather_reducescatter", "reference_allgather_fused", "flashinfer_nvlink_one_sided"}
bad = []
for dt, b, t, s, dev, n, p50, d, c, stored in rows:
    runs = timing.get((dt, b, t), [])
    e = runs.pop(0) if runs else {}
    print(f"  {dt:6} {b:30} {t:>5} {s:10} timing={e.get('timing')} p50={p50} dispatch={d} combine={c} "
          f"samples={n}" + (f"  note: {e['timing_note']}" if e.get("timing_note") else ""))
    if s != "ok":
        continue
    if e.get("timing") not in ("graph", "eager"):
        bad.append(f"{b}@{t}: timing {e.get('timing')!r} in the timing log (expected graph or eager)")
    if stored != e.get("timing"):
        bad.append(f"{b}@{t}: the stored timing {stored!r} differs from the timing log's {e.get('timing')!r}")
    if b in want_graph and t <= 512 and e.get("timing") != "graph":  # vLLM 0.34 on sm90 captures up to 512
        bad.append(f"{b}@{t}: timed {e.get('timing')}, expected CUDA-graph replay ({e.get('timing_note')})")
    if dev != "cuda" or (n or 0) < 10 or not (p50 or 0) >= 1.0 or not (d or 0) > 0 or not (c or 0) > 0:
        bad.append(f"{b}@{t}: implausible row (device {dev}, {n} samples, p50 {p50} us, dispatch {d}, combine {c})")
print("CHECK timing modes and sane numbers:", "PASS" if not bad else "FAIL")
for line in bad:
    print("   ", line)
sys.exit(1 if bad else 0)
PY

section "the seed's bug: one-sided workspace sized for nvfp4, bf16 payload, 256 tokens"
timeout 300 python3 -m autoselect bench --device cuda --world-size 1 --gpu-arch sm90 \
  --hidden 2048 --top-k 8 --experts 32 --dtype bf16 --tokens 256 --include-illegal \
  --backends test_one_sided_nvfp4_workspace --min-time 0.2 --timeout 5 --setup-timeout 400 || FAILED=1
python3 - <<'PY' || FAILED=1
import os, sqlite3, sys
try:
    conn = sqlite3.connect(os.environ["AUTOSELECT_DB"])
    rows = conn.execute("select status, coalesce(error, '') from results where backend = 'test_one_sided_nvfp4_workspace'").fetchall()
except sqlite3.Error as e:
    print("CHECK undersized workspace not ok: FAIL (no results:", e, ")"); sys.exit(1)
print(rows)
good = rows and all(s in ("incorrect", "error") for s, _ in rows)
print("CHECK undersized workspace not ok:", "PASS" if good else "FAIL", "(status incorrect = the gate caught it; error = the kernel raised)")
sys.exit(0 if good else 1)
PY

section "information: FlashInfer two-sided declared capturable (test_two_sided_captured), bf16, tokens 1,256"
# The real two-sided adapter is timed eagerly while one-sided is graph-replayed; this says
# whether two-sided would capture, replay and pass the gate. Printed, never a FAIL.
timeout 120 python3 -m autoselect bench --device cuda --world-size 1 --gpu-arch sm90 \
  --hidden 2048 --top-k 8 --experts 32 --dtype bf16 --tokens 1,256 --include-illegal \
  --backends test_two_sided_captured --min-time 0.2 --timeout 5 --setup-timeout 100 || true
grep '"event": "point", "backend": "test_two_sided_captured"' "$AUTOSELECT_BENCH_TIMING_LOG" | sed 's/^/INFO two-sided under capture: /' \
  || echo "INFO two-sided under capture: no timing line (see the bench output above)"

section "pytest -m gpu"
unset AUTOSELECT_BENCH_TIMING_LOG  # the tests set their own
timeout 300 python3 -m pytest -q -m gpu tests/bench/test_bench_gpu.py -p no:cacheprovider \
  --junitxml "$OUT/gpu_pytest.xml" || FAILED=1
python3 - "$OUT/gpu_pytest.xml" <<'PY' || FAILED=1
# pytest exits 0 when every test is skipped (no CUDA seen, flashinfer not importable): refuse that.
import sys, xml.etree.ElementTree as ET
try:
    suite = ET.parse(sys.argv[1]).getroot()
except (OSError, ET.ParseError) as e:
    print("CHECK pytest -m gpu ran every GPU test: FAIL (no junit report:", e, ")"); sys.exit(1)
suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
n, skipped = int(suite.get("tests", 0)), int(suite.get("skipped", 0))
failed = int(suite.get("failures", 0)) + int(suite.get("errors", 0))
for case in suite.iter("testcase"):
    skip = case.find("skipped")
    if skip is not None:
        print("   skipped:", case.get("name"), "-", skip.get("message"))
good = n >= 8 and skipped == 0 and failed == 0
print(f"CHECK pytest -m gpu ran every GPU test: {'PASS' if good else 'FAIL'} "
      f"({n} tests, {skipped} skipped, {failed} failed; 8 expected)")
sys.exit(0 if good else 1)
PY

section "done: $([ $FAILED = 0 ] && echo ALL PASS || echo SOME CHECKS FAILED)"
cp -f "$AUTOSELECT_DB" "$OUT/" 2>/dev/null || true
exit $FAILED
