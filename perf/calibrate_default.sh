#!/usr/bin/env bash
# Calibrate vLLM's default (allgather_reducescatter) on a multi-GPU NVLink node: about 12 minutes on 8 GPUs.
#
# Run from the repository root of an NVLink node (HGX H100/H200/B200/B300 or a GB200 tray; torch with
# CUDA and NCCL; no network; vLLM installed for the fourth sweep, which is skipped and said so without it):
#     bash perf/calibrate_default.sh            # every GPU of the node (WS=8 on an HGX board)
#     WS=4 bash perf/calibrate_default.sh
#     DEVICE=cpu WS=2 TOKENS=1,1024 bash perf/calibrate_default.sh   # a rehearsal over gloo (no NVLink numbers)
# (MODELS overrides the two model directories, TOKENS the token counts, GPU_ARCH the arch.)
# Writes under $OUT (default /tmp/autoselect-calibrate): calibrate_default.db (every row with its
# footing), calibrate_default.jsonl (its `autoselect db export`), calibration.txt and calibration.json
# (bench.calibration: the factors per phase), calibrate_log.txt (this output).
#
# Per model shape (DeepSeek-V3: hidden 7168, top-8, 256 experts, fp8 block-128; Qwen3-30B-A3B: 2048, top-8,
# 128 experts, bf16), at decode sizes 1, 2, 4, 8, 16, 32, 64 and prefill sizes 1024, 2048, 4096, 8192
# tokens per rank, each point on vLLM's footing (CUDA-graph replay up to vLLM's capture size, eager above):
#   1. allgather_reducescatter (vLLM's calls: one all_gather per tensor in one NCCL group) and
#      reference_allgather_fused (everything packed in one all_gather: the fused lower end), side by side;
#   2. allgather_reducescatter on vLLM's unequal-DP-size path (--dp-sizes unequal: per-root broadcasts
#      and reduces, eager);
#   3. vLLM's own prepare/finalize for the default (--via vllm), where vLLM is installed.
# Then `python3 -m bench.calibration` prints, per phase (decode, prefill): vLLM's path over the fused
# variant, the unequal over the equal path, and vLLM's path over the derived central value of the
# node's reference class: the factor perf/regret_reference.py scores over (bench.calibration.read_calibration).
#
# Duration: 88 points (2 shapes x 11 token counts x 4 sweeps) at 2-5 s each (gate, >= 0.5 s of samples,
# up to 10 s when the noise will not settle), 8 worker-group start-ups (~10 s each; the vLLM path's
# import ~30 s): ~8-12 minutes on 8 GPUs.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/autoselect-calibrate}"
mkdir -p "$OUT"
exec > >(tee "$OUT/calibrate_log.txt") 2>&1
START=$(date +%s)
section() { echo; echo "=================== $* ($(( $(date +%s) - START )) s) ==================="; }
FAILED=0
DEVICE="${DEVICE:-cuda}"
WS="${WS:-$(nvidia-smi -L 2>/dev/null | wc -l)}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export AUTOSELECT_DB="$OUT/calibrate_default.db"
rm -f "$AUTOSELECT_DB"*
MODELS="${MODELS:-tests/fixtures/models/deepseek-v3 tests/fixtures/models/qwen3-30b-a3b}"
TOKENS="${TOKENS:-1,2,4,8,16,32,64,1024,2048,4096,8192}"
RULE=(--device "$DEVICE" --min-time 0.5 --timeout 10 --setup-timeout 300)
# the arch sets the activation dtype and vLLM's capture size: the GPUs' own on CUDA (GPU_ARCH overrides)
if [ -n "${GPU_ARCH:-}" ]; then RULE+=(--gpu-arch "$GPU_ARCH"); elif [ "$DEVICE" != cuda ]; then RULE+=(--gpu-arch sm90); fi

export DEVICE
section "environment: world size $WS, device $DEVICE"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
nvidia-smi topo -m || true
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'gpus', torch.cuda.device_count())"
python3 -c "from importlib.metadata import version; print('vllm', version('vllm'))" 2>/dev/null || echo "vllm not installed: the vLLM-path sweep is skipped"
python3 -m autoselect hosts || true
if [ "$WS" -lt 2 ]; then
  echo "CHECK world size: FAIL (a calibration needs 2+ NVLink GPUs; this node has $WS)"; exit 1
fi

for MODEL in $MODELS; do
  section "$MODEL: vLLM's grouped calls and the fused variant, side by side"
  python3 -m autoselect bench --model "$MODEL" --world-size "$WS" --tokens "$TOKENS" \
    --backends allgather_reducescatter,reference_allgather_fused "${RULE[@]}" || FAILED=1
  section "$MODEL: vLLM's unequal-DP-size path (per-root broadcasts and reduces, eager)"
  python3 -m autoselect bench --model "$MODEL" --world-size "$WS" --tokens "$TOKENS" --dp-sizes unequal \
    --backends allgather_reducescatter "${RULE[@]}" || FAILED=1
  section "$MODEL: vLLM's own prepare/finalize (--via vllm)"
  if [ "$DEVICE" != cuda ]; then
    echo "skipped: vLLM's prepare/finalize kernels need CUDA"
  elif python3 -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('vllm') is None)"; then
    python3 -m autoselect bench --model "$MODEL" --world-size "$WS" --tokens "$TOKENS" --via vllm \
      --backends allgather_reducescatter "${RULE[@]}" || FAILED=1
  else
    echo "skipped: vllm not installed (the factor is then over the adapter that makes vLLM's calls)"
  fi
done

section "checks: every point gated and timed, on the footing vLLM runs it"
python3 - <<'PY' || FAILED=1
import os, sqlite3, sys
conn = sqlite3.connect(os.environ["AUTOSELECT_DB"])
rows = conn.execute("select backend, hidden, tokens_per_rank, status, coalesce(error, ''), timing, calls, dp_sizes, via "
                    "from results order by id").fetchall()
bad = [f"{b} hidden {h} @ {t}: {s} {e}" for b, h, t, s, e, *_ in rows if s != "ok"]
cuda = os.environ.get("DEVICE", "cuda") == "cuda"
bad += [f"{b} hidden {h} @ {t}: timing {tm} (expected graph or eager)" for b, h, t, s, e, tm, *_ in rows
        if s == "ok" and tm not in (("graph", "eager") if cuda else ("cpu",))]
bad += [f"{b} hidden {h} @ {t}: unequal DP sizes timed {tm} (vLLM runs them eagerly)"
        for b, h, t, s, e, tm, c, dp, v in rows if cuda and s == "ok" and dp == "unequal" and tm != "eager"]
kinds = {(b, c, dp, v) for b, h, t, s, e, tm, c, dp, v in rows if s == "ok"}
need = {("allgather_reducescatter", "grouped", "equal", "adapter"), ("reference_allgather_fused", "fused", "equal", "adapter"),
        ("allgather_reducescatter", "grouped", "unequal", "adapter")}
bad += [f"no ok rows of {k}" for k in sorted(need - kinds)]
print(f"{len(rows)} rows; footings: {sorted(kinds)}")
print("CHECK calibration rows:", "PASS" if not bad else "FAIL")
for line in bad[:40]:
    print("   ", line)
sys.exit(1 if bad else 0)
PY

section "the factors per phase (bench.calibration)"
python3 -m bench.calibration --db "$AUTOSELECT_DB" | tee "$OUT/calibration.txt" || FAILED=1
python3 -m bench.calibration --db "$AUTOSELECT_DB" --json > "$OUT/calibration.json" || FAILED=1
python3 -m autoselect db export --db "$AUTOSELECT_DB" > "$OUT/calibrate_default.jsonl" || FAILED=1

section "done: $([ $FAILED = 0 ] && echo ALL PASS || echo SOME CHECKS FAILED)"
exit $FAILED
