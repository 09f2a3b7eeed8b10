"""``autoselect launch``: the pick goes into the user's own line, an illegal backend never starts.

The decision is exercised as a library (:func:`autoselect.launch.plan_launch`) and through the
CLI with ``--dry-run``; the exec itself with a stand-in ``vllm`` on PATH (a script that prints its
PID and arguments), so the test sees the same PID and exit status the real server would get.
The real vLLM start-up is in test_launch_vllm.py.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from support.db import cpu_host, hgx_host
from support.fleet import DEEPSEEK_V3, HOST_CLASS, build_fleet_db, h200_host
from support.hostile import refused
from support.paths import FIXTURES, REPO
from support.vllm_env import fake_vllm_env

import autoselect.selector.pipeline as pipeline
from autoselect.cli import main
from autoselect.launch import LaunchOptions, plan_launch, run_plan
from autoselect.launch.choose import LineRefused, NoEvidence
from autoselect.launch.pick import Pick
from autoselect.selector import recommend_for

MODELS = FIXTURES / "models"
QWEN = str(MODELS / "qwen3-30b-a3b")
NVFP4 = str(MODELS / "deepseek-r1-nvfp4")
H200 = "h200x8-5d1c7e0a"
B200 = "b200x8-9a4f2b61"
REFERENCE = "ref-h200_sxm-x8"


@pytest.fixture(scope="module")
def fixture_db(tmp_path_factory) -> Path:
    """The shipped H200 and B200 example data (tests/fixtures/results), as shipped: marked synthetic."""
    from db.importing import import_file

    path = tmp_path_factory.mktemp("launch") / "fixtures.db"
    import_file(path, FIXTURES / "results" / "h200.jsonl")
    import_file(path, FIXTURES / "results" / "b200.jsonl")
    return path


@pytest.fixture(scope="module")
def fleet_db(tmp_path_factory) -> Path:
    """Four H200 nodes of class h200x8-fleet; after the third run two-sided beats the default."""
    return build_fleet_db(tmp_path_factory.mktemp("fleet") / "fleet.db")


@pytest.fixture
def on_cpu(monkeypatch):
    """This machine has no GPU (whatever the test machine has)."""
    monkeypatch.setattr("autoselect.launch.platform.local_host", cpu_host)
    monkeypatch.setattr(pipeline, "fingerprint", cpu_host)


@pytest.fixture
def on_h20(monkeypatch):
    """This machine is an 8 x H20 NVSwitch node: GPUs no published reference covers, no measurements."""
    node = hgx_host("h20-node")
    node = dataclasses.replace(node, gpu_name="NVIDIA H20", host_class="h20x8-test",
                               gpus=[dataclasses.replace(g, name="NVIDIA H20") for g in node.gpus])
    monkeypatch.setattr("autoselect.launch.platform.local_host", lambda: node)
    monkeypatch.setattr(pipeline, "fingerprint", lambda: node)
    return node


def dry(*args, env=None):
    """``autoselect launch --dry-run ARGS`` through click (stdout and stderr apart)."""
    return CliRunner().invoke(main, ["launch", "--dry-run", *[str(a) for a in args]], env=env)


def serve_line(model=DEEPSEEK_V3, *flags):
    return ["vllm", "serve", model, "-dp", "8", "--enable-expert-parallel", *flags]


# ---- the pick goes in: a reference class, a measured host class, this machine -------------------


def test_dry_run_prints_the_line_with_the_pick_for_a_reference_class(on_cpu):
    rec = recommend_for(DEEPSEEK_V3, host_class=REFERENCE, dp=8)
    result = dry("--host-class", REFERENCE, "--", *serve_line())
    assert result.exit_code == 0, result.output
    assert result.stdout == shlex.join(serve_line() + ["--all2all-backend", rec.backend]) + "\n"
    [line] = result.stderr.splitlines()
    assert line.startswith(f"autoselect launch: --all2all-backend {rec.backend} inserted for {DEEPSEEK_V3} at EP 8 "
                           f"on vLLM ")
    assert f"confidence {rec.confidence}, from NVIDIA's published reference (class {REFERENCE})" in line


def test_dry_run_prints_the_line_with_the_pick_for_a_measured_host_class(fixture_db, on_cpu):
    for host_class, model in ((H200, DEEPSEEK_V3), (B200, NVFP4)):
        rec = recommend_for(model, db_path=fixture_db, host_class=host_class, dp=8)
        assert rec.confidence != "none"
        result = dry("--db", fixture_db, "--host-class", host_class, "--", *serve_line(model))
        assert result.exit_code == 0, result.output
        # the backend and what else the answer carries (a one-sided pick's token budget), as recommend prints them
        assert result.stdout.split() == serve_line(model) + rec.vllm_args[rec.vllm_args.index("--all2all-backend"):]
        # the shipped example data is synthetic, and the line says so (confidence never high on it)
        assert rec.confidence != "high"
        assert (f"synthetic evidence, confidence {rec.confidence}, from the database {fixture_db} (host class "
                f"{host_class}, ") in result.stderr


def test_on_a_gpu_node_the_pick_comes_from_its_own_host_class(fleet_db, on_fleet_node):
    rec = recommend_for(DEEPSEEK_V3, db_path=fleet_db, dp=8, workload="decode")
    plan = plan_launch(serve_line(), LaunchOptions(db_path=fleet_db, workload="decode"))
    assert (plan.action, plan.backend, plan.platform.name) == ("insert", rec.backend, "cuda")
    assert (plan.pick.evidence, plan.pick.confidence, plan.host_class) == ("measured", rec.confidence, HOST_CLASS)
    assert plan.final.argv == serve_line() + ["--all2all-backend", rec.backend]


def test_the_role_the_line_says_weighs_the_pick_on_its_workload(fixture_db, on_cpu):
    consumer = '{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}'
    plan = plan_launch(serve_line(NVFP4, "--kv-transfer-config", consumer),
                       LaunchOptions(db_path=fixture_db, host_class=B200))
    assert (plan.role, plan.workload) == ("decode", "decode")
    assert plan.backend == recommend_for(NVFP4, db_path=fixture_db, host_class=B200, dp=8, workload="decode").backend
    plan = plan_launch(serve_line(NVFP4), LaunchOptions(db_path=fixture_db, host_class=B200, role="prefill"))
    assert plan.workload == "prefill"


def test_max_num_seqs_per_engine_is_the_decode_concurrency(fixture_db, on_cpu):
    plan = plan_launch(serve_line(NVFP4, "--max-num-seqs", "4"), LaunchOptions(db_path=fixture_db, host_class=B200,
                                                                               workload="decode"))
    # 4 running requests per engine x dp 8 = 32 over the deployment: decode buckets up to 4 tokens per rank
    assert [b["tokens_per_rank"] for b in plan.pick.answer["workload"]["buckets"]] == [1, 2, 4]


def test_a_gpu_node_is_fingerprinted_once(fleet_db, monkeypatch):
    """The platform probe's fingerprint is the one the selector answers for (NVML walks every GPU and link)."""
    node, probes = h200_host("gpu-a"), []
    monkeypatch.setattr("autoselect.launch.platform.local_host", lambda: probes.append(node) or node)
    monkeypatch.setattr(pipeline, "fingerprint", lambda: pytest.fail("this machine fingerprinted again"))
    plan = plan_launch(serve_line(), LaunchOptions(db_path=fleet_db, workload="decode"))
    assert (len(probes), plan.action, plan.host_class, plan.pick.evidence) == (1, "insert", HOST_CLASS, "measured")


def test_a_pick_opens_the_database_once_and_reads_the_model_once(fixture_db, on_cpu, monkeypatch):
    """Launch does not do recommend's work twice: the selector opens the database (no look first),
    the line's model profile is the selector's, and a host class's arch comes from the answer."""
    import autoselect.launch.local as local
    import autoselect.selector.pipeline as pipeline

    opened, loads = [], []
    for module in (pipeline, local):
        connect = module.connect_readonly
        monkeypatch.setattr(module, "connect_readonly", lambda path, c=connect: opened.append(path) or c(path))
    load = pipeline.load_profile
    monkeypatch.setattr(pipeline, "load_profile", lambda *a, **k: loads.append(a) or load(*a, **k))
    monkeypatch.setattr(local, "class_arch", lambda *a: pytest.fail("the class's arch looked up before the pick"))
    plan = plan_launch(serve_line(NVFP4), LaunchOptions(db_path=fixture_db, host_class=B200))
    assert (plan.action, plan.gpu_arch, plan.database) == ("insert", "sm100", f"the database {fixture_db}")
    assert (len(opened), loads) == (1, [])
    # a backend the line names is judged before any pick: on the class's arch, looked up
    monkeypatch.setattr(local, "class_arch", lambda host_class, db: "sm100")
    plan = plan_launch(serve_line(NVFP4, "--all2all-backend", "flashinfer_nvlink_one_sided"),
                       LaunchOptions(db_path=fixture_db, host_class=B200))
    assert (plan.action, plan.gpu_arch) == ("keep", "sm100")


# ---- the user's backend: kept, refused, overridden ----------------------------------------------


def test_a_legal_backend_in_the_line_is_kept_and_nothing_is_added(on_cpu):
    line = serve_line(NVFP4, "--all2all-backend", "flashinfer_nvlink_one_sided")
    plan = plan_launch(line, LaunchOptions(gpu_arch="sm100", vllm_version="0.33.0"))
    assert (plan.action, plan.backend, plan.final.argv) == ("keep", "flashinfer_nvlink_one_sided", line)
    assert plan.text == (f"autoselect launch: the line's --all2all-backend flashinfer_nvlink_one_sided kept (legal for "
                         f"{NVFP4} on sm100 at EP 8, vLLM 0.33.0); --override lets autoselect choose")


def test_a_kept_backend_that_changes_vllms_step_says_so_on_stderr(on_cpu):
    # DeepEP high-throughput turns CUDA graphs off (0.34.0 config/compilation.py:1401-1417); low-latency
    # lowers the step budget to 256: both said as warnings, the line started as it is
    ht = dry("--gpu-arch", "sm90", "--vllm-version", "0.34.0", "--",
             *serve_line(DEEPSEEK_V3, "--all2all-backend", "deepep_high_throughput"))
    assert ht.exit_code == 0, ht.output
    assert ht.stderr.splitlines()[1] == (
        "Warning: vLLM 0.34.0 turns CUDA graphs off for the whole model with deepep_high_throughput at DP >= 2 "
        "(vllm/config/compilation.py:1401-1417 (0.34.0)): every decode step runs eagerly; for decode-heavy serving "
        "use another backend")
    ll = dry("--gpu-arch", "sm100", "--vllm-version", "0.34.0", "--",
             *serve_line(NVFP4, "--all2all-backend", "deepep_low_latency"))
    assert "Warning: vLLM 0.34.0 lowers --max-num-batched-tokens to 256 for deepep_low_latency" in ll.stderr
    given = dry("--gpu-arch", "sm100", "--vllm-version", "0.34.0", "--",
                *serve_line(NVFP4, "--all2all-backend", "deepep_low_latency", "--max-num-batched-tokens", "256"))
    assert "Warning" not in given.stderr  # the line sets the budget itself


def test_an_illegal_backend_in_the_line_is_refused_and_nothing_starts(tmp_path, on_cpu):
    decision = tmp_path / "decision.json"
    result = dry("--gpu-arch", "sm90", "--decision-json", decision, "--",
                 *serve_line(QWEN, "--all2all-backend", "flashinfer_nvlink_one_sided"))
    line = refused(result)  # worded as check words it
    assert line.startswith(f"Error: flashinfer_nvlink_one_sided needs nvfp4 activations; {QWEN} dispatches bf16 on "
                           f"sm90")
    assert line.endswith("; legal here: allgather_reducescatter, flashinfer_nvlink_two_sided, deepep_high_throughput, "
                         "deepep_low_latency [sm90] (nothing was started)")
    assert not decision.exists()


def test_an_illegal_backend_named_by_the_variable_is_refused_too(on_cpu):
    with pytest.raises(LineRefused, match=r"deepep_low_latency needs the 128 experts to divide evenly over EP size 12; "
                                          r".* 1 more error\(s\) \(`autoselect check` lists every finding\)"):
        plan_launch(["VLLM_ALL2ALL_BACKEND=deepep_low_latency", "vllm", "serve", QWEN, "-dp", "12", "-ep"],
                    LaunchOptions(gpu_arch="sm90", vllm_version="0.14.0"))
    with pytest.raises(LineRefused, match="VLLM_ALL2ALL_BACKEND=deepep_v2"):  # 0.11.1 refuses the value
        plan_launch(serve_line(QWEN), LaunchOptions(gpu_arch="sm90", vllm_version="0.11.1"),
                    environ={"VLLM_ALL2ALL_BACKEND": "deepep_v2"})


def test_a_backend_vllm_does_not_know_is_refused_with_the_choices(on_cpu):
    with pytest.raises(LineRefused, match="--all2all-backend 'flashinfer_one_sided' is not a vLLM choice: vllm serve "
                                          "would exit with 'invalid choice'; use one of allgather_reducescatter, "):
        plan_launch(serve_line(QWEN, "--all2all-backend", "flashinfer_one_sided"),
                    LaunchOptions(gpu_arch="sm90", vllm_version="0.33.0"))
    with pytest.raises(LineRefused, match="vLLM 0.17.0 does not accept --all2all-backend "
                                                    "flashinfer_nvlink_one_sided"):  # first in 0.18.0
        plan_launch(["vllm", "serve", QWEN, "-dp", "8", "--all2all-backend", "flashinfer_nvlink_one_sided"],
                    LaunchOptions(gpu_arch="sm90", vllm_version="0.17.0"))  # even without an all2all group


def test_a_backend_only_a_shell_would_expand_is_refused_and_said_so(on_cpu):
    """check leaves `$B` unjudged (a script a shell runs); launch starts the words as they are, so
    vLLM would get the literal value: refused, with the reason."""
    with pytest.raises(LineRefused, match=r"--all2all-backend '\$B' is not a vLLM choice: .*; it is a shell expansion: "
                                          r"launch starts the line's words as they are"):
        plan_launch(serve_line(QWEN, "--all2all-backend", "$B"), LaunchOptions(gpu_arch="sm90", vllm_version="0.33.0"))
    with pytest.raises(LineRefused, match=r"VLLM_ALL2ALL_BACKEND=\$\{B:-pplx\}: .*it is a shell expansion"):
        plan_launch(["VLLM_ALL2ALL_BACKEND=${B:-pplx}", *serve_line(QWEN)],
                    LaunchOptions(gpu_arch="sm90", vllm_version="0.14.0"))
    # where the release does not read the variable, its literal value harms nothing: the pick goes in
    plan = plan_launch(["VLLM_ALL2ALL_BACKEND=$B", *serve_line(QWEN)], LaunchOptions(host_class=REFERENCE))
    assert plan.action == "insert"


def test_the_flag_on_a_release_before_it_is_refused(on_cpu):
    with pytest.raises(LineRefused, match="vLLM 0.11.0 has no --all2all-backend"):
        plan_launch(serve_line(QWEN, "--all2all-backend", "deepep_low_latency"),
                    LaunchOptions(gpu_arch="sm90", vllm_version="0.11.0"))


def test_dbo_with_a_backend_it_cannot_run_is_refused(on_cpu):
    with pytest.raises(LineRefused, match="--enable-dbo works only with deepep_low_latency, deepep_high_throughput, "
                                          "nixl_ep on CUDA in vLLM 0.33.0; with flashinfer_nvlink_two_sided vLLM fails "
                                          "an assertion at startup"):
        plan_launch(serve_line(QWEN, "--enable-dbo", "--all2all-backend", "flashinfer_nvlink_two_sided"),
                    LaunchOptions(gpu_arch="sm90", vllm_version="0.33.0"))


def test_override_puts_the_pick_after_the_users_flag_so_it_wins(fixture_db, on_cpu):
    line = serve_line(NVFP4, "--all2all-backend", "deepep_high_throughput")
    plan = plan_launch(line, LaunchOptions(db_path=fixture_db, host_class=B200, override=True))
    rec = recommend_for(NVFP4, db_path=fixture_db, host_class=B200, dp=8)
    pick = rec.backend
    assert plan.action == "override"
    assert plan.final.argv == line + rec.vllm_args[rec.vllm_args.index("--all2all-backend"):]
    assert plan.text.startswith(f"autoselect launch: --all2all-backend {pick} replaces the line's --all2all-backend "
                                f"deepep_high_throughput (--override)")


def test_override_replaces_an_illegal_backend_but_only_with_a_pick(tmp_path, on_h20):
    line = serve_line(QWEN, "--all2all-backend", "flashinfer_nvlink_one_sided")
    plan = plan_launch(line, LaunchOptions(db_path=tmp_path / "none.db", host_class=REFERENCE, override=True))
    assert plan.action == "override" and plan.final.argv[-2:] != ["--all2all-backend", "flashinfer_nvlink_one_sided"]
    with pytest.raises(LineRefused, match="--override found nothing to replace the line's backend with .*: "
                                          "flashinfer_nvlink_one_sided needs nvfp4 activations"):
        plan_launch(line, LaunchOptions(db_path=tmp_path / "none.db", override=True))


def test_without_evidence_the_line_keeps_vllms_default_whatever_is_legal(tmp_path, on_cpu):
    # a CPU machine planning for 8 Hopper GPUs with no database: nothing measured, nothing published, so
    # confidence none; the FlashInfer and DeepEP backends are legal for the serving host (this machine's
    # packages and NVLinks are not its), each saying what the serving host needs
    line = ["vllm", "serve", str(MODELS / "deepseek-v3"), "-dp", "8", "--enable-expert-parallel"]
    plan = plan_launch(line, LaunchOptions(gpu_arch="sm90", db_path=tmp_path / "none.db"))
    rec = recommend_for(str(MODELS / "deepseek-v3"), gpu_arch="sm90", dp=8, db_path=tmp_path / "none.db")
    assert rec.confidence == "none" and rec.confidence_codes == ["no_data"]
    assert [c.backend for c in rec.candidates] == ["allgather_reducescatter", "flashinfer_nvlink_two_sided",
                                                   "deepep_low_latency"]
    # high-throughput is legal there too, but the default workload has decode steps vLLM would run without CUDA
    # graphs with it (selector/step.py): rejected for the step, not for this machine's packages
    assert [(r.backend, r.kind) for r in rec.rejected] == [("flashinfer_nvlink_one_sided", "illegal"),
                                                           ("deepep_high_throughput", "ineligible")]
    assert {c.backend: c.requires[0] for c in rec.candidates if c.requires} == {
        "flashinfer_nvlink_two_sided": "needs flashinfer-python on the serving host (pip install flashinfer-python "
                                       "(vLLM pins it))",
        "deepep_low_latency": "needs deep_ep on the serving host (install DeepEP from github.com/deepseek-ai/DeepEP "
                              "(not a vLLM dependency))"}
    assert (plan.action, plan.backend, plan.final.argv, plan.pick.confidence) == (
        "default", "allgather_reducescatter", line, "none")
    assert plan.why.startswith("vLLM's default (allgather_reducescatter) kept, nothing inserted: no evidence: no "
                               "measurement of any legal backend for this host class, shape and world size")
    assert plan.pick.bench_command == rec.bench_command and "--backends allgather_reducescatter," in rec.bench_command


def test_the_selectors_decision_is_said_in_the_launch_line(tmp_path):
    # the reference class's answer: vLLM's default stays, DeepEP low-latency ties with it; the line
    # says so in the answer's own words (autoselect.selector.wording), then the evidence and confidence
    line = ["vllm", "serve", str(MODELS / "deepseek-v3"), "-dp", "8", "--enable-expert-parallel"]
    plan = plan_launch(line, LaunchOptions(host_class=REFERENCE, workload="decode", db_path=tmp_path / "none.db"))
    rec = recommend_for(str(MODELS / "deepseek-v3"), host_class=REFERENCE, workload="decode", dp=8,
                        db_path=tmp_path / "none.db")
    assert plan.action == "insert" and rec.decision.startswith("vLLM's default stays: deepep_low_latency ties "
                                                               "with it (0.95x at the central values)")
    assert f": {rec.decision}; derived evidence, confidence reference, from NVIDIA's published reference" in plan.why


# ---- vLLM's CPU platform ------------------------------------------------------------------------


def test_on_a_host_without_gpus_the_cpu_platform_runs_allgather_reducescatter_and_says_so(on_cpu):
    plan = plan_launch(["vllm", "serve", QWEN, "-dp", "2", "-ep"], LaunchOptions(vllm_version="0.32.0"))
    assert (plan.action, plan.backend, plan.platform.name, plan.gpu_arch) == (
        "insert", "allgather_reducescatter", "cpu", None)
    assert plan.text == ("autoselect launch: --all2all-backend allgather_reducescatter inserted: the only all2all "
                         "manager vLLM's CPU platform builds (no GPU on this host); no database read")
    assert plan.pick.evidence == "rule" and plan.pick.confidence is None


def test_the_cpu_platform_refuses_a_backend_it_cannot_run(on_cpu):
    result = dry("--vllm-version", "0.32.0", "--", "vllm", "serve", QWEN, "-dp", "2", "-ep", "--all2all-backend",
                 "deepep_low_latency")
    line = refused(result)
    assert line.startswith("Error: vLLM's CPU platform runs only allgather_reducescatter, not deepep_low_latency")
    assert line.endswith("legal here: allgather_reducescatter (nothing was started)")


def test_a_line_that_sets_the_cpu_target_device_is_the_cpu_platform_even_on_a_gpu_host(on_fleet_node):
    plan = plan_launch(["VLLM_TARGET_DEVICE=cpu", "vllm", "serve", QWEN, "-dp", "2", "-ep"])
    assert (plan.platform.name, plan.platform.why) == ("cpu", "the line sets VLLM_TARGET_DEVICE=cpu")
    assert plan.final.env == {"VLLM_TARGET_DEVICE": "cpu"}


# ---- no evidence ----------------------------------------------------------------------------------


def test_without_evidence_vllms_default_stays_and_the_bench_command_is_named(tmp_path, on_h20):
    plan = plan_launch(serve_line(QWEN), LaunchOptions(db_path=tmp_path / "none.db"))
    assert (plan.action, plan.backend, plan.final.argv) == ("default", "allgather_reducescatter", serve_line(QWEN))
    assert plan.text.startswith("autoselect launch: vLLM's default (allgather_reducescatter) kept, nothing inserted: "
                                "no evidence: no measurement of any legal backend")
    assert f"no database at {tmp_path / 'none.db'}" in plan.text
    assert "; to settle it: autoselect bench --model" in plan.text
    with pytest.raises(NoEvidence, match="--require-evidence: no evidence: .*; settle it with: autoselect bench"):
        plan_launch(serve_line(QWEN), LaunchOptions(db_path=tmp_path / "none.db", require_evidence=True))
    assert not (tmp_path / "none.db").exists()  # read-only: never created


def test_an_unreadable_database_is_said_in_the_line_and_the_reference_answers(tmp_path, on_cpu):
    broken = tmp_path / "broken.db"
    broken.write_bytes(b"\0" * 200)
    plan = plan_launch(serve_line(), LaunchOptions(db_path=broken, host_class=REFERENCE))
    assert plan.action == "insert" and plan.pick.confidence == "reference"
    assert f"; the database {broken} is unreadable (" in plan.text
    assert broken.read_bytes() == b"\0" * 200


def test_a_measured_class_without_its_database_falls_back_to_the_default(tmp_path, on_cpu):
    plan = plan_launch(serve_line(), LaunchOptions(db_path=tmp_path / "absent.db", host_class=H200))
    assert plan.action == "default"
    assert f"host class {H200} is unknown without a database (no database at {tmp_path / 'absent.db'})" in plan.text


def test_a_release_before_the_flag_keeps_its_default_and_says_why(on_cpu):
    plan = plan_launch(serve_line(), LaunchOptions(gpu_arch="sm90", vllm_version="0.11.0"))
    assert plan.action == "default" and plan.backend == "allgather_reducescatter"
    assert "vLLM 0.11.0 predates --all2all-backend (0.11.1), and autoselect picks for releases that have it" in plan.text


def test_a_line_without_an_all2all_group_is_started_unchanged(on_cpu):
    for line, why in ((["vllm", "serve", QWEN, "-dp", "8"], "no --enable-expert-parallel"),
                      (["vllm", "serve", QWEN, "-tp", "8", "-ep"], "--data-parallel-size 1")):
        plan = plan_launch(line)
        assert (plan.action, plan.final.argv) == ("unchanged", line)
        assert plan.text.startswith(f"autoselect launch: line unchanged: {why}")
    dense = plan_launch(["vllm", "serve", str(MODELS / "llama-3.1-8b"), "-dp", "2", "-ep"])
    assert dense.action == "unchanged" and "dense" in dense.text


# ---- the forms of the line ----------------------------------------------------------------------


def test_the_api_server_module_line_gets_the_flag_and_its_python_names_the_vllm(tmp_path, on_cpu):
    python, _, _ = fake_vllm_env(tmp_path, "0.32.0")
    line = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", QWEN, "-dp", "2", "-ep"]
    plan = plan_launch(line)
    assert (plan.vllm_version, plan.vllm_version_source) == ("0.32.0", "the line's vllm")
    assert plan.final.argv == line + ["--all2all-backend", "allgather_reducescatter"]


def test_the_vllm_scripts_shebang_names_the_vllm(tmp_path, on_cpu):
    python, _, _ = fake_vllm_env(tmp_path, "0.19.1")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "vllm").write_text(f"#!{python}\nimport sys\n")
    (bin_dir / "vllm").chmod(0o755)
    plan = plan_launch(["vllm", "serve", QWEN, "-dp", "2", "-ep"], environ={"PATH": str(bin_dir)})
    assert (plan.vllm_version, plan.vllm_version_source) == ("0.19.1", "the line's vllm")


def test_the_image_tag_names_the_vllm_and_variables_go_into_the_container(on_cpu):
    line = ["docker", "run", "--gpus", "all", "vllm/vllm-openai:v0.11.0", QWEN, "-dp", "2", "-ep"]
    plan = plan_launch(line)
    assert (plan.vllm_version, plan.vllm_version_source) == ("0.11.0", "the line's image, vllm/vllm-openai:v0.11.0")
    assert plan.final.argv == ["docker", "run", "--gpus", "all", "-e", "VLLM_ALL2ALL_BACKEND=allgather_reducescatter",
                               "vllm/vllm-openai:v0.11.0", QWEN, "-dp", "2", "-ep"]


def test_a_release_before_the_flag_gets_the_variable_before_a_bare_program(on_cpu):
    plan = plan_launch(["A=1", "vllm", "serve", QWEN, "-dp", "2", "-ep"], LaunchOptions(vllm_version="0.11.0"))
    assert plan.final.env == {"A": "1", "VLLM_ALL2ALL_BACKEND": "allgather_reducescatter"}
    assert plan.final.shell() == f"A=1 VLLM_ALL2ALL_BACKEND=allgather_reducescatter vllm serve {QWEN} -dp 2 -ep"
    assert plan.text.startswith("autoselect launch: VLLM_ALL2ALL_BACKEND=allgather_reducescatter inserted")


def test_behind_a_launcher_variables_go_through_env_right_before_the_server(on_cpu):
    plan = plan_launch(["sudo", "-E", "vllm", "serve", QWEN, "-dp", "2", "-ep"], LaunchOptions(vllm_version="0.11.0"))
    assert plan.final.argv[:4] == ["sudo", "-E", "env", "VLLM_ALL2ALL_BACKEND=allgather_reducescatter"]


def test_a_variable_that_overrides_the_flag_is_unset_when_the_pick_replaces_it(on_cpu):
    line = ["VLLM_ALL2ALL_BACKEND=pplx", "vllm", "serve", QWEN, "-dp", "2", "-ep"]
    plan = plan_launch(line, LaunchOptions(vllm_version="0.14.0", override=True), environ={"VLLM_ALL2ALL_BACKEND": "x"})
    assert plan.final.unset == ("VLLM_ALL2ALL_BACKEND",) and "VLLM_ALL2ALL_BACKEND" not in plan.final.env
    assert plan.final.shell().startswith("env -u VLLM_ALL2ALL_BACKEND vllm serve ")
    assert "VLLM_ALL2ALL_BACKEND" not in plan.final.exec_env({"VLLM_ALL2ALL_BACKEND": "x", "PATH": "/bin"})


def test_a_config_file_backend_is_the_users_and_is_judged(tmp_path, on_cpu):
    config = tmp_path / "serve.yaml"
    config.write_text("data-parallel-size: 2\nenable-expert-parallel: true\nall2all-backend: deepep_low_latency\n")
    with pytest.raises(LineRefused, match="CPU platform runs only allgather_reducescatter"):
        plan_launch(["vllm", "serve", QWEN, "--config", str(config)])
    config.write_text("data-parallel-size: 2\nenable-expert-parallel: true\n")
    plan = plan_launch(["vllm", "serve", QWEN, "--config", str(config)])
    assert plan.final.argv == ["vllm", "serve", QWEN, "--config", str(config), "--all2all-backend",
                               "allgather_reducescatter"]


def test_a_pasted_block_is_read_as_check_reads_it(on_cpu):
    block = f"export A=1\nvllm serve {QWEN} \\\n  -dp 2 \\\n  --enable-expert-parallel\n"
    plan = plan_launch([block])
    assert plan.final.shell() == f"A=1 vllm serve {QWEN} -dp 2 --enable-expert-parallel --all2all-backend " \
                                 "allgather_reducescatter"


def test_tuned_flags_and_variables_are_added_unless_the_line_sets_them(on_cpu):
    from autoselect.launch.choose import _answer_extras
    from autoselect.launch.line import read_line

    pick = Pick("flashinfer_nvlink_one_sided", "high", "measured", "db",
                       flags=(("--max-num-batched-tokens", "2048"), ("--some-knob", "3")), env={"NCCL_X": "1", "K": "2"})
    warnings: list[str] = []
    line = read_line(["vllm", "serve", QWEN, "-dp", "2", "-ep", "--max-num-batched-tokens", "4096"])
    flags, env = _answer_extras(line, pick, {"K": "9"}, warnings)
    assert (flags, env) == (["--some-knob", "3"], {"NCCL_X": "1"})
    assert warnings == ["the line's own --max-num-batched-tokens is kept; the answer for flashinfer_nvlink_one_sided "
                        "suggests --max-num-batched-tokens 2048",
                        "the line's own K=9 is kept; the tuned value for flashinfer_nvlink_one_sided is 2"]


# ---- bad input: one Error line, exit 2, nothing executed ----------------------------------------


@pytest.mark.parametrize("args, message", [
    (["--"], "Error: nothing after `--`: pass the server line to start"),
    ([], "Error: nothing after `--`: pass the server line to start"),
    (["--", "vllm serve 'unbalanced"], "Error: cannot split line 1 of the command: No closing quotation"),
    (["--", "vllm", "serve", "-dp", "8", "-ep"], "Error: no model in the command line"),
    (["--", QWEN, "-dp", "8", "-ep"], "Error: the line names no program that starts the server"),
    (["--vllm-version", "1.x", "--", "vllm", "serve", QWEN], "Error: cannot read vLLM version '1.x'"),
    (["--role", "router", "--", "vllm", "serve", QWEN], "Error: unknown role 'router'"),
    (["--token-file", "t", "--", "vllm", "serve", QWEN], "Error: --token-file is the service's token"),
    (["--server", "ftp://x", "--", "vllm", "serve", QWEN], "Error: --server 'ftp://x' is not an http(s) URL"),
    (["--server", "http://x", "--server-timeout", "0", "--", "vllm", "serve", QWEN],
     "Error: --server-timeout 0 must be a number of seconds above 0 and at most 600"),
    (["--decision-json", "/nonexistent-dir/d.json", "--", "vllm", "serve", QWEN],
     "Error: cannot write /nonexistent-dir/d.json: no directory /nonexistent-dir; create it or pass another "
     "--decision-json"),
    (["--", "vllm", "serve", QWEN, "-dp", "2", "-ep", "--config", "absent.yaml"],
     "Error: --config absent.yaml cannot be read here (No such file or directory)"),
    (["--", "vllm", "bench", "latency", "--model", QWEN], "Error: `vllm bench` is not `vllm serve`"),
])
def test_bad_input_is_one_error_line_and_nothing_runs(args, message, monkeypatch, on_cpu):
    started = []
    monkeypatch.setattr(os, "execvpe", lambda *a: started.append(a))
    line = refused(CliRunner().invoke(main, ["launch", *args]))
    assert line.startswith(message), line
    assert started == []


def test_a_program_that_is_not_there_is_refused_before_anything_is_written(tmp_path, on_cpu, monkeypatch):
    started = []
    monkeypatch.setattr(os, "execvpe", lambda *a: started.append(a))
    decision = tmp_path / "d.json"
    absent = tmp_path / "venv" / "bin" / "vllm"
    result = CliRunner().invoke(main, ["launch", "--decision-json", str(decision), "--", str(absent), "serve",
                                       QWEN, "-dp", "2", "-ep"])
    assert refused(result) == f"Error: cannot start {str(absent)!r}: not found on PATH or not executable " \
                              "(nothing was started)"
    assert started == [] and not decision.exists()


# ---- a --moe-backend that dispatches itself; a vLLM newer than the tables ------------------------


MEGAKERNEL = ("--moe-backend", "flashinfer_moe_ep_cutedsl")


def test_a_moe_backend_that_dispatches_itself_leaves_the_line_unchanged(on_cpu):
    # vLLM 0.32+ binds passthrough there (0.34.0 vllm/config/kernel.py:194-228): no backend to insert
    for extra in ((), ("--all2all-backend", "allgather_reducescatter"), ("--all2all-backend", "pplx")):
        line = serve_line(QWEN, *MEGAKERNEL, *extra)
        plan = plan_launch(line, LaunchOptions(gpu_arch="sm100", vllm_version="0.34.0", override=True))
        assert (plan.action, plan.backend, plan.final.argv) == ("unchanged", "passthrough", line)
        assert plan.text.startswith("autoselect launch: line unchanged: --moe-backend flashinfer_moe_ep_cutedsl "
                                    "dispatches and combines itself, so vLLM 0.34.0 binds "
                                    "all2all_backend=passthrough and runs no all2all backend (0.32.0 ")
    # before 0.32.0 the value is no choice of --moe-backend: vllm serve exits, as check says
    with pytest.raises(LineRefused, match="vLLM 0.31.0 has no --moe-backend flashinfer_moe_ep_cutedsl .*'invalid "
                                          "choice'"):
        plan_launch(serve_line(QWEN, *MEGAKERNEL), LaunchOptions(gpu_arch="sm100", vllm_version="0.31.0"))


def test_an_explicit_backend_next_to_a_self_dispatching_moe_backend_is_refused_as_check_says(on_cpu):
    from autoselect.check import check_serve_command

    line = serve_line(QWEN, *MEGAKERNEL, "--all2all-backend", "deepep_low_latency")
    with pytest.raises(LineRefused, match=r"vLLM 0.34.0 refuses to start: --moe-backend flashinfer_moe_ep_cutedsl "
                                             r"dispatches and combines itself and cannot be paired with "
                                             r"--all2all-backend deepep_low_latency .*: drop --all2all-backend "
                                             r"\(nothing was started\)"):
        plan_launch(line, LaunchOptions(gpu_arch="sm100", vllm_version="0.34.0"))
    report = check_serve_command([shlex.join(line)], gpu_arch="sm100", vllm_version="0.34.0")
    assert "moe-backend-conflict" in {f.code for f in report.findings if f.severity == "error"}
    # --enable-dbo with the bound passthrough: vLLM's DBO assert, as check reports it
    with pytest.raises(LineRefused, match="--enable-dbo works only with .* with passthrough vLLM fails an assertion"):
        plan_launch(serve_line(QWEN, *MEGAKERNEL, "--enable-dbo"), LaunchOptions(gpu_arch="sm100",
                                                                               vllm_version="0.34.0"))


def test_a_vllm_newer_than_the_tables_is_said_on_stderr_and_in_the_decision(tmp_path, on_cpu):
    decision = tmp_path / "decision.json"
    result = dry("--host-class", REFERENCE, "--vllm-version", "0.41.0", "--decision-json", decision, "--",
                 *serve_line())
    assert result.exit_code == 0, result.output
    reason, warning = result.stderr.splitlines()
    assert reason.startswith("autoselect launch: --all2all-backend ") and "on vLLM 0.41.0" in reason
    assert warning.startswith("Warning: vLLM 0.41.0 is newer than every release autoselect has read (newest: 0.34.0)")
    doc = json.loads(decision.read_text())
    assert doc["vllm_version_warning"] == warning.removeprefix("Warning: ")
    assert doc["warnings"] == [] and doc["vllm_version"] == "0.41.0"
    # the image tag and the line's own Python resolve through the same function, warning included
    image = plan_launch(["docker", "run", "--gpus", "all", "vllm/vllm-openai:v0.42.0", QWEN, "-dp", "2", "-ep"])
    assert image.vllm_version_warning.startswith("vLLM 0.42.0 is newer")
    python, _, _ = fake_vllm_env(tmp_path / "line", "0.43.0")
    line = plan_launch([str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", QWEN, "-dp", "2", "-ep"])
    assert line.vllm_version_source == "the line's vllm"
    assert line.vllm_version_warning.startswith("vLLM 0.43.0 is newer")
    known = dry("--host-class", REFERENCE, "--vllm-version", "0.34.0", "--decision-json", decision, "--",
                *serve_line())
    assert len(known.stderr.splitlines()) == 1 and json.loads(decision.read_text())["vllm_version_warning"] is None


# ---- the decision, written; the exec ------------------------------------------------------------


def test_the_decision_json_says_what_was_chosen_and_what_runs(tmp_path, fixture_db, on_cpu):
    decision = tmp_path / "decision.json"
    result = dry("--db", fixture_db, "--host-class", B200, "--decision-json", decision, "--", *serve_line(NVFP4))
    assert result.exit_code == 0, result.output
    doc = json.loads(decision.read_text())
    assert doc["schema_version"] == 1 and doc["action"] == "insert"
    assert doc["backend"] == doc["pick"]["backend"] and doc["pick"]["evidence"] == "synthetic"
    assert doc["command_line"] == result.stdout.strip() and doc["reason"] == result.stderr.splitlines()[0]
    assert doc["inserted"]["flags"][:2] == ["--all2all-backend", doc["backend"]]
    assert doc["command"][-len(doc["inserted"]["flags"]):] == doc["inserted"]["flags"]
    assert (doc["gpu_arch"], doc["host_class"], doc["platform"], doc["world_size"]) == ("sm100", B200, "cuda", 8)
    assert set(doc) == set(plan_launch(serve_line(NVFP4), LaunchOptions(db_path=fixture_db, host_class=B200)
                                       ).to_dict())


def test_run_plan_execs_the_final_command_with_its_environment(tmp_path, on_cpu):
    fake_vllm(tmp_path / "bin")
    environ = {"PATH": str(tmp_path / "bin"), "VLLM_ALL2ALL_BACKEND": "pplx", "KEEP": "me"}
    plan = plan_launch(["A=1", "vllm", "serve", QWEN, "-dp", "2", "-ep"], LaunchOptions(vllm_version="0.14.0",
                                                                                          override=True),
                       environ=environ)
    calls, err = [], io.StringIO()
    assert run_plan(plan, environ=environ, execvpe=lambda *a: calls.append(a), err=err) == 0
    [(program, argv, env)] = calls
    assert (program, argv) == ("vllm", ["vllm", "serve", QWEN, "-dp", "2", "-ep", "--all2all-backend",
                                        "allgather_reducescatter"])
    assert env == {"PATH": str(tmp_path / "bin"), "KEEP": "me", "A": "1"}  # the variable would override the flag
    assert err.getvalue() == plan.text + "\n"


def fake_vllm(bin_dir: Path, exit_code: int = 7) -> Path:
    """A stand-in `vllm` script: prints its PID and arguments, exits with ``exit_code``."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "vllm"
    script.write_text(f'#!/bin/sh\necho "pid=$$"\necho "args=$*"\necho "A=$A"\nexit {exit_code}\n')
    script.chmod(0o755)
    return script


def test_launch_becomes_the_server_same_pid_same_exit_status(tmp_path):
    fake_vllm(tmp_path / "bin")
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}", "VLLM_TARGET_DEVICE": "cpu",
           "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "autoselect", "launch", "--vllm-version", "0.32.0", "--",
                             "A=1", "vllm", "serve", QWEN, "-dp", "2", "--enable-expert-parallel"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 7, err
    assert out.splitlines() == [f"pid={proc.pid}",
                                f"args=serve {QWEN} -dp 2 --enable-expert-parallel --all2all-backend "
                                f"allgather_reducescatter", "A=1"]
    assert err.splitlines() == ["autoselect launch: --all2all-backend allgather_reducescatter inserted: the only "
                                "all2all manager vLLM's CPU platform builds (the line sets VLLM_TARGET_DEVICE=cpu); "
                                "no database read"]


def test_the_refusal_path_never_starts_the_server(tmp_path):
    fake_vllm(tmp_path / "bin")
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}", "VLLM_TARGET_DEVICE": "cpu",
           "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "autoselect", "launch", "--", "vllm", "serve", QWEN, "-dp", "2",
                           "-ep", "--all2all-backend", "deepep_low_latency"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("Error: vLLM's CPU platform runs only allgather_reducescatter, not "
                                  "deepep_low_latency") and proc.stderr.count("\n") == 1


def test_a_kept_backend_or_the_cpu_platform_loads_no_selector_database_reader_or_http_client():
    """Only a pick needs the selector (autoselect/launch/local.py) and only --server an HTTP client
    (service.py): the other paths start vLLM without them (perf/launch_latency.py times it)."""
    code = f"""
import sys
from click.testing import CliRunner
from autoselect.cli import main
for args in (["--", "VLLM_TARGET_DEVICE=cpu", "vllm", "serve", {QWEN!r}, "-dp", "2", "-ep"],
             ["--gpu-arch", "sm100", "--", "vllm", "serve", {NVFP4!r}, "-dp", "8", "-ep", "--all2all-backend",
              "flashinfer_nvlink_one_sided"],
             ["--gpu-arch", "sm90", "--", "vllm", "serve", {QWEN!r}, "-dp", "8", "-ep", "--all2all-backend",
              "flashinfer_nvlink_one_sided"]):
    result = CliRunner().invoke(main, ["launch", "--dry-run", *args])
    assert result.exit_code in (0, 2), result.output
unused = ("autoselect.selector", "autoselect.launch.local", "autoselect.launch.service", "autoselect.bridge.client",
          "db.queries", "urllib.request", "pynvml", "http.client")
print(",".join(sorted(m for m in sys.modules if m.startswith(unused))))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""


def test_the_decision_json_shows_no_secret_of_the_line(tmp_path, on_cpu):
    decision = tmp_path / "d.json"
    result = dry("--decision-json", decision, "--", "HF_TOKEN=hf_secret_value", "vllm", "serve", QWEN, "-dp", "2",
                 "-ep", "--api-key", "sk-secret-value", "--max-num-batched-tokens", "4096")
    assert result.exit_code == 0, result.output
    text = decision.read_text()
    assert "secret_value" not in text and "secret-value" not in text
    doc = json.loads(text)
    assert doc["env"] == {"HF_TOKEN": "<redacted>"}
    assert doc["command"][doc["command"].index("--api-key") + 1] == "<redacted>"
    assert doc["command"][doc["command"].index("--max-num-batched-tokens") + 1] == "4096"
    assert "hf_secret_value" in result.stdout  # the dry run prints the command to run, the user's own words


def test_a_pick_the_line_makes_illegal_is_not_used(fixture_db, on_cpu, monkeypatch):
    """The line a pick makes is judged by check's judge before it starts: an answer whose backend the
    rules refuse for this line (here another model's answer: one-sided, for a bf16 line) is not used,
    and vLLM's default stays."""
    import autoselect.launch.local as local

    real = local.local_answer
    nvfp4 = real(NVFP4, fixture_db, host_class=B200, dp=8, tp=1, gpu_arch="sm100", vllm_version="0.34.0",
                 workload="mixed", concurrency=None, max_num_batched_tokens=None, max_workspace_gib=None)
    assert nvfp4.answer["backend"] == "flashinfer_nvlink_one_sided"
    monkeypatch.setattr(local, "local_answer", lambda *a, **k: nvfp4)
    line = serve_line(QWEN)
    plan = plan_launch(line, LaunchOptions(db_path=fixture_db, host_class=B200, gpu_arch="sm100",
                                           vllm_version="0.34.0"))
    assert (plan.action, plan.backend, plan.final.argv) == ("default", "allgather_reducescatter", line)
    assert (f"the selector's pick is illegal for this line: flashinfer_nvlink_one_sided needs nvfp4 activations; "
            f"{QWEN} dispatches bf16 on sm100") in plan.text


def test_a_line_check_finds_an_error_in_is_refused_even_where_vllm_would_run_its_default(on_cpu, fixture_db):
    """EPLB's 256 + 4 experts do not divide over EP 8: vLLM stops at model load whatever the backend
    (check's `eplb` error), so launch starts nothing, where it used to keep vLLM's default."""
    line = serve_line(DEEPSEEK_V3, "--enable-eplb", "--eplb-config", '{"num_redundant_experts": 4}')
    with pytest.raises(LineRefused, match=r"EPLB spreads 260 physical experts \(256 routed \+ 4 redundant\) over EP "
                                          r"size 8, which does not divide them"):
        plan_launch(line, LaunchOptions(db_path=fixture_db, host_class=H200))
    with pytest.raises(LineRefused, match="EP size 256 is larger than the 128 experts: 128 ranks would hold no expert"):
        plan_launch(["vllm", "serve", QWEN, "-dp", "256", "-ep"], LaunchOptions(gpu_arch="sm90", vllm_version="0.11.0"))
