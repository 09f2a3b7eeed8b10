#!/usr/bin/env bash
# GPU check for `autoselect tune`. Run on a CUDA host from the repository root:
#   WS=1 bash perf/tune_gpu_check.sh            # single GPU (NCCL world size 1): the CUDA path
#   WS=8 bash perf/tune_gpu_check.sh            # an 8-GPU NVLink node: the real race + knobs
# What it proves: tune measures through NCCL workers (one long-lived worker group per backend for
# the whole race: one start-up each, restarts only for env-var knobs), passes each knob's env var to them
# (NCCL_PROTO / NCCL_ALGO / NCCL_{MIN,MAX}_NCHANNELS for allgather_reducescatter), records one
# Optuna trial per point, never tries an illegal setting (LL128 / NVLS without NVLink, PAT on
# one node, MIN > MAX channels), and stores the outcome in tuned_configs.
# Writes $OUT/tune.json (when $OUT is set) and prints a summary; exit 1 on any failed check.
set -euo pipefail
WS="${WS:-1}"
OUT="${OUT:-$(mktemp -d)}"
DIR="$(mktemp -d)"
DB="$DIR/results.db"

timeout "${TUNE_TIMEOUT:-540}" python3 -m autoselect tune --model shape:2048x32x8:bf16 --device cuda --world-size "$WS" \
  --tokens 64,256 --budget "${BUDGET:-7m}" --format json --db "$DB" > "$OUT/tune.json"

python3 - "$DB" "$OUT/tune.json" "$WS" <<'EOF'
import json, sqlite3, sys
import optuna
from autoselect import knobs
from autoselect.hardware import fingerprint
from autoselect.tune import open_storage

db, out = sys.argv[1], json.load(open(sys.argv[2]))
study = optuna.load_study(study_name=out["study"], storage=open_storage(out["study_path"]))
host = fingerprint()
ctx = knobs.KnobContext.from_host(host, world_size=int(sys.argv[3]), max_num_batched_tokens=256)
names = [k.name for k in knobs.KNOBS]
bad, settings = [], set()
for t in study.trials:
    m = t.user_attrs["measurement"]
    setting = {n: t.params[n] for n in names if t.params[n] != knobs.UNSET}
    settings.add(knobs.describe(setting))
    reasons = knobs.check_setting(m["backend"], setting, ctx)
    if reasons:
        bad.append((m["backend"], setting, reasons))
print("stop:", out["stop_reason"])
print("trials:", len(study.trials), "new", out["trials_new"], "reused", out["trials_reused"])
# one worker-group start-up per backend for the whole race; more only where a knob's env var
# (a start-up knob) or a crash / hang restarted a group, each with its reason
print("start-ups:", out["startup_count"], json.dumps(out["startups"]))
race_ups = {b: [u for u in v if not u["reason"].startswith("start-up knobs changed")] for b, v in out["startups"].items()}
extra = {b: [u["reason"] for u in v[1:]] for b, v in race_ups.items() if len(v) > 1}
print("race start-ups beyond one per backend:", extra or "none")
print("scores:", json.dumps(out["scores"]))
print("knobs:", json.dumps(out["knobs"], default=str)[:2000])
print("settings measured:", sorted(settings))
rows = sqlite3.connect(db).execute("SELECT backend, status, knobs, gain FROM tuned_configs").fetchall()
print("tuned_configs:", rows)
statuses = sqlite3.connect(db).execute("SELECT status, count(*) FROM results GROUP BY status").fetchall()
print("result statuses:", statuses)
ok = not bad and rows and any(s != "untuned" for s in settings) and not extra
print("illegal settings tried:", bad or "none")
print("CHECK", "PASSED" if ok else "FAILED")
sys.exit(0 if ok else 1)
EOF
