"""End-to-end sweeps on CPU: gloo worker processes, the gate, isolation, the store and the CLI."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from support.db import cpu_host
from support.paths import PLUGINS, REPO

from autoselect.cli import main
from bench.sweep import SweepSpec, run_sweep

FAST = dict(min_time_s=0.05, min_samples=10, timeout_s=2.0)
SHAPE = dict(hidden=256, top_k=4, experts=16, activation_dtype="bf16", device="cpu")


def _spec(backends, tokens=(4,), world_size=2, **kw):
    args = dict(SHAPE, **FAST)
    args.update(kw)
    return SweepSpec(backends=list(backends), tokens=list(tokens), world_size=world_size, **args)


@pytest.mark.slow
@pytest.mark.parametrize("world_size", [2, 4])
def test_both_cpu_backends_give_ok_rows_with_sane_numbers(world_size):
    results = run_sweep(_spec(["allgather_reducescatter", "reference_all_to_all"], tokens=(1, 32),
                              world_size=world_size, timeout_s=1.0))
    assert [(r.backend, r.tokens_per_rank, r.status) for r in results] == [
        ("allgather_reducescatter", 1, "ok"), ("allgather_reducescatter", 32, "ok"),
        ("reference_all_to_all", 1, "ok"), ("reference_all_to_all", 32, "ok")]
    for r in results:
        assert r.samples >= 10 and len(r.raw_samples_us) == r.samples
        assert 0 < r.latency_us_min <= r.latency_us_p50 <= r.latency_us_p99
        assert 0 < r.dispatch_us_p50 < r.latency_us_p90 and 0 < r.combine_us_p50 < r.latency_us_p90
        assert r.bytes_per_rank > 0 and r.algbw_gbps > 0
        assert r.busbw_gbps == pytest.approx(r.algbw_gbps * (world_size - 1) / world_size)
        assert r.device == "cpu" and r.world_size == world_size and r.error is None
    assert results[1].bytes_per_rank > results[0].bytes_per_rank


@pytest.mark.slow
@pytest.mark.parametrize("backend, phase, text", [
    ("test_wrong_byte", "dispatch", "rank 1: token"),
    ("test_drops_token", "dispatch", "never arrived"),
    ("test_double_counts", "combine", "rank 0: combine of token"),
])
def test_the_gate_marks_faulty_adapters_incorrect_and_never_times_them(plugins, backend, phase, text):
    (r,) = run_sweep(_spec([backend]))
    assert r.status == "incorrect"
    assert r.error.startswith(f"{phase}: ") and text in r.error
    assert r.samples == 0 and r.latency_us_p50 is None


@pytest.mark.slow
def test_a_crashing_rank_is_an_error_and_the_sweep_goes_on(plugins):
    results = run_sweep(_spec(["test_rank_crashes", "reference_all_to_all"], tokens=(2, 4)))
    assert [(r.backend, r.tokens_per_rank, r.status) for r in results] == [
        ("test_rank_crashes", 2, "error"), ("test_rank_crashes", 4, "error"),
        ("reference_all_to_all", 2, "ok"), ("reference_all_to_all", 4, "ok")]
    assert results[0].error.startswith("rank 1 died (exit status 13)")


@pytest.mark.slow
def test_a_repeated_point_is_measured_once_per_copy_in_one_worker_start():
    from bench.events import GroupStarted

    starts = []
    results = run_sweep(_spec(["reference_all_to_all"], tokens=(4, 8, 4, 8)),
                        progress=lambda ev: isinstance(ev, GroupStarted) and starts.append(ev))
    assert [(r.tokens_per_rank, r.status) for r in results] == [(4, "ok"), (8, "ok"), (4, "ok"), (8, "ok")]
    assert len(starts) == 1


@pytest.mark.slow
def test_a_crash_at_a_repeated_point_fails_one_copy_and_the_rest_run_on(plugins):
    results = run_sweep(_spec(["test_rank_crashes"], tokens=(2, 2)))
    assert [(r.tokens_per_rank, r.status) for r in results] == [(2, "error"), (2, "error")]


@pytest.mark.slow
def test_a_hanging_rank_is_a_timeout_and_the_sweep_goes_on(plugins, monkeypatch):
    monkeypatch.setattr("bench.launch.group.MEASURE_GRACE_S", 1.0)
    start = time.monotonic()
    results = run_sweep(_spec(["test_rank_hangs", "allgather_reducescatter"], timeout_s=1.0))
    assert [(r.backend, r.status) for r in results] == [("test_rank_hangs", "timeout"),
                                                        ("allgather_reducescatter", "ok")]
    assert "wall-clock limit" in results[0].error
    assert time.monotonic() - start < 60


@pytest.mark.slow
def test_an_adapter_failing_before_its_first_point_fails_every_point_once(plugins):
    results = run_sweep(_spec(["test_setup_raises"], tokens=(1, 2, 4)))
    assert [r.status for r in results] == ["error", "error", "error"]
    assert results[0].error[len("rank 0"):] == ": ValueError: this shape is not supported by the test adapter"


@pytest.mark.slow
def test_results_reach_the_store_one_row_per_point(db_path):
    from db.store import Store

    with Store(db_path) as store:
        results = run_sweep(_spec(["reference_all_to_all"], tokens=(1, 8)), store=store)
    conn = sqlite3.connect(db_path)
    rows = conn.execute("select backend, tokens_per_rank, status, activation_dtype, wire_dtype from results"
                        " order by tokens_per_rank").fetchall()
    # a backend the wire table does not know (a benchmark-only baseline) carries the dtype as it is
    assert rows == [("reference_all_to_all", 1, "ok", "bf16", "bf16"), ("reference_all_to_all", 8, "ok", "bf16", "bf16")]
    assert conn.execute("select status from runs").fetchall() == [("complete",)]
    assert len(results) == 2


@pytest.mark.slow
def test_env_knobs_reach_the_workers_and_are_recorded(plugins):
    (r,) = run_sweep(_spec(["reference_all_to_all"], env={"AUTOSELECT_TEST_KNOB": "7"}))
    assert r.status == "ok" and r.knobs == {"env": {"AUTOSELECT_TEST_KNOB": "7"}}


def _bench(*args, db=None):
    argv = ["bench", "--device", "cpu", "--world-size", "2", "--hidden", "256", "--top-k", "4",
            "--experts", "16", "--dtype", "bf16", "--min-time", "0.05", "--timeout", "2", *args]
    if db is not None:
        argv += ["--db", str(db)]
    return CliRunner().invoke(main, argv)


@pytest.mark.slow
def test_bench_cli_prints_fixed_columns_with_units_and_a_footer(db_path):
    res = _bench("--backends", "allgather_reducescatter,reference_all_to_all", "--tokens", "1,16", db=db_path)
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[2].split() == ["#", "backend", "tokens", "bytes", "time_p50", "dispatch", "combine",
                                "algbw", "busbw", "noise", "samples", "status", "footing"]
    assert lines[3].split() == ["#", "(/rank)", "(B/rank)", "(us)", "(us)", "(us)", "(GB/s)", "(GB/s)", "(%)"]
    rows = [line.split() for line in lines[4:8]]
    assert [(r[0], r[1], r[10].rstrip("*"), " ".join(r[11:])) for r in rows] == [
        ("allgather_reducescatter", "1", "ok", "cpu grouped"), ("allgather_reducescatter", "16", "ok", "cpu grouped"),
        ("reference_all_to_all", "1", "ok", "cpu"), ("reference_all_to_all", "16", "ok", "cpu")]
    assert "# ok 4 · incorrect 0 · unavailable 0 · error 0 · timeout 0 · skipped (illegal) 0" in lines
    assert lines[-1] == f"# stored as run 1 in {db_path}"


@pytest.mark.slow
def test_a_cpu_bench_of_the_default_stores_vllms_grouped_calls_and_the_fused_variant_under_its_own_name(db_path):
    res = _bench("--backends", "allgather_reducescatter,reference_allgather_fused", "--tokens", "2", db=db_path)
    assert res.exit_code == 0, res.output
    conn = sqlite3.connect(db_path)
    rows = conn.execute("select backend, status, timing, timing_note, calls, dp_sizes, via, "
                        "json_extract(versions, '$.vllm_calls') from results order by id").fetchall()
    assert rows == [
        ("allgather_reducescatter", "ok", "cpu", None, "grouped", "equal", "adapter",
         "vLLM 0.32.0+ (rules/agrs_collectives.py): 3 all_gather per tensor in sequence (gloo has no groups), "
         "reduce_scatter"),
        ("reference_allgather_fused", "ok", "cpu", None, "fused", "equal", "adapter", None),
    ]
    assert "# footing: graph (CUDA-graph replay) / eager / cpu; grouped = vLLM's calls, one per tensor; fused = " \
        "packed in one collective; unequal = vLLM's unequal-DP-size path; via-vllm = vLLM's own prepare/finalize" \
        in res.stdout.splitlines()


@pytest.mark.slow
def test_the_unequal_dp_size_path_runs_through_the_gate_and_is_stored_as_such(db_path):
    res = _bench("--backends", "allgather_reducescatter", "--tokens", "3", "--dp-sizes", "unequal", db=db_path)
    assert res.exit_code == 0, res.output
    row = sqlite3.connect(db_path).execute("select status, calls, dp_sizes, json_extract(versions, '$.vllm_calls') "
                                            "from results").fetchone()
    assert row == ("ok", "grouped", "unequal", "vLLM 0.32.0+ (rules/agrs_collectives.py): 3 broadcast per tensor "
                                               "and root rank in sequence (gloo has no groups), reduce per root rank")


def test_via_vllm_on_cpu_is_one_error_line_and_writes_nothing(db_path):
    res = _bench("--backends", "allgather_reducescatter", "--via", "vllm", db=db_path)
    assert (res.exit_code, res.stderr) == (2, "Error: --via vllm times vLLM's own prepare/finalize kernels, which run "
                                              "on CUDA GPUs only; run it with --device cuda on a GPU node that has "
                                              "vLLM, or drop --via vllm\n")
    assert not db_path.exists()


@pytest.mark.slow
def test_bench_cli_json_carries_schema_version_and_every_row(db_path):
    res = _bench("--backends", "reference_all_to_all", "--tokens", "2", "--format", "json", db=db_path)
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["schema_version"] == 2 and doc["run_id"] == 1 and doc["spec"]["activation_dtype"] == "bf16"
    assert [(r["backend"], r["status"]) for r in doc["results"]] == [("reference_all_to_all", "ok")]
    assert "raw_samples_us" not in doc["results"][0]


@pytest.mark.parametrize("args, message", [
    (["--backends", "nope"], "Error: unknown backend 'nope'; known: "),
    (["--tokens", "1,x"], "Error: --tokens item 'x' is not a whole number written in digits 0-9; e.g. 1,16,256\n"),
    (["--tokens", "0"], "Error: --tokens item '0': token counts per rank must be at least 1\n"),
    (["--tokens", "1,,16"], "Error: --tokens '1,,16' has an empty item; separate the values by single commas, "
                            "e.g. 1,16,256\n"),
    (["--routing", "skewed"], "Error: unknown routing 'skewed'; use uniform, zipf, zipf:S, or a .json/.npy/.pt file of expert ids\n"),
    (["--max-noise", "5"], "Error: --max-noise must be a fraction in (0, 1), got 5.0\n"),
])
def test_bench_cli_bad_input_is_one_line_exit_2_and_writes_nothing(db_path, args, message):
    res = _bench(*args, db=db_path)
    assert res.exit_code == 2
    assert res.stderr.startswith(message) and res.stderr.count("\n") == 1
    assert not db_path.exists()


def test_bench_cli_needs_a_shape(db_path):
    res = CliRunner().invoke(main, ["bench", "--device", "cpu", "--hidden", "256", "--db", str(db_path)])
    assert res.exit_code == 2
    assert res.stderr == ("Error: missing --top-k, --experts, --dtype: an explicit shape needs all of --hidden, "
                          "--top-k, --experts and --dtype (or pass --model)\n")
    assert not db_path.exists()


def test_bench_cli_refuses_cuda_without_gpus(db_path):
    res = CliRunner().invoke(main, ["bench", "--device", "cuda", "--hidden", "256", "--top-k", "4",
                                    "--experts", "16", "--dtype", "bf16", "--db", str(db_path)])
    assert res.exit_code == 2
    assert res.stderr == "Error: --device cuda but this host has no CUDA GPU; use --device cpu\n"
    assert not db_path.exists()


def test_on_a_host_without_a_gpu_every_missing_choice_is_named_in_one_error(db_path, monkeypatch):
    """--model on a CPU host with --device cuda: one round trip names both --gpu-arch and --device cpu."""
    monkeypatch.setattr("bench.run.fingerprint", cpu_host)
    res = CliRunner().invoke(main, ["bench", "--model", "Qwen/Qwen3-30B-A3B", "--device", "cuda", "--db", str(db_path)])
    assert res.exit_code == 2
    assert res.stderr == ("Error: this host has no GPU: pass --gpu-arch sm90|sm100 (the arch whose activation dtype "
                          "to measure) and --device cpu (it measures over gloo processes)\n")
    assert not db_path.exists()


@pytest.mark.slow  # a real sweep over gloo workers
def test_without_device_bench_measures_on_this_hosts_device_so_a_cpu_host_needs_only_the_arch(db_path, monkeypatch):
    monkeypatch.setattr("bench.run.fingerprint", cpu_host)
    res = CliRunner().invoke(main, ["bench", "--model", "Qwen/Qwen3-30B-A3B", "--db", str(db_path)])
    assert res.exit_code == 2
    assert res.stderr == ("Error: --model Qwen/Qwen3-30B-A3B on a host without a GPU: pass --gpu-arch sm90|sm100 to "
                          "choose the activation dtype\n")
    res = CliRunner().invoke(main, ["bench", "--model", "Qwen/Qwen3-30B-A3B", "--gpu-arch", "sm90", "--tokens", "1",
                                    "--backends", "reference_all_to_all", "--min-samples", "2", "--min-time", "0",
                                    "--format", "json", "--db", str(db_path)])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["spec"]["device"] == "cpu"


def test_bench_help_has_an_example_and_defaults():
    res = CliRunner().invoke(main, ["bench", "--help"])
    assert res.exit_code == 0
    assert "autoselect bench --device cpu --world-size 2" in res.output and "[default: 15.0]" in res.output


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status  # a zombie has exited


def _workers_under(path: Path) -> list[int]:
    """Live worker processes of the groups whose directories are under ``path`` (spawned or forked),
    and any process whose environment names ``path`` as TMPDIR (the zygote, the workers)."""
    pids = set()
    for events in path.glob("autoselect-group-*/rank*.jsonl"):
        for line in events.read_text().splitlines():
            if '"ready"' in line:
                pids.add(json.loads(line)["pid"])
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) != os.getpid():
            try:
                env = (proc / "environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if f"TMPDIR={path}".encode() in env and b"bench.launch" in (proc / "cmdline").read_bytes():
                pids.add(int(proc.name))
    return sorted(p for p in pids if _alive(p))


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_no_worker_outlives_an_interrupted_sweep(tmp_path, sig):
    env = dict(os.environ, TMPDIR=str(tmp_path),
               PYTHONPATH=os.pathsep.join([str(PLUGINS), os.environ.get("PYTHONPATH", "")]))
    # Ctrl-C at a terminal: a pytest started in the background (``cmd &`` in a script) ignores
    # SIGINT, and the sweep would inherit that and never see the signal
    code = ("import signal; signal.signal(signal.SIGINT, signal.default_int_handler)\n"
            "from bench.sweep import SweepSpec, run_sweep\n"
            "run_sweep(SweepSpec(backends=['test_rank_hangs'], tokens=[4], hidden=256, top_k=4, experts=16,"
            " activation_dtype='bf16', world_size=2, device='cpu', timeout_s=300))\n")
    parent = subprocess.Popen([sys.executable, "-c", code], env=env)
    deadline = time.monotonic() + 60
    while len(_workers_under(tmp_path)) < 3 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(_workers_under(tmp_path)) == 3  # two ranks and the zygote they were forked from
    time.sleep(1.0)
    parent.send_signal(sig)
    parent.wait(timeout=30)
    deadline = time.monotonic() + 10
    while _workers_under(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _workers_under(tmp_path) == []


@pytest.mark.slow
def test_bench_with_a_model_skips_backends_the_rules_reject(db_path, models_dir):
    res = CliRunner().invoke(main, [
        "bench", "--model", str(models_dir / "qwen3-30b-a3b"), "--gpu-arch", "sm90", "--device", "cpu",
        "--backends", "allgather_reducescatter,flashinfer_nvlink_one_sided", "--tokens", "2",
        "--min-time", "0.05", "--timeout", "2", "--db", str(db_path)])
    assert res.exit_code == 0, res.output
    assert "# autoselect bench: H2048 top8 E128 bf16, world size 2, device cpu" in res.stdout
    assert "# skipped flashinfer_nvlink_one_sided: illegal here (flashinfer_nvlink_one_sided needs nvfp4 activations" in res.stdout
    rows = sqlite3.connect(db_path).execute("select backend, status, illegal from results").fetchall()
    assert rows == [("allgather_reducescatter", "ok", 0)]


def test_without_an_arch_an_explicit_dtype_is_judged_on_every_arch():
    from autoselect.hardware import cpu_fingerprint
    from bench.sweep import legality

    spec = _spec(["flashinfer_nvlink_one_sided", "allgather_reducescatter"], activation_dtype="bf16")
    verdicts = legality(spec, cpu_fingerprint())
    assert not verdicts["flashinfer_nvlink_one_sided"].ok  # bf16 is illegal on one-sided on every arch
    assert "needs nvfp4 activations" in verdicts["flashinfer_nvlink_one_sided"].reasons[0]
    assert verdicts["allgather_reducescatter"].ok
    assert verdicts.keys() == {"flashinfer_nvlink_one_sided", "allgather_reducescatter"}


def test_without_an_arch_nvfp4_one_sided_is_legal_and_reaches_the_adapter():
    from autoselect.hardware import cpu_fingerprint
    from bench.sweep import legality

    verdicts = legality(_spec(["flashinfer_nvlink_one_sided"], activation_dtype="nvfp4"), cpu_fingerprint())
    assert verdicts["flashinfer_nvlink_one_sided"].ok


def test_each_backend_moves_the_dtype_vllm_sends_through_it():
    # an nvfp4 model: vLLM's DeepEP dispatches bf16 and quantizes after it (rules.wire), so the
    # DeepEP job moves bf16 rows while the default gathers the nvfp4 ones
    from autoselect.hardware import cpu_fingerprint
    from bench.sweep import _job, wires

    spec = _spec(["deepep_high_throughput", "deepep_low_latency", "allgather_reducescatter"], activation_dtype="nvfp4",
                 hidden=7168, top_k=8, experts=256, gpu_arch="sm100", vllm_version="0.33.0")
    sent = wires(spec, cpu_fingerprint())
    assert {b: w.dtype for b, w in sent.items()} == {
        "deepep_high_throughput": "bf16", "deepep_low_latency": "bf16", "allgather_reducescatter": "nvfp4"}
    assert _job(spec, [4], sent["deepep_low_latency"].dtype).wire_dtype == "bf16"
    assert _job(spec, [4]).wire_dtype == "nvfp4"
    opted = _spec(["deepep_low_latency"], activation_dtype="nvfp4", hidden=7168, top_k=8, experts=256, gpu_arch="sm100",
                  env={"VLLM_DEEPEPLL_NVFP4_DISPATCH": "1"})
    assert wires(opted, cpu_fingerprint())["deepep_low_latency"].dtype == "nvfp4"


def test_block_fp8_payloads_on_hopper_follow_the_expert_kernel_vllm_runs():
    # vLLM runs FlashInfer CUTLASS experts for block FP8 on Hopper with EP (rules.experts): the default and
    # DeepEP high-throughput move bf16, low-latency keeps fp8; on Blackwell every backend moves fp8
    from autoselect.hardware import cpu_fingerprint
    from bench.sweep import wires

    backends = ["allgather_reducescatter", "deepep_high_throughput", "deepep_low_latency"]
    hopper = _spec(backends, activation_dtype="fp8_block128", hidden=7168, top_k=8, experts=256, gpu_arch="sm90",
                   vllm_version="0.34.0")
    sent = wires(hopper, cpu_fingerprint())
    assert {b: w.dtype for b, w in sent.items()} == {
        "allgather_reducescatter": "bf16", "deepep_high_throughput": "bf16", "deepep_low_latency": "fp8_block128"}
    assert sent["allgather_reducescatter"].expert.kernel == "FlashInferExperts"
    blackwell = _spec(backends, activation_dtype="fp8_block128", hidden=7168, top_k=8, experts=256, gpu_arch="sm100",
                      vllm_version="0.34.0")
    assert {w.dtype for w in wires(blackwell, cpu_fingerprint()).values()} == {"fp8_block128"}


def test_a_sweep_says_which_backend_moves_another_dtype_and_files_the_row_under_the_models_recording_the_wire():
    from bench.events import WireConverted

    events = []
    (row,) = run_sweep(_spec(["deepep_high_throughput"], activation_dtype="nvfp4", gpu_arch="sm100"), progress=events.append)
    (converted,) = [e for e in events if isinstance(e, WireConverted)]
    assert (converted.backend, converted.activation, converted.wire) == ("deepep_high_throughput", "nvfp4", "bf16")
    assert "quantizes after the dispatch" in converted.why
    assert row.activation_dtype == "nvfp4" and row.status == "unavailable"  # no CUDA here: DeepEP cannot run
    assert row.wire_dtype == "bf16"  # what its payload would have carried, kept with the row


def test_a_per_token_kernel_limit_drops_only_the_points_beyond_it():
    # deepep_low_latency takes at most 511 tokens per rank (NVSHMEM_QP_DEPTH 1024): the
    # points above are skipped, the rest measured; an error row there would disqualify the
    # backend for the whole shape in recommend.
    from autoselect.hardware import cpu_fingerprint
    from bench.sweep import plan_points

    spec = _spec(["deepep_low_latency", "allgather_reducescatter"], tokens=(1, 256, 512, 1024, 256),
                 hidden=7168, top_k=8, experts=256, gpu_arch="sm90")
    plan, skipped = plan_points(spec, cpu_fingerprint())
    assert plan == [("deepep_low_latency", [1, 256, 256], {512, 1024}),
                    ("allgather_reducescatter", [1, 256, 512, 1024, 256], set())]
    (label,) = skipped
    assert label == "deepep_low_latency @ 512,1024"
    assert "511 tokens per rank" in skipped[label]


def test_a_raised_queue_depth_in_the_sweep_env_lifts_the_token_limit():
    from autoselect.hardware import cpu_fingerprint
    from bench.sweep import plan_points

    spec = _spec(["deepep_low_latency"], tokens=(1024,), hidden=7168, top_k=8, experts=256, gpu_arch="sm90",
                 env={"NVSHMEM_QP_DEPTH": "4096"})
    assert plan_points(spec, cpu_fingerprint()) == ([("deepep_low_latency", [1024], set())], {})


def test_an_exported_queue_depth_lifts_the_token_limit_as_it_does_for_the_workers(monkeypatch):
    # the workers run with our environment (then spec.env): the rules must judge that one too
    from autoselect.hardware import cpu_fingerprint
    from bench.sweep import plan_points

    monkeypatch.setenv("NVSHMEM_QP_DEPTH", "4096")
    spec = _spec(["deepep_low_latency"], tokens=(1024,), hidden=7168, top_k=8, experts=256, gpu_arch="sm90")
    assert plan_points(spec, cpu_fingerprint()) == ([("deepep_low_latency", [1024], set())], {})
    spec.env = {"NVSHMEM_QP_DEPTH": "1024"}  # the sweep's own env wins over ours
    assert plan_points(spec, cpu_fingerprint())[1] != {}


def test_validate_refuses_a_bad_queue_depth_in_the_sweep_env_before_tune_or_fleet_measure():
    from autoselect.rules.limits import InvalidQueueDepth
    from bench.sweep import validate

    spec = _spec(["deepep_low_latency"], hidden=7168, top_k=8, experts=256, env={"NVSHMEM_QP_DEPTH": "-3"})
    with pytest.raises(InvalidQueueDepth, match="NVSHMEM_QP_DEPTH='-3' is not a positive integer"):
        validate(spec)
    validate(_spec(["allgather_reducescatter"], env={"NVSHMEM_QP_DEPTH": "-3"}))  # no backend reads it


def test_bench_cli_refuses_a_bad_exported_queue_depth_before_the_store_opens(db_path, monkeypatch):
    monkeypatch.setenv("NVSHMEM_QP_DEPTH", "deep")
    res = CliRunner().invoke(main, ["bench", "--device", "cpu", "--gpu-arch", "sm90", "--hidden", "7168",
                                    "--top-k", "8", "--experts", "256", "--dtype", "bf16",
                                    "--backends", "deepep_low_latency", "--tokens", "1", "--db", str(db_path)])
    assert res.exit_code == 2
    assert res.stderr == ("Error: NVSHMEM_QP_DEPTH='deep' is not a positive integer; unset it (DeepEP uses "
                          "1024) or set a number such as 1024\n")
    assert not db_path.exists()


def test_include_illegal_keeps_the_points_beyond_a_limit_and_marks_them():
    from autoselect.hardware import cpu_fingerprint
    from bench.sweep import plan_points

    spec = _spec(["deepep_low_latency"], tokens=(256, 1024), hidden=7168, top_k=8, experts=256,
                 gpu_arch="sm90", include_illegal=True)
    assert plan_points(spec, cpu_fingerprint()) == ([("deepep_low_latency", [256, 1024], {1024})], {})


@pytest.mark.slow
def test_include_illegal_measures_and_marks_the_rows(db_path, models_dir):
    res = CliRunner().invoke(main, [
        "bench", "--model", str(models_dir / "qwen3-30b-a3b"), "--gpu-arch", "sm90", "--device", "cpu",
        "--backends", "flashinfer_nvlink_one_sided", "--tokens", "2", "--include-illegal",
        "--format", "json", "--db", str(db_path)])
    assert res.exit_code == 0, res.output
    (row,) = json.loads(res.stdout)["results"]
    assert (row["backend"], row["status"], row["illegal"]) == ("flashinfer_nvlink_one_sided", "unavailable", True)
    assert row["error"] == "needs CUDA GPUs (FlashInfer NVLink kernels); this run is on CPU"


@pytest.mark.slow
def test_under_torchrun_the_ranks_are_torchruns_and_rank_0_writes(tmp_path):
    db = tmp_path / "torchrun.db"
    env = dict(os.environ, AUTOSELECT_DB=str(db))
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "-m", "autoselect", "bench",
         "--device", "cpu", "--world-size", "2", "--hidden", "256", "--top-k", "4", "--experts", "16",
         "--dtype", "bf16", "--tokens", "4", "--backends", "reference_all_to_all", "--min-time", "0.05",
         "--timeout", "2"], env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("# autoselect bench:") == 1  # only rank 0 prints
    rows = sqlite3.connect(db).execute("select backend, tokens_per_rank, status from results").fetchall()
    assert rows == [("reference_all_to_all", 4, "ok")]


@pytest.mark.slow
def test_a_routing_file_reaches_the_workers_and_names_the_rows(tmp_path):
    path = tmp_path / "hot.json"
    path.write_text(json.dumps([[0, 1, 2, 3], [8, 9, 10, 11], [0, 5, 9, 15]]))
    (r,) = run_sweep(_spec(["reference_all_to_all"], routing=str(path)))
    assert (r.status, r.routing) == ("ok", "file:hot.json")


def test_a_bad_routing_file_fails_before_any_worker_starts(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps([[0, 1, 2]]))
    from bench.routing import BadRouting

    with pytest.raises(BadRouting, match=r"has shape \[1, 3\]; expected \[tokens, 4\]"):
        run_sweep(_spec(["reference_all_to_all"], routing=str(path)))


@pytest.mark.parametrize("args, message", [
    (["--model", "tests/fixtures/models/qwen3-30b-a3b", "--hidden", "256"],
     "Error: pass either --model or --hidden/--top-k/--experts/--dtype, not both\n"),
    (["--model", "tests/fixtures/models/qwen3-30b-a3b"],
     "Error: --model tests/fixtures/models/qwen3-30b-a3b on a host without a GPU: pass --gpu-arch sm90|sm100 "
     "to choose the activation dtype\n"),
    (["--hidden", "256", "--top-k", "4", "--experts", "16", "--dtype", "bf16", "--gpu-arch", "sm7"],
     "Error: unknown GPU architecture 'sm7'"),
])
def test_bench_cli_shape_mistakes_are_one_line_and_write_nothing(db_path, args, message, monkeypatch):
    monkeypatch.chdir(REPO)
    res = CliRunner().invoke(main, ["bench", "--device", "cpu", *args, "--db", str(db_path)])
    assert res.exit_code == 2
    assert res.stderr.startswith(message) and res.stderr.count("\n") == 1
    assert not db_path.exists()


def test_bench_json_and_stderr_say_when_the_target_vllm_is_newer_than_the_tables(db_path):
    res = _bench("--backends", "reference_all_to_all", "--tokens", "2", "--vllm-version", "0.41.0", "--format", "json",
                 db=db_path)
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["vllm_version"] == "0.41.0" and doc["vllm_version_warning"].startswith(
        "vLLM 0.41.0 is newer than every release autoselect has read (newest: 0.34.0)")
    assert res.stderr.count("Warning: vLLM 0.41.0 is newer") == 1


def test_an_adapters_code_path_is_recorded_with_the_results_versions():
    from bench.launch import PointDone
    from bench.sweep import _Recorder

    results = []
    recorder = _Recorder(_spec(["flashinfer_nvlink_one_sided"]), None, None, None, 0, lambda e: None, results,
                         {"flashinfer_nvlink_one_sided": "bf16"})
    path = {"flashinfer_api": "flashinfer.moe_ep (cft=False, lamport=False)",
            "vllm_calls": "vLLM 0.34.0+ (flashinfer.moe_ep, fence transport)"}
    recorder.point("flashinfer_nvlink_one_sided",
                   PointDone("flashinfer_nvlink_one_sided", 4, "ok", fields={"latency_us_p50": 3.5, "code_path": path}),
                   False)
    [r] = results
    assert r.latency_us_p50 == 3.5 and {k: r.versions[k] for k in path} == path
    assert recorder.versions == {}  # the shared dict is untouched: the next backend's rows do not inherit it
