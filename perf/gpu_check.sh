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
# Sections: environment · install · bench (world size 1: allgather_reducescatter, reference,
# both FlashInfer backends; bf16 payloads, rows marked illegal because one-sided is nvfp4-only)
# · bench nvfp4, two-sided (x and scales in two alltoallv calls, the token index on the scales, ~20 s)
# · the seed's bug (one-sided workspace sized for nvfp4, bf16 payload: must not be ok)
# · pytest -m gpu. Budget: one-sided JIT ~200 s, two-sided ~44 s (first use), the rest ~2.5 min.
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
rm -f "$AUTOSELECT_DB"*
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
  --backends allgather_reducescatter,reference_all_to_all,flashinfer_nvlink_one_sided,flashinfer_nvlink_two_sided \
  --min-time 0.2 --timeout 5 --setup-timeout 400 || FAILED=1
python3 - <<'PY' || FAILED=1
import os, sqlite3, sys
try:
    conn = sqlite3.connect(os.environ["AUTOSELECT_DB"])
    rows = conn.execute("select backend, tokens_per_rank, status, coalesce(error, '') from results").fetchall()
except sqlite3.Error as e:
    print("CHECK bench ok rows: FAIL (no results:", e, ")"); sys.exit(1)
need = {"allgather_reducescatter", "flashinfer_nvlink_one_sided", "flashinfer_nvlink_two_sided"}
ok = {b for b, t, s, e in rows if s == "ok"}
print("ok backends:", sorted(ok)); missing = need - ok
print("CHECK bench ok rows:", "PASS" if not missing else f"FAIL (no ok row for {sorted(missing)})")
sys.exit(1 if missing else 0)
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
                    "where dispatch_dtype = 'nvfp4'").fetchall()
print(rows)
ok = {(b, t) for b, t, s, e in rows if s == "ok"}
need = {("flashinfer_nvlink_two_sided", t) for t in (1, 256)}
print("CHECK two-sided nvfp4 ok rows:", "PASS" if need <= ok else f"FAIL (not ok: {sorted(need - ok)})")
sys.exit(0 if need <= ok else 1)
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

section "pytest -m gpu"
timeout 300 python3 -m pytest -q -m gpu tests/test_bench_gpu.py -p no:cacheprovider || FAILED=1

section "done: $([ $FAILED = 0 ] && echo ALL PASS || echo SOME CHECKS FAILED)"
cp -f "$AUTOSELECT_DB" "$OUT/" 2>/dev/null || true
exit $FAILED
