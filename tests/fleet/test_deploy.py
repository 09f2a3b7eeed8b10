"""The periodic-run templates, tested by rendering: systemd-analyze, a YAML parser, bash -n."""

from __future__ import annotations

import fnmatch
import shutil
import subprocess
import tomllib

import pytest
from click.testing import CliRunner

from support.paths import REPO

from autoselect.cli import main
from autoselect.fleet.deploy import render
from autoselect.fleet.deploy.jobs import KINDS, TEMPLATES, cron_schedule, slurm_time

ARGS = "--model deepseek-ai/DeepSeek-V3 --tokens 1,8,64"


def test_systemd_units_pass_systemd_analyze_verify(tmp_path):
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze not installed")
    files = render("systemd", fleet_args=ARGS, every="12h", jitter="30m")
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    proc = subprocess.run(["systemd-analyze", "verify", *sorted(files)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stderr) == (0, "")


def test_systemd_timer_runs_every_interval_with_a_random_delay():
    files = render("systemd", fleet_args=ARGS, every="12h", jitter="30m")
    assert "OnUnitActiveSec=43200s\n" in files["autoselect-fleet.timer"]
    assert "RandomizedDelaySec=1800s\n" in files["autoselect-fleet.timer"]
    assert " fleet run --trigger systemd --only-idle --model deepseek-ai/DeepSeek-V3 --tokens 1,8,64\n" in \
        files["autoselect-fleet.service"]


def test_kubernetes_cronjob_is_valid_yaml_running_fleet_run_in_the_autoselect_vllm_image():
    yaml = pytest.importorskip("yaml")
    text = render("kubernetes", fleet_args=ARGS, every="6h", image="registry.example/autoselect-vllm:0.1",
                  db_path="/data/fleet.db")["cronjob.yaml"]
    cronjob, priority = list(yaml.safe_load_all(text))
    assert cronjob["kind"] == "CronJob" and cronjob["spec"]["schedule"] == "0 */6 * * *"
    pod = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["image"] == "registry.example/autoselect-vllm:0.1"
    assert container["command"] + container["args"] == [
        "autoselect", "fleet", "run", "--trigger", "cronjob", "--only-idle",
        "--model", "deepseek-ai/DeepSeek-V3", "--tokens", "1,8,64"]
    assert container["volumeMounts"][0]["mountPath"] == "/data"
    assert {e["name"]: e["value"] for e in container["env"]}["AUTOSELECT_DB"] == "/data/fleet.db"
    assert pod["priorityClassName"] == priority["metadata"]["name"] and priority["value"] == -1000


def test_slurm_job_is_valid_bash_and_asks_for_whole_gpu_nodes():
    text = render("slurm", fleet_args=ARGS, nodes=4, gpus_per_node=8, every="1d", timeout="2h")[
        "autoselect-fleet.sbatch"]
    proc = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True, timeout=30)
    assert (proc.returncode, proc.stderr) == (0, "")
    for line in ("#SBATCH --nodes=4\n", "#SBATCH --gpus-per-node=8\n", "#SBATCH --time=0-02:00:00\n",
                 "sbatch --begin=now+86400 "):
        assert line in text
    assert "fleet run --trigger slurm" in text


@pytest.mark.parametrize("every, cron", [(900, "*/15 * * * *"), (3600, "0 * * * *"), (21600, "0 */6 * * *"),
                                         (86400, "0 3 * * *"), (7 * 86400, "0 3 */7 * *")])
def test_cron_schedule_for_common_intervals(every, cron):
    assert cron_schedule(every) == cron


def test_slurm_time_format():
    assert slurm_time(93784) == "1-02:03:04"


def test_fleet_deploy_cli_writes_the_files(tmp_path):
    result = CliRunner().invoke(main, ["fleet", "deploy", "--kind", "systemd", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["autoselect-fleet.service", "autoselect-fleet.timer"]


def test_fleet_deploy_rejects_an_interval_cron_cannot_express():
    result = CliRunner().invoke(main, ["fleet", "deploy", "--kind", "kubernetes", "--every", "7h"])
    assert result.exit_code == 2
    assert result.stderr == ("Error: cron cannot run every 25200 s; use minutes dividing an hour, "
                             "hours dividing a day, or whole days\n")


def test_the_templates_ship_as_package_data_of_the_deploy_package():
    """An installed autoselect renders from its own copy: every template is matched by the
    package-data globs of ``autoselect.fleet.deploy``, a package the find rule includes."""
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    globs = setuptools["package-data"]["autoselect.fleet.deploy"]
    assert any(fnmatch.fnmatch("autoselect.fleet.deploy", p) for p in setuptools["packages"]["find"]["include"])
    assert TEMPLATES == REPO / "autoselect" / "fleet" / "deploy" / "templates"
    shipped = sorted(p.relative_to(TEMPLATES.parent).as_posix() for p in TEMPLATES.iterdir())
    assert shipped == sorted(f"templates/{name}" for names in KINDS.values() for name in names)
    assert all(any(fnmatch.fnmatch(f, g) for g in globs) for f in shipped)
