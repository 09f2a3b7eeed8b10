#!/usr/bin/env bash
# GPU check of the two DeepEP adapters on ONE multi-GPU NVLink node with deep_ep installed.
#
# Needs: 2, 4 or 8 GPUs connected by NVLink (DeepEP's intranode kernels exist for those rank
# counts only), torch+CUDA, deep_ep importable (github.com/deepseek-ai/DeepEP; NVSHMEM for the
# low-latency kernels), this repository pip-installed or on PYTHONPATH. Run from the repo root:
#     bash perf/deepep_gpu_check.sh            # all GPUs (capped at 8)
#     WORLD=4 bash perf/deepep_gpu_check.sh    # a subset
# If `import deep_ep` fails with "Duplicate NCCL runtime" (torch ships its own NCCL), rerun with
# EP_SUPPRESS_NCCL_CHECK=1. Output is tee'd to $OUT/deepep_log.txt; the database is $OUT/deepep.db.
# Budget: ~10-15 minutes on 8 GPUs (first use of DeepEP builds/JITs its kernels).
#
# What it checks (every line starting with CHECK is PASS or FAIL):
#   1. deep_ep imports; both adapters are available at this world size.
#   2. DeepSeek-V3 shape (hidden 7168, top-8, 256 experts): deepep_high_throughput bf16 and
#      fp8_block128, deepep_low_latency bf16 -> every row `ok` (gate passed: bytes, token
#      indices from the handles, combine exact), next to allgather_reducescatter.
#   3. gpt-oss shape (hidden 2880, top-4, 128 experts, bf16): vLLM's hidden padding in both
#      adapters (HT 2880 -> 3072 for a 512-byte row, LL 2880 -> 3072) -> `ok` rows.
#   4. deepep_low_latency with fp8_block128 (DeepSeek's production decode path): the adapter sends
#      the workload's bf16 source rows with use_fp8=True and DeepEP casts them to fp8 + per-128
#      scales inside its kernel (fp32 scales on SM90; power-of-two UE8M0 bytes on SM100, as vLLM
#      asks with DeepGEMM experts). The workload's fp8 rows are quantization-stable, so the gate
#      compares the received fp8 bytes and scales bit-exactly -> every row `ok`, at 7168 and at
#      2880 padded to 3072 (a partial last block; --include-illegal, since the rules refuse
#      block-fp8 with hidden % 128 != 0).
#   5. perf/deepep_ll_fp8_modes.py: the LL adapter with each of DeepEP's three scale formats
#      (fp32; round_scale; round_scale + packed UE8M0), whichever this GPU's vLLM would use, at
#      hidden 7168 and 2880 -> PASS each; a control (bf16 rows doubled) must FAIL the gate on the
#      scale bytes -> PASS when it does.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/autoselect-deepep-check}"
mkdir -p "$OUT"
exec > >(tee "$OUT/deepep_log.txt") 2>&1
START=$(date +%s)
section() { echo; echo "=================== $* ($(( $(date +%s) - START )) s) ==================="; }
FAILED=0
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export AUTOSELECT_DB="$OUT/deepep.db"
rm -f "$AUTOSELECT_DB"*

section "environment"
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv || true
nvidia-smi topo -m || true
GPUS=$(python3 -c "import torch; print(torch.cuda.device_count())")
WORLD="${WORLD:-$(( GPUS < 8 ? GPUS : 8 ))}"
echo "GPUs: $GPUS, world size: $WORLD"
case "$WORLD" in 2|4|8) ;; *) echo "CHECK world size: FAIL (DeepEP intranode needs 2, 4 or 8 GPUs, have $WORLD)"; exit 1;; esac
python3 - <<'PY' || { echo "CHECK deep_ep imports: FAIL"; exit 1; }
import torch, deep_ep
from bench.backends import deepep_common as common
print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())
print("deep_ep", getattr(deep_ep, "__version__", "?"), "sm90 features", deep_ep.Buffer.is_sm90_compiled(),
      "topk_idx_t", getattr(deep_ep, "topk_idx_t", "int64 (no attribute)"))
major = torch.cuda.get_device_capability(0)[0]
plan = common.ll_plan("fp8_block128", 7168, 8, 256, 8, 16, gpu_major=major)
print(f"low-latency fp8 scales on this GPU (sm{major}x): round_scale={plan.round_scale} use_ue8m0={plan.ue8m0}")
print("CHECK deep_ep imports: PASS")
PY

bench() {  # bench LABEL ARGS...: one autoselect bench run, never fatal
  section "$1"; shift
  timeout 900 python3 -m autoselect bench --device cuda --world-size "$WORLD" --gpu-arch sm90 \
    --min-time 0.3 --timeout 8 --setup-timeout 600 "$@" || echo "(bench exited with $?)"
}

bench "DeepSeek-V3 shape, bf16: HT, LL and allgather_reducescatter" \
  --hidden 7168 --top-k 8 --experts 256 --dtype bf16 --tokens 1,16,128,256 \
  --backends deepep_high_throughput,deepep_low_latency,allgather_reducescatter
bench "DeepSeek-V3 shape, bf16, prefill sizes: HT and allgather_reducescatter" \
  --hidden 7168 --top-k 8 --experts 256 --dtype bf16 --tokens 1024,4096 \
  --backends deepep_high_throughput,allgather_reducescatter
bench "DeepSeek-V3 shape, fp8_block128: HT (fp8 values + fp32 block scales on the wire)" \
  --hidden 7168 --top-k 8 --experts 256 --dtype fp8_block128 --tokens 1,16,128,256,4096 \
  --backends deepep_high_throughput,allgather_reducescatter
bench "gpt-oss shape, bf16 (vLLM pads hidden 2880 to 3072 for both)" \
  --hidden 2880 --top-k 4 --experts 128 --dtype bf16 --tokens 16,128 \
  --backends deepep_high_throughput,deepep_low_latency
bench "DeepSeek-V3 shape, fp8_block128: LL (bf16 in, DeepEP's in-kernel fp8 cast, fp8 + scales on the wire)" \
  --hidden 7168 --top-k 8 --experts 256 --dtype fp8_block128 --tokens 1,16,128,256 --backends deepep_low_latency
bench "fp8_block128 at hidden 2880: LL pads to 3072, the last scale block is half zeros" \
  --hidden 2880 --top-k 4 --experts 128 --dtype fp8_block128 --tokens 16,128 --backends deepep_low_latency \
  --include-illegal

section "LL fp8 in every DeepEP scale format (fp32, round_scale, UE8M0) and a control that must fail"
timeout 900 python3 -m torch.distributed.run --nproc_per_node "$WORLD" perf/deepep_ll_fp8_modes.py \
  || { echo "(deepep_ll_fp8_modes.py exited with $?)"; FAILED=1; }

section "rows"
python3 - <<'PY' || FAILED=1
import os, sqlite3, sys
conn = sqlite3.connect(os.environ["AUTOSELECT_DB"])
rows = conn.execute(
    "select backend, activation_dtype, hidden, tokens_per_rank, status, latency_us_p50, dispatch_us_p50,"
    " combine_us_p50, algbw_gbps, coalesce(error, '') from results order by hidden, activation_dtype, backend,"
    " tokens_per_rank").fetchall()
print(f"{'backend':26} {'dtype':13} {'hidden':>6} {'tokens':>6} {'status':11} {'p50 us':>9} {'disp us':>9} "
      f"{'comb us':>9} {'GB/s':>7}  error")
for b, d, h, t, s, p50, dp, cp, bw, e in rows:
    f = lambda v: "" if v is None else f"{v:.1f}"
    print(f"{b:26} {d:13} {h:6} {t:6} {s:11} {f(p50):>9} {f(dp):>9} {f(cp):>9} {f(bw):>7}  {e[:160]}")
fail = False
def check(name, good):
    global fail
    print(f"CHECK {name}:", "PASS" if good else "FAIL")
    fail |= not good
def ok(backend, dtype, hidden):
    sel = [s for b, d, h, t, s, *_ in rows if (b, d, h) == (backend, dtype, hidden)]
    return bool(sel) and all(s == "ok" for s in sel)
check("deepep_high_throughput bf16 7168 all ok", ok("deepep_high_throughput", "bf16", 7168))
check("deepep_high_throughput fp8_block128 7168 all ok", ok("deepep_high_throughput", "fp8_block128", 7168))
check("deepep_low_latency bf16 7168 all ok", ok("deepep_low_latency", "bf16", 7168))
check("deepep_high_throughput bf16 2880 (padded) all ok", ok("deepep_high_throughput", "bf16", 2880))
check("deepep_low_latency bf16 2880 (padded) all ok", ok("deepep_low_latency", "bf16", 2880))
check("deepep_low_latency fp8_block128 7168 all ok (fp8 bytes and scales bit-exact)",
      ok("deepep_low_latency", "fp8_block128", 7168))
check("deepep_low_latency fp8_block128 2880 (padded, partial block) all ok", ok("deepep_low_latency", "fp8_block128", 2880))
sys.exit(1 if fail else 0)
PY

section "done: $([ $FAILED = 0 ] && echo ALL PASS || echo SOME CHECKS FAILED)"
exit $FAILED
