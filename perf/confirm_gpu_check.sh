#!/usr/bin/env bash
# GPU check for `autoselect confirm`: run vLLM's real `vllm bench forward` through
# confirm on a CUDA node and verify its --output-json parses into stored e2e results.
#
# Needs: CUDA GPU(s), vLLM >= 0.33 importable by $AUTOSELECT_VLLM_PYTHON (or this python), and
# the model's config + tokenizer files (Hugging Face access or a warm HF cache); weights are
# dummy. With one GPU the deployment is dp 1 (no all2all group): this proves the invocation
# and the output format, not the backends' speed. With N NVLink GPUs pass DP=N to compare
# backends for real.
#
#   MODEL=Qwen/Qwen3-30B-A3B DP=1 bash perf/confirm_gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL="${MODEL:-Qwen/Qwen3-30B-A3B}"
DP="${DP:-1}"
BACKENDS="${BACKENDS:-allgather_reducescatter}"
DB="$(mktemp -d)/confirm-check.db"

autoselect confirm --model "$MODEL" --dp "$DP" --backends "$BACKENDS" --tokens 1,32,1024 \
    --iters 5 --samples 2 --kv-len 2048 --timeout 1200 --db "$DB" --format json > "$DB.json"

python3 - "$DB" "$DB.json" <<'PY'
import json, sqlite3, sys
db, out = sys.argv[1], json.load(open(sys.argv[2]))
rows = sqlite3.connect(db).execute(
    "SELECT backend, tokens_per_rank, status, latency_us_p50, samples FROM results WHERE kind = 'e2e'").fetchall()
print("runs:", [(r["backend"], r["status"], r["error"]) for r in out["runs"]])
for row in rows:
    print("e2e row:", row)
bad = [r for r in out["runs"] if r["status"] != "ok"]
assert rows and not bad, "confirm did not store ok e2e rows"
assert all(r[3] and r[3] > 0 and r[4] > 0 for r in rows), "a row without a latency"
print("OK: vllm bench forward output parsed and stored as e2e results")
PY
