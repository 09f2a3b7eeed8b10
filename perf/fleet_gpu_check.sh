#!/usr/bin/env bash
# GPU check for the fleet: what a CPU machine cannot show. ~1-2 minutes on one GPU.
#
# 1. A Ray node started with the real GPU(s): the probe task runs the NVML fingerprint (device
#    cuda, GPU arch) and reads real utilisation / memory through NVML inside a Ray worker that
#    Ray gave the GPU (CUDA_VISIBLE_DEVICES).
# 2. --only-idle: with a matmul loop keeping GPU 0 busy, the probe reports the GPU busy and
#    `fleet run --only-idle` skips the node (nothing written for it); once the loop stops, the
#    same command measures the node. (The fleet harness needs world size >= 2 and the machine
#    may have one GPU, so the measuring part uses the gloo harness, --device cpu, inside the
#    node's GPU bundle; the busy check still reads the GPU because the node's fingerprint is cuda.)
#
# Needs: torch with CUDA, ray, nvidia-ml-py, autoselect importable (pip install -e ".[fleet]").
# Prints PASS/FAIL lines; exit status 0 only when every check passed.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
python3 -c "import ray, torch, pynvml" || { echo "FAIL: needs ray, torch and nvidia-ml-py"; exit 1; }
timeout 300 python3 - <<'EOF'
import json, os, subprocess, sys, tempfile, time
import ray
import torch

from autoselect import fleet
from autoselect.cli import main

failures = []
def check(name, ok, detail=""):
    print(f"{'PASS' if ok else 'FAIL'}: {name} {detail}", flush=True)
    if not ok:
        failures.append(name)

gpus = torch.cuda.device_count()
check("torch sees a GPU", gpus >= 1, f"({gpus})")
ray.init(num_gpus=gpus, num_cpus=2, include_dashboard=False, logging_level="WARNING")
settings = fleet.FleetSpec(device="cuda", busy_utilization=0.10, busy_memory=0.10).node_settings(max(gpus, 2))
probe = ray.remote(fleet.probe_node)

idle = ray.get(probe.options(num_gpus=gpus, num_cpus=1).remote(settings))
host = idle.host
check("probe fingerprint is cuda", host["device"] == "cuda" and host["gpu_arch"] in ("sm90", "sm100"),
      f"({host['gpu_name']} x{host['gpu_count']}, {host['gpu_arch']})")
check("probe read NVML load for every GPU", len(idle.gpu_load) == gpus, json.dumps(idle.gpu_load))
print("idle busy reasons:", idle.busy)

burner = subprocess.Popen([sys.executable, "-c",
    "import torch, time\n"
    "a = torch.randn(8192, 8192, device='cuda')\n"
    "t = time.time()\n"
    "while time.time() - t < 90:\n"
    "    a = (a @ a).clamp_(-1, 1)\n"
    "    torch.cuda.synchronize()\n"])
time.sleep(8)
busy = ray.get(probe.options(num_gpus=gpus, num_cpus=1).remote(settings))
check("a GPU running a matmul loop is busy", bool(busy.busy), json.dumps(busy.busy))

db = os.path.join(tempfile.mkdtemp(), "fleet.db")
args = ["fleet", "run", "--device", "cpu", "--gpus-per-node", str(gpus), "--world-size", "2", "--only-idle",
        "--hidden", "256", "--top-k", "2", "--experts", "8", "--dtype", "bf16", "--tokens", "1,8",
        "--backends", "allgather_reducescatter", "--min-samples", "5", "--min-time", "0.1",
        "--db", db, "--format", "json"]
from click.testing import CliRunner
r = CliRunner().invoke(main, args)
report = json.loads(r.stdout) if r.exit_code == 0 else {}
check("--only-idle skips the busy node", r.exit_code == 0 and [n["status"] for n in report["nodes"]] == ["skipped"],
      (r.stdout + r.stderr)[-600:])
burner.kill(); burner.wait()
time.sleep(3)
r = CliRunner().invoke(main, args)
report = json.loads(r.stdout) if r.exit_code == 0 else {}
check("the idle node is measured", r.exit_code == 0 and [n["status"] for n in report["nodes"]] == ["complete"]
      and report["nodes"][0]["results"] == 2, (r.stdout + r.stderr)[-600:])
ray.shutdown()
print("ALL PASS" if not failures else f"FAILED: {failures}")
sys.exit(1 if failures else 0)
EOF
