"""`autoselect recommend` / `explain` on databases built through the store's JSONL import.

The fixtures (tests/fixtures/results/*.jsonl, see make_results.py there) hold an 8-GPU
HGX H200 class (two machines, a current and an old software stack, DeepEP installed) and a
DGX B200 class (no DeepEP).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from support.paths import FIXTURES, REPO, load_script

from autoselect.cli import main
from autoselect.selector import recommend_for
from autoselect.selector.render import render_text

MODELS = FIXTURES / "models"
RESULTS = FIXTURES / "results"
H200 = "h200x8-5d1c7e0a"
B200 = "b200x8-9a4f2b61"


@pytest.fixture(scope="module")
def fixture_db(tmp_path_factory) -> Path:
    """The shipped JSONL fixtures' numbers as if a machine had measured them (their runs' synthetic
    mark removed): what the selector's logic is tested on. The shipped data as it is: ``example_db``."""
    from db.importing import import_file

    tmp = tmp_path_factory.mktemp("recommend")
    path = tmp / "fixtures.db"
    for name in ("h200.jsonl", "b200.jsonl"):
        records = [json.loads(line) for line in (RESULTS / name).read_text().splitlines()]
        for d in records:
            d["run"]["meta"].pop("synthetic")
        (tmp / name).write_text("".join(json.dumps(d) + "\n" for d in records))
        import_file(path, tmp / name)
    return path


@pytest.fixture(scope="module")
def example_db(tmp_path_factory) -> Path:
    """A results database filled by importing the shipped (synthetic) JSONL fixtures as they are."""
    from db.importing import import_file

    path = tmp_path_factory.mktemp("example") / "example.db"
    import_file(path, RESULTS / "h200.jsonl")
    import_file(path, RESULTS / "b200.jsonl")
    return path


#: The vLLM the shipped results were measured under (tests/fixtures/results/make_results.py): the
#: decisions below are judged for it, so that the newest release's arrival does not make them stale.
MEASURED_UNDER = "0.33.0"


def rec(db, model, **kw):
    return recommend_for(str(MODELS / model), db_path=db, **{"vllm_version": MEASURED_UNDER, **kw})


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run_cli(*args: str):
    return CliRunner().invoke(main, list(args))


# --- decisions ----------------------------------------------------------------------


def test_winner_changes_with_the_workload_where_the_data_says_so(fixture_db):
    decode = rec(fixture_db, "deepseek-r1-nvfp4", host_class=B200, workload="decode")
    prefill = rec(fixture_db, "deepseek-r1-nvfp4", host_class=B200, workload="prefill")
    assert decode.backend == "flashinfer_nvlink_two_sided"
    assert prefill.backend == "flashinfer_nvlink_one_sided"
    for r in (decode, prefill):
        assert r.decision.startswith("faster than vLLM's default: ") and r.decision.endswith("the bands apart")
        assert (r.comparison.versus, r.comparison.verdict) == ("allgather_reducescatter", "faster")
    assert decode.confidence == "high"
    # one-sided's flags lower the budget so its workspace fits: its 16384-token steps run as two, priced from
    # an interpolated 14336-token value (selector/step.py), which caps the confidence
    one_sided = next(c for c in prefill.candidates if c.backend == "flashinfer_nvlink_one_sided")
    assert prefill.confidence == "medium" and one_sided.buckets[-1].steps == 2
    assert "--max-num-batched-tokens 14336" in prefill.command


def test_decode_buckets_follow_concurrency_per_dp_rank(fixture_db):
    r = rec(fixture_db, "deepseek-r1-nvfp4", host_class=B200, workload="decode", concurrency=512)
    assert r.workload.tokens == [16, 32, 64]


def test_faster_one_sided_results_are_never_chosen_for_an_fp8_model(fixture_db):
    # The H200 fixture has one-sided fp8 rows NOT marked illegal, faster than everything.
    r = rec(fixture_db, "deepseek-v3", host_class=H200, tokens="1,128,8192")
    assert r.backend == "flashinfer_nvlink_two_sided"
    one_sided = [x for x in r.rejected if x.backend == "flashinfer_nvlink_one_sided"]
    assert one_sided[0].kind == "illegal"
    assert one_sided[0].reasons[0].startswith(
        "flashinfer_nvlink_one_sided needs nvfp4 activations; "
        f"{MODELS / 'deepseek-v3'} dispatches fp8_block128 on sm90"
    )
    assert "flashinfer_nvlink_one_sided" not in [c.backend for c in r.candidates]


def test_faster_one_sided_results_are_never_chosen_for_a_bf16_dispatch(fixture_db):
    # An NVFP4 checkpoint on Hopper dispatches bf16; one-sided was measured with --include-illegal.
    r = rec(fixture_db, "deepseek-r1-nvfp4", host_class=H200, workload="prefill")
    assert r.activation_dtype == "bf16"
    assert r.backend == "flashinfer_nvlink_two_sided"
    assert "--all2all-backend flashinfer_nvlink_one_sided" not in r.command


def test_nvfp4_on_blackwell_may_pick_one_sided(fixture_db):
    r = rec(fixture_db, "deepseek-r1-nvfp4", host_class=B200, workload="prefill")
    assert (r.activation_dtype, r.backend) == ("nvfp4", "flashinfer_nvlink_one_sided")


def test_a_tie_stays_on_vllms_default(fixture_db):
    r = rec(fixture_db, "qwen3-30b-a3b", host_class=H200)
    assert r.backend == "allgather_reducescatter"
    # the central values lie within each other's bands: a tie, said with its ratio, never "beyond the noise";
    # FlashInfer comes with vLLM (its wheel pins flashinfer-python), so nothing extra is named
    assert r.decision == ("vLLM's default stays: flashinfer_nvlink_two_sided ties with it (1.00x at the central "
                          "values)")
    statuses = {c.backend: c.status for c in r.candidates}
    assert statuses["allgather_reducescatter"] == "pick"
    assert statuses["flashinfer_nvlink_two_sided"] == "tie"
    assert (r.comparison.versus, r.comparison.verdict) == ("flashinfer_nvlink_two_sided", "tie")
    # this host class's own measurements: another bench run would not separate them
    assert r.comparison.settle is None


def test_an_incorrect_result_disqualifies_the_backend_for_that_shape(fixture_db):
    # DeepEP HT's ok rows are the fastest at prefill, but one row failed the correctness gate.
    r = rec(fixture_db, "deepseek-v3", host_class=H200, workload="prefill")
    assert r.backend == "flashinfer_nvlink_two_sided"
    ht = next(x for x in r.rejected if x.backend == "deepep_high_throughput")
    assert ht.kind == "disqualified"
    assert ht.reasons[0].startswith("incorrect result at 4096 tokens/rank (result ")
    assert ht.reasons[0].endswith(
        "rank 2: token 17 expert 3: dispatched byte 112 differs (got 0x00, want 0x3c); if run 1 measured a mistake, "
        "`autoselect db drop-run 1 --yes` removes it"
    )
    ll = next(x for x in r.rejected if x.backend == "deepep_low_latency")
    assert ll.kind == "disqualified" and "CUDA error: an illegal memory access" in ll.reasons[0]


def test_stale_data_counts_with_a_visible_warning(fixture_db):
    r = rec(fixture_db, "qwen3-235b-a22b-fp8", host_class=H200, tokens="1,64,4096")
    assert r.backend == "flashinfer_nvlink_two_sided"
    assert (
        "stale data: measured with vllm 0.31.0, target is vllm 0.33.0; re-run autoselect bench to refresh"
        in r.warnings
    )
    assert r.confidence == "low"
    assert r.data_used.stale_versions == {
        "driver": ["575.57.08"],
        "flashinfer": ["0.6.18.post1"],
        "vllm": ["0.31.0"],
    }


def test_missing_local_data_on_a_reference_system_answers_from_the_reference_with_the_bench_command(fixture_db):
    # The H200 class has 8x "NVIDIA H200": the GPUs of ref-h200_sxm-x8, and no local mixtral row.
    # (A class whose GPUs match no reference system: tests/selector/test_selector_reference.py, confidence none.)
    r = rec(fixture_db, "mixtral-8x7b", host_class=H200, workload="decode")
    assert r.backend == "allgather_reducescatter"
    assert r.confidence == "reference"
    assert r.reference.host_class == "ref-h200_sxm-x8"
    assert r.reference.why.startswith("host class h200x8-5d1c7e0a (8× NVIDIA H200) has no local measurement")
    assert r.bench_command == (
        f"autoselect bench --model {MODELS / 'mixtral-8x7b'} --world-size 8 --tokens 8,16,32 "
        "--backends allgather_reducescatter,deepep_low_latency,flashinfer_nvlink_two_sided --device cuda"
    )
    assert "run the bench command on a machine of host class h200x8-5d1c7e0a" in r.warnings


def test_unmeasured_world_size_is_missing_local_data(fixture_db):
    r = rec(fixture_db, "deepseek-r1-nvfp4", host_class=B200, world_size=4, workload="decode")
    # the reference answers: AGRS derived at 4 GPUs, one- and two-sided carried from GB200's EP 4 rows
    assert (r.backend, r.confidence) == ("flashinfer_nvlink_one_sided", "reference")
    assert {c.backend: c.evidence for c in r.candidates}["flashinfer_nvlink_two_sided"] == "transferred"
    assert r.data_used.results == 0 and r.reference is not None
    assert r.bench_command is None  # every legal backend has a number from the reference


def test_unmeasured_token_counts_are_estimated_and_marked(fixture_db):
    r = rec(fixture_db, "deepseek-r1-nvfp4", host_class=B200, tokens="100,3000")
    assert r.backend == "flashinfer_nvlink_one_sided"
    assert {(e.backend, e.tokens_per_rank, e.source) for e in r.estimated} == {
        (b, t, "interpolated")
        for b in ("allgather_reducescatter", "flashinfer_nvlink_one_sided", "flashinfer_nvlink_two_sided")
        for t in (100, 3000)
    }
    assert r.confidence == "medium"


def test_extrapolating_far_beyond_the_measured_range_is_refused_not_silent(fixture_db):
    # with the budget that makes 70000 tokens one step (else vLLM runs it as several: selector/step.py)
    r = rec(fixture_db, "deepseek-r1-nvfp4", host_class=B200, tokens="70000", max_num_batched_tokens=70000)
    assert r.backend == "allgather_reducescatter"
    # one-sided's workspace-lowered budget runs 70000 tokens as steps inside its measured range: it has a number
    assert r.decision == ("vLLM's default, which has no number here: nothing could be compared with it; "
                          "the fastest measured backend is flashinfer_nvlink_one_sided (8325 us)")
    # the pick has no number of its own: a fallback, not a decision (confidence.py "pick_unpriced")
    assert r.confidence == "none"
    assert r.confidence_reasons[0].startswith("the pick has no number of its own for this workload")
    assert (
        "allgather_reducescatter at 70000 tokens/rank: refused: 70000 tokens/rank is more than 4x "
        "outside the measured range 1..16384" in r.warnings
    )


def test_moderate_extrapolation_is_flagged_and_lowers_confidence(fixture_db):
    r = rec(fixture_db, "deepseek-r1-nvfp4", host_class=B200, tokens="32768", max_num_batched_tokens=32768,
            max_workspace_gib=8.0)  # one-sided's workspace fits: one step of 32768
    assert r.backend == "flashinfer_nvlink_one_sided"
    assert r.confidence == "low"
    assert any(w.startswith("flashinfer_nvlink_one_sided at 32768 tokens/rank is extrapolated") for w in r.warnings)


def test_data_used_names_host_runs_dates_and_versions(fixture_db):
    r = rec(fixture_db, "qwen3-30b-a3b", host_class=H200, tokens="8")
    d = r.data_used
    assert d.host_class == H200 and d.gpu_name == "NVIDIA H200"
    assert d.machines == ["hgx-h200-02"]  # the newest up-to-date row per point wins
    assert d.results == 2 and d.results_considered == 60  # 2 backends x 15 points x 2 machines
    assert d.runs[0].versions["vllm"] == "0.33.0"
    assert d.newest.startswith("2026-11-27")


def test_tp_and_old_vllm_spellings_reach_the_flags(fixture_db):
    r = rec(fixture_db, "deepseek-v3", host_class=H200, tp=2, world_size=8, vllm_version="0.17.0")
    assert r.backend == "flashinfer_nvlink_two_sided"
    assert r.vllm_args == [
        "--tensor-parallel-size", "2", "--data-parallel-size", "4", "--enable-expert-parallel",
        "--all2all-backend", "flashinfer_all2allv",
    ]
    assert any(w.startswith("stale data: measured with vllm 0.33.0, target is vllm 0.17.0") for w in r.warnings)


# --- formats ------------------------------------------------------------------------


JSON_KEYS = {
    "schema_version", "model", "profile", "deployment", "gpu_arch", "activation_dtype", "vllm_version",
    "vllm_version_source", "workload", "token_budget", "backend", "decision", "step_consequences", "vllm_args",
    "command", "env", "knobs", "confidence", "confidence_reasons", "confidence_codes", "comparison", "candidates",
    "rejected", "estimated", "warnings", "data_used", "bench_command", "expected_effect", "details",
}


def test_json_output_is_the_documented_schema(fixture_db):
    result = run_cli("recommend", "--model", str(MODELS / "deepseek-r1-nvfp4"), "--host-class", B200,
                     "--workload", "decode", "--db", str(fixture_db), "--format", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert set(doc) == JSON_KEYS
    assert doc["schema_version"] == 3
    assert doc["backend"] == "flashinfer_nvlink_two_sided"
    assert doc["vllm_args"] == [
        "--data-parallel-size", "8", "--enable-expert-parallel", "--all2all-backend", "flashinfer_nvlink_two_sided",
    ]
    assert doc["command"] == "vllm serve " + str(MODELS / "deepseek-r1-nvfp4") + " " + " ".join(doc["vllm_args"])
    cand = {c["backend"]: c for c in doc["candidates"]}
    assert set(cand["flashinfer_nvlink_two_sided"]) == {
        "backend", "status", "weighted_us", "halfwidth_us", "buckets", "fit", "warnings", "ratio_to_default",
    }
    assert [b["tokens_per_rank"] for b in cand["allgather_reducescatter"]["buckets"]] == [8, 16, 32]
    # the B200 machine of the class has no deep_ep: legal for the model, unavailable on that host
    assert {r["backend"]: r["kind"] for r in doc["rejected"]} == {
        "deepep_high_throughput": "unavailable", "deepep_low_latency": "unavailable",
    }


def test_args_format_prints_only_the_flags(fixture_db):
    result = run_cli("recommend", "--model", str(MODELS / "deepseek-r1-nvfp4"), "--host-class", B200,
                     "--workload", "decode", "--db", str(fixture_db), "--format", "args")
    assert result.stdout == (
        "--data-parallel-size 8 --enable-expert-parallel --all2all-backend flashinfer_nvlink_two_sided\n"
    )


def test_env_format_prints_shell_exports(fixture_db):
    result = run_cli("recommend", "--model", str(MODELS / "deepseek-r1-nvfp4"), "--host-class", B200,
                     "--workload", "decode", "--db", str(fixture_db), "--format", "env")
    assert result.stdout == (
        "export AUTOSELECT_ALL2ALL_BACKEND=flashinfer_nvlink_two_sided\n"
        "export AUTOSELECT_VLLM_ARGS='--data-parallel-size 8 --enable-expert-parallel "
        "--all2all-backend flashinfer_nvlink_two_sided'\n"
    )


def test_text_output_starts_with_the_command_line(fixture_db):
    result = run_cli("recommend", "--model", str(MODELS / "deepseek-v3"), "--host-class", H200,
                     "--db", str(fixture_db))
    lines = result.stdout.splitlines()
    assert lines[0] == (
        f"vllm serve {MODELS / 'deepseek-v3'} --data-parallel-size 8 --enable-expert-parallel "
        "--all2all-backend flashinfer_nvlink_two_sided"
    )
    assert "rejected:" in lines
    assert any(line.startswith("  deepep_high_throughput (disqualified): incorrect result") for line in lines)


def test_explain_shows_evidence_per_token_bucket(fixture_db):
    result = run_cli("explain", "--model", str(MODELS / "deepseek-r1-nvfp4"), "--host-class", B200,
                     "--tokens", "100", "--db", str(fixture_db))
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "100 tokens/rank (weight 100%):" in out
    assert "interpolated (results " in out
    assert "latency model per backend (latency = a + bytes / bandwidth, all measured points):" in out


def test_recommend_explain_flag_equals_explain_command(fixture_db):
    args = ["--model", str(MODELS / "qwen3-30b-a3b"), "--host-class", H200, "--db", str(fixture_db)]
    assert run_cli("recommend", *args, "--explain").stdout == run_cli("explain", *args).stdout


def test_one_sided_workspace_lowers_max_num_batched_tokens_to_the_allowance(fixture_db):
    r = rec(fixture_db, "deepseek-r1-nvfp4", host_class=B200, workload="prefill", max_workspace_gib=1.0)
    assert r.backend == "flashinfer_nvlink_one_sided"
    assert r.vllm_args[-2:] == ["--max-num-batched-tokens", "7168"]
    assert (
        "flashinfer_nvlink_one_sided: --max-num-batched-tokens lowered from 16384 to 7168 so the "
        "workspace (2.25 -> 0.99 GiB per GPU at EP8) fits --max-workspace-gib 1" in r.warnings
    )


# --- bad input: one line, exit 2, nothing written ----------------------------------


@pytest.mark.parametrize(
    "args, message",
    [
        (["--host-class", "nope"],
         "Error: host class 'nope' is not in {db}; known: b200x8-9a4f2b61, h200x8-5d1c7e0a "
         "(`autoselect db info` lists them)\n"),
        (["--host-class", H200, "--tokens", "1,abc"],
         "Error: --tokens item 'abc' is not TOKENS or TOKENS:WEIGHT; e.g. 1:0.5,64:0.3,8192:0.2\n"),
        (["--host-class", H200, "--tokens", "0"],
         "Error: --tokens item '0': token counts per rank must be at least 1\n"),
        (["--host-class", H200, "--tokens", "8", "--workload", "decode"],
         "Error: pass either --workload or --tokens, not both\n"),
        (["--host-class", H200, "--dp", "4", "--tp", "2", "--world-size", "6"],
         "Error: --world-size 6 != --dp 4 x --tp 2; pass two of the three consistently\n"),
        (["--host-class", H200, "--dp", "1"],
         "Error: dp=1: vLLM only uses an all2all backend with --data-parallel-size > 1 (tensor-parallel-only "
         "expert parallelism has no all2all); pass --dp 2 or more\n"),
        (["--host-class", H200, "--max-workspace-gib", "0"],
         "Error: --max-workspace-gib 0.0 must be a positive number of GiB, at most 4096 (more than any GPU holds)\n"),
        (["--host-class", H200, "--gpu-arch", "sm75"], None),
        (["--host-class", H200, "--vllm-version", "banana"], None),
    ],
)
def test_bad_input_is_one_line_on_stderr_exit_2_and_writes_nothing(fixture_db, args, message):
    before = digest(fixture_db)
    result = run_cli("recommend", "--model", str(MODELS / "deepseek-v3"), "--db", str(fixture_db), *args)
    assert result.exit_code == 2
    assert result.stdout == ""
    if message is not None:
        assert result.stderr == message.format(db=fixture_db)
    assert result.stderr.startswith("Error: ") and result.stderr.count("\n") == 1
    assert "Traceback" not in result.stderr
    assert digest(fixture_db) == before


def test_dense_model_is_refused_with_one_line(fixture_db):
    result = run_cli("recommend", "--model", str(MODELS / "llama-3.1-8b"), "--db", str(fixture_db))
    assert result.exit_code == 2
    assert result.stderr.startswith("Error: ") and "dense model" in result.stderr
    assert result.stderr.count("\n") == 1


def test_missing_database_file_is_no_data_not_an_error(tmp_path):
    # On this GPU-less machine: ask about Blackwell with an explicit deployment.
    r = recommend_for(str(MODELS / "deepseek-r1-nvfp4"), db_path=tmp_path / "absent.db", gpu_arch="sm100", dp=8)
    assert r.backend == "allgather_reducescatter"
    assert r.data_used.results == 0
    assert not (tmp_path / "absent.db").exists()


def test_host_class_needs_a_database(tmp_path):
    result = run_cli("recommend", "--model", str(MODELS / "deepseek-v3"), "--host-class", H200,
                     "--db", str(tmp_path / "absent.db"))
    assert result.exit_code == 2
    assert result.stderr == (
        f"Error: host class 'h200x8-5d1c7e0a' is not in {tmp_path / 'absent.db'}; known: none "
        "(`autoselect db info` lists them)\n"
    )
    assert not (tmp_path / "absent.db").exists()


# --- fast path ----------------------------------------------------------------------


def test_recommend_imports_no_torch_flashinfer_vllm_numpy_sqlite_utils_or_optuna(fixture_db):
    code = f"""
import sys
from click.testing import CliRunner
from autoselect.cli import main
result = CliRunner().invoke(main, ["recommend", "--model", {str(MODELS / 'deepseek-r1-nvfp4')!r},
    "--host-class", {B200!r}, "--db", {str(fixture_db)!r}, "--format", "json", "--explain"])
assert result.exit_code == 0, result.output
result = CliRunner().invoke(main, ["explain", "--model", {str(MODELS / 'deepseek-v3')!r},
    "--host-class", {H200!r}, "--db", {str(fixture_db)!r}])
assert result.exit_code == 0, result.output
heavy = ("torch", "flashinfer", "vllm", "numpy", "sqlite_utils", "optuna", "deep_ep", "rich")
print(",".join(sorted(m for m in heavy if m in sys.modules)))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ.copy())
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""


def test_recommend_loads_neither_the_vllm_bridge_nor_the_command_readers(fixture_db):
    """Without --validate, recommend asks vLLM nothing and reads no command line: the bridge's worker
    protocol, client and quantization answers, vllm_flags' readers and the rules' --moe-backend
    table stay unbuilt (their re-exports are lazy; perf/recommend_imports.py times the difference).
    Nor does it hash, resolve a host name
    or start a process (hashlib, socket, subprocess: ~2 ms each to import)."""
    code = f"""
import sys
from click.testing import CliRunner
from autoselect.cli import main
for host_class in ({B200!r}, "ref-b200_sxm-x8"):
    result = CliRunner().invoke(main, ["recommend", "--model", {str(MODELS / 'deepseek-r1-nvfp4')!r},
        "--host-class", host_class, "--db", {str(fixture_db)!r}, "--format", "json"])
    assert result.exit_code == 0, result.output
unused = ("autoselect.bridge.client", "autoselect.bridge.protocol", "autoselect.bridge.quant",
          "autoselect.bridge.verdicts", "autoselect.bridge.hooks", "autoselect.vllm_flags.command",
          "autoselect.vllm_flags.serve_args", "autoselect.rules.moe_backends", "autoselect.selector.given",
          "autoselect.tune", "autoselect.fleet", "autoselect.report")
stdlib = ("hashlib", "socket", "subprocess")
print(",".join(sorted(m for m in sys.modules if m.startswith(unused) or m in stdlib)))
import autoselect.bridge, autoselect.rules, autoselect.vllm_flags
assert autoselect.bridge.FlagValidation.__module__ == "autoselect.bridge.verdicts"
assert autoselect.rules.Binding.__module__ == "autoselect.rules.moe_backends"
assert autoselect.vllm_flags.read_command.__module__ == "autoselect.vllm_flags.command"
import autoselect.selector
assert autoselect.selector.recommend_given.__module__ == "autoselect.selector.given"
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ.copy())
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""


def test_an_answer_from_local_measurements_builds_none_of_the_published_reference(fixture_db):
    """A host class with measurements of the shape never reads NVIDIA's tables, so the reference
    package's modules (systems, query, the AGRS derivation, transfer, host) stay unloaded: the
    package face loads them on first use, and only ``is_reference_class`` (a prefix) is asked."""
    code = f"""
import sys
from click.testing import CliRunner
from autoselect.cli import main
result = CliRunner().invoke(main, ["recommend", "--model", {str(MODELS / 'deepseek-r1-nvfp4')!r},
    "--host-class", {B200!r}, "--db", {str(fixture_db)!r}, "--format", "json"])
assert result.exit_code == 0, result.output
print(",".join(sorted(m for m in sys.modules if m.startswith("autoselect.reference."))))
import autoselect.reference
assert autoselect.reference.get_class("ref-b200_sxm-x8").name == "ref-b200_sxm-x8"
assert autoselect.reference.reference_host.__module__ == "autoselect.reference.host"
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ.copy())
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""


def test_recommend_and_explain_have_help_with_an_example():
    for name in ("recommend", "explain"):
        result = run_cli(name, "--help")
        assert result.exit_code == 0
        assert "Example" in result.stdout


def test_leave_one_out_regret_on_the_fixtures_beats_both_static_policies(fixture_db):
    """perf/regret.py's study: each held-out point is recommended from the other points."""
    regret = load_script(REPO / "perf" / "regret.py")
    from db.queries import connect_readonly

    conn = connect_readonly(fixture_db)
    try:
        regrets, skipped = regret.study(conn, None)
    finally:
        conn.close()
    ours = regret.summary(regrets["autoselect"])
    default = regret.summary(regrets["always-default"])
    priority = regret.summary(regrets["fixed-priority"])
    assert ours["n"] == default["n"] == priority["n"] == 75
    assert ours["max"] < 1.01  # within 1 % of the best legal backend at every held-out point
    assert ours["mean"] < priority["mean"] < default["mean"]
    assert dict(skipped) == {}


def test_read_db_false_answers_without_opening_the_database(tmp_path):
    broken = tmp_path / "broken.db"
    broken.write_bytes(b"not a database at all")
    with pytest.raises(Exception):  # noqa: B017 (whatever sqlite3 raises for a non-database)
        recommend_for(str(MODELS / "deepseek-v3"), db_path=broken, gpu_arch="sm90", world_size=8)
    rec = recommend_for(str(MODELS / "deepseek-v3"), db_path=broken, gpu_arch="sm90", world_size=8, read_db=False)
    assert rec.data_used.results == 0 and broken.read_bytes() == b"not a database at all"
    answer = recommend_for(str(MODELS / "deepseek-v3"), db_path=broken, host_class="ref-h200_sxm-x8", read_db=False)
    assert answer.reference is not None and answer.confidence == "reference"


def test_this_host_answers_for_a_fingerprint_the_caller_already_took(tmp_path, monkeypatch):
    import autoselect.selector.pipeline as pipeline
    from support.fleet import h200_host

    node = h200_host("gpu-a")
    monkeypatch.setattr(pipeline, "fingerprint", lambda: pytest.fail("fingerprinted again"))
    rec = recommend_for(str(MODELS / "deepseek-v3"), db_path=tmp_path / "none.db", dp=8, this_host=node)
    assert (rec.data_used.host_class, rec.gpu_arch) == (node.host_class, "sm90")
    # a host class still names the machine: this_host is this machine's, used only without one
    rec = recommend_for(str(MODELS / "deepseek-v3"), db_path=tmp_path / "none.db", dp=8, this_host=node,
                        host_class="ref-b200_sxm-x8")
    assert rec.gpu_arch == "sm100"


def test_profile_answers_for_a_profile_the_caller_already_read(tmp_path, monkeypatch):
    import autoselect.selector.pipeline as pipeline
    from autoselect.model import load_profile

    model = str(MODELS / "deepseek-v3")
    profile = load_profile(model)
    expected = recommend_for(model, db_path=tmp_path / "none.db", host_class="ref-h200_sxm-x8").to_dict()
    monkeypatch.setattr(pipeline, "load_profile", lambda *a, **k: pytest.fail("the model read again"))
    assert recommend_for(model, db_path=tmp_path / "none.db", host_class="ref-h200_sxm-x8",
                         profile=profile).to_dict() == expected


def test_a_newer_vllm_is_judged_as_the_newest_known_and_the_answer_says_so(fixture_db):
    r = rec(fixture_db, "deepseek-r1-nvfp4", host_class=B200, workload="decode", vllm_version="0.41.0")
    assert r.vllm_version_warning.startswith("vLLM 0.41.0 is newer than every release autoselect has read "
                                             "(newest: 0.34.0)")
    assert r.to_dict()["vllm_version_warning"] == r.vllm_version_warning
    assert "vllm_version_warning" not in rec(fixture_db, "deepseek-r1-nvfp4", host_class=B200, workload="decode",
                                             vllm_version="0.33.0").to_dict()
    cli = run_cli("recommend", "--model", str(MODELS / "deepseek-r1-nvfp4"), "--db", str(fixture_db), "--host-class",
                  B200, "--workload", "decode", "--vllm-version", "0.41.0", "--format", "json")
    assert cli.exit_code == 0 and cli.stderr.count("Warning: vLLM 0.41.0 is newer") == 1
    assert json.loads(cli.stdout)["vllm_version_warning"].startswith("vLLM 0.41.0 is newer")


def test_a_0_34_answer_warns_that_its_flashinfer_pin_is_not_on_pypi(fixture_db):
    r = rec(fixture_db, "deepseek-r1-nvfp4", host_class=B200, workload="decode", vllm_version="0.34.0")
    assert any("flashinfer-python==0.7.3, which is not on PyPI" in w for w in r.warnings)
    assert not any("not on PyPI" in w for w in rec(fixture_db, "deepseek-r1-nvfp4", host_class=B200,
                                                  workload="decode", vllm_version="0.33.0").warnings)


# ---- synthetic example data: marked in its runs, shown on every number, never confidence high ----


def _assert_synthetic_everywhere(rec_obj) -> None:
    doc = json.loads(json.dumps(rec_obj.to_dict()))
    assert rec_obj.confidence != "high"
    assert "the answer rests on synthetic example data (made up, not measured on any machine)" in \
        rec_obj.confidence_reasons
    priced = [c for c in doc["candidates"] if c["fit"] is not None]
    assert priced and all(c["evidence"] == "synthetic" for c in priced)
    assert all(b["evidence"] == "synthetic" and b["reference"].startswith("synthetic example data (")
               for c in priced for b in c["buckets"] if b["latency_us"] is not None)
    assert doc["data_used"]["runs"] and all("make_results.py" in run["synthetic"] for run in doc["data_used"]["runs"])


@pytest.mark.parametrize("model, host_class, workload", [
    ("deepseek-r1-nvfp4", "b200x8-9a4f2b61", "mixed"), ("deepseek-v3", "h200x8-5d1c7e0a", "decode"),
    ("qwen3-30b-a3b", "h200x8-5d1c7e0a", "prefill"), ("qwen3-235b-a22b-fp8", "h200x8-5d1c7e0a", "mixed")])
def test_the_shipped_example_data_is_synthetic_on_every_number_and_never_high(example_db, model, host_class,
                                                                              workload):
    r = rec(example_db, model, host_class=host_class, workload=workload, vllm_version="0.33.0")
    _assert_synthetic_everywhere(r)
    text = render_text(r, explain=True)
    assert "; SYNTHETIC: example data made by tests/fixtures/results/make_results.py" in text
    rows = [line for line in text.splitlines() if line.startswith(("allgather_reducescatter ", "flashinfer_"))
            and not line.split()[0].endswith(":")]  # the table's rows, not the lines under it
    assert rows and all(" synthetic " in row for row in rows if " no data " not in row)
    assert "  [1] synthetic example data (example data made by tests/fixtures/results/make_results.py" in text


def test_synthetic_survives_export_import_and_merge(example_db, tmp_path):
    from db.importing import import_file, merge_into
    from db.jsonl import export_to

    exported = tmp_path / "out.jsonl"
    export_to(example_db, "jsonl", output=exported)
    assert all(json.loads(line)["run"]["meta"]["synthetic"] for line in exported.read_text().splitlines()
               if json.loads(line)["format"] == "autoselect.result")
    again = tmp_path / "again.db"
    import_file(again, exported)
    merged = tmp_path / "merged.db"
    merge_into(merged, again)
    for db in (again, merged):
        _assert_synthetic_everywhere(rec(db, "deepseek-r1-nvfp4", host_class="b200x8-9a4f2b61",
                                         vllm_version="0.33.0"))


def test_without_measurements_the_answer_for_other_gpus_has_confidence_none(tmp_path, monkeypatch):
    # recommend's help promises it; this CPU machine's missing packages and links make nothing illegal there
    from autoselect.hardware import cpu_fingerprint
    import autoselect.selector.pipeline as pipeline

    monkeypatch.setattr(pipeline, "fingerprint", cpu_fingerprint)
    result = run_cli("recommend", "--model", str(MODELS / "deepseek-v3"), "--gpu-arch", "sm90", "--dp", "8",
                     "--db", str(tmp_path / "none.db"), "--format", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert (doc["backend"], doc["confidence"]) == ("allgather_reducescatter", "none")
    assert [c["backend"] for c in doc["candidates"]] == [
        "allgather_reducescatter", "flashinfer_nvlink_two_sided", "deepep_low_latency"]
    # the rules' refusal and the step's (CUDA graphs off at decode), none for this machine's packages or links
    assert [(r["backend"], r["kind"]) for r in doc["rejected"]] == [
        ("flashinfer_nvlink_one_sided", "illegal"), ("deepep_high_throughput", "ineligible")]
    assert "Without measurements the answer is the default with confidence none" in " ".join(
        run_cli("recommend", "--help").stdout.split())
