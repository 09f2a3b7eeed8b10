"""The selector on NVIDIA's published reference: when it is read, what it says, and what it never does.

Local measurements outrank the reference; a reference class answers without any database; values
name their source and kind (published, derived, transferred); shape transfer is marked and refused
far out; the confidence is capped at ``reference``; the rules still gate every candidate (a bf16
or fp8 model never gets one-sided, whatever a reference row says).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from support.paths import REPO

from autoselect.cli import main
from autoselect.model import load_profile
from autoselect.reference import CLASSES, default, transfer_points
from autoselect.reference.host import ON_SERVING_HOST, reference_host
from autoselect.reference.systems import GpuArchNotOfReference, ReferenceWorldSizeUnavailable, UnknownReferenceClass
from autoselect.reference.transfer import SHAPE_TRANSFER_LIMIT
from autoselect.selector import MeasuredPoint, recommend, recommend_for, render_text
from autoselect.selector.confidence import CONFIDENCE_CAPS
from autoselect.selector.confidence import Facts, confidence
from autoselect.selector.evidence import BackendEvidence
from autoselect.selector.reference_evidence import ReferenceEvidence, choose_reference
from autoselect.selector.render import render_explain
from autoselect.selector.target import resolve
from autoselect.workload import Deployment
from autoselect.workload import Shape

ROOT = REPO
MODELS = ROOT / "tests" / "fixtures" / "models"
RESULTS = ROOT / "tests" / "fixtures" / "results"
H200 = "h200x8-5d1c7e0a"  # 8x "NVIDIA H200" in the fixtures: the GPUs of ref-h200_sxm-x8
ONE_SIDED, TWO_SIDED, AGRS = "flashinfer_nvlink_one_sided", "flashinfer_nvlink_two_sided", "allgather_reducescatter"
HT, LL = "deepep_high_throughput", "deepep_low_latency"
VERSION = "0.33.0"


@pytest.fixture(scope="module")
def fixture_db(tmp_path_factory) -> Path:
    """The shipped results, plus a host class whose GPUs are no reference system (H200 NVL)."""
    from db.importing import import_file
    from db.rows import result_key

    tmp = tmp_path_factory.mktemp("refsel")
    path = tmp / "fixtures.db"
    for name in ("h200.jsonl", "b200.jsonl"):
        import_file(path, RESULTS / name)
    nvl = tmp / "h200nvl.jsonl"
    records = [json.loads(line) for line in (RESULTS / "h200.jsonl").read_text().splitlines()[:3]]
    for d in records:  # the same rows, from another machine whose GPUs are H200 NVL (no reference system)
        d["host"].update(gpu_name="NVIDIA H200 NVL", host_class="h200nvlx8-00000001", machine_id="f" * 32,
                         hostname="nvl-h200-01")
        for g in d["host"]["gpus"]:
            g["name"] = "NVIDIA H200 NVL"
        d["run"].update(uid="e" * 32, host_class="h200nvlx8-00000001", hostname="nvl-h200-01")
        d["result_key"] = result_key(d["host"]["machine_id"], d["run"]["uid"], d["result"])
    nvl.write_text("".join(json.dumps(d) + "\n" for d in records))
    import_file(path, nvl)
    return path


def ask(model: str, host_class: str, db=None, **kw):
    return recommend_for(str(MODELS / model), db_path=db or "/nonexistent/autoselect.db", host_class=host_class,
                         vllm_version=VERSION, **kw)


def by_backend(rec):
    return {c.backend: c for c in rec.candidates}


# --------------------------------------------------------------------------------------
# When the reference is read
# --------------------------------------------------------------------------------------


def test_local_measurements_outrank_the_reference(fixture_db):
    rec = ask("deepseek-v3", H200, fixture_db)  # the H200 class measured this shape
    assert rec.reference is None
    assert rec.confidence != "reference"
    # the shipped rows are synthetic example data: local rows, never the published reference's
    assert all(b.evidence == "synthetic" and b.reference.startswith("synthetic example data")
               for c in rec.candidates for b in c.buckets if b.latency_us is not None)
    assert "reference" not in rec.to_dict()


def test_one_local_row_of_the_shape_keeps_the_reference_out(fixture_db):
    from db.queries import connect_readonly, newest_host, results_for

    conn = connect_readonly(fixture_db)
    host = newest_host(conn, H200)
    rows = results_for(conn, hidden=7168, top_k=8, experts=256, activation_dtype="fp8_block128", world_size=8,
                       host_class=H200, kind="micro")
    conn.close()
    one = [r for r in rows if r.backend == AGRS][:1]
    target = resolve(load_profile(str(MODELS / "deepseek-v3")), deployment=Deployment(dp=8, tp=1), host_class=H200,
                     host=host, vllm_version=VERSION)
    assert choose_reference(target, 0) is not None  # no local row: the matched system's reference
    assert choose_reference(target, len(one)) is None  # one local row: local only
    rec = recommend(target.profile, conn=None, rows=one, deployment=target.deployment, host_class=H200, host=host,
                    vllm_version=VERSION)
    assert rec.reference is None
    assert {c.backend for c in rec.candidates if c.measured} == {AGRS}


def test_a_host_of_a_reference_system_without_local_rows_reads_its_reference(fixture_db):
    rec = ask("qwen3-30b-a3b", "b200x8-9a4f2b61", fixture_db)  # no qwen3 row on the B200 class
    assert rec.reference.host_class == "ref-b200_sxm-x8"
    assert rec.reference.why.startswith("host class b200x8-9a4f2b61 (8× NVIDIA B200) has no local measurement")
    assert rec.reference.requirements == []  # a real host's packages are judged from its fingerprint
    assert "deepep_low_latency" in {r.backend for r in rec.rejected}  # deep_ep is not on the fixture's B200


def test_gpus_that_are_no_reference_system_answer_as_before(fixture_db):
    rec = ask("mixtral-8x7b", "h200nvlx8-00000001", fixture_db, workload="decode")
    assert rec.reference is None
    assert (rec.backend, rec.confidence) == (AGRS, "none")
    assert rec.confidence_reasons == ["no measurement of any legal backend for this host class, shape and world size"]
    assert rec.bench_command.startswith("autoselect bench --model")


def test_a_reference_class_needs_no_database_and_stands_for_a_host_of_its_system():
    rec = ask("deepseek-v3", "ref-h200_sxm-x8", workload="decode")
    assert rec.reference.host_class == rec.data_used.host_class == "ref-h200_sxm-x8"
    assert rec.data_used.gpu_name == "NVIDIA H200" and rec.data_used.results == 0
    assert rec.gpu_arch == "sm90" and rec.deployment.world_size == 8
    host = reference_host(CLASSES["ref-gb200-nvl72"])
    assert host.gpu_count == 72 and host.all_nvlinks_up and host.fabric.startswith("completed")
    assert host.versions == {"deep_ep": ON_SERVING_HOST, "flashinfer": ON_SERVING_HOST}
    assert any(r.startswith("deep_ep: judged present") for r in rec.reference.requirements)


def test_the_rack_class_needs_a_world_size_and_a_tray_class_refuses_more_than_a_tray():
    with pytest.raises(ReferenceWorldSizeUnavailable, match="--world-size"):
        ask("deepseek-r1-nvfp4", "ref-gb200-nvl72")
    rec = ask("deepseek-r1-nvfp4", "ref-gb200-nvl72", world_size=16)
    assert rec.deployment.world_size == 16
    assert by_backend(rec)[ONE_SIDED].evidence == "published"
    assert "16×GB200 (4 trays, MNNVL)" in by_backend(rec)[ONE_SIDED].buckets[0].reference
    with pytest.raises(ReferenceWorldSizeUnavailable, match="ref-gb200-nvl72"):
        ask("deepseek-r1-nvfp4", "ref-gb200-x4", world_size=8)


def test_reference_mistakes_are_one_error_line():
    runner = CliRunner()
    for argv, words in (
        (["--host-class", "ref-h300-x8"], "unknown reference host class"),
        (["--host-class", "ref-h200_sxm-x8", "--gpu-arch", "sm100"], "ref-h200_sxm-x8 is H200 hardware"),
        (["--host-class", "ref-gb200-nvl72"], "give the world size"),
    ):
        r = runner.invoke(main, ["recommend", "--model", str(MODELS / "deepseek-v3"), *argv],
                          env={"AUTOSELECT_DB": "/nonexistent/x.db"})
        assert r.exit_code == 2, r.output
        assert r.stderr.startswith("Error: ") and words in r.stderr and len(r.stderr.splitlines()) == 1
    with pytest.raises(UnknownReferenceClass):
        ask("deepseek-v3", "ref-nope-x8")
    with pytest.raises(GpuArchNotOfReference):
        ask("deepseek-v3", "ref-b200_sxm-x8", gpu_arch="sm90")


# --------------------------------------------------------------------------------------
# What the answer says
# --------------------------------------------------------------------------------------


def test_published_values_name_their_source_in_text_and_json():
    rec = ask("deepseek-r1-nvfp4", "ref-gb200-x4")  # nvfp4 on Blackwell: TensorRT-LLM's published shape
    one = by_backend(rec)[ONE_SIDED]
    line = "AIConfigurator 0.12.0, TensorRT-LLM 1.2.0rc6 NVLinkOneSided on 4×GB200, collection date not recorded"
    assert one.evidence == "published" and {b.reference for b in one.buckets} == {line}
    doc = json.loads(json.dumps(rec.to_dict()))
    assert {b["evidence"] for b in doc["candidates"][1]["buckets"]} == {"published"}
    assert {"backend": ONE_SIDED, "evidence": "published", "line": line} in doc["reference"]["backends"]
    assert line in render_text(rec)
    hopper = ask("deepseek-r1-nvfp4", "ref-h200_sxm-x8")  # bf16 on Hopper: DeepEP's published shape
    assert "AIConfigurator 0.12.0, vLLM 0.24.0 DeepEP on 8×H200, collected 2026-08-31" in {
        b.reference for b in by_backend(hopper)[LL].buckets}


def test_derived_allgather_reducescatter_is_marked_as_derived():
    rec = ask("deepseek-v3", "ref-h200_sxm-x8", workload="decode")
    agrs = by_backend(rec)[AGRS]
    assert agrs.evidence == "derived"
    for b in agrs.buckets:
        assert b.evidence == "derived" and b.source == "point"  # a derived point exactly at each bucket's token count
        assert b.reference.startswith("derived from AIConfigurator 0.12.0 NCCL 2.29.2")
        assert "not a measured all2all" in b.reference
        # vLLM runs FlashInfer CUTLASS experts for block FP8 on Hopper with EP: the default gathers bf16
        assert b.reference.endswith("bf16 rows: allgather_reducescatter sends fp8_block128 activations as bf16: "
                                    "vLLM's oracle runs FlashInferExperts, which takes the activation unquantized: "
                                    "vLLM skips the quantization before the dispatch")
    text = render_text(rec)
    assert "derived      allgather_reducescatter: derived from AIConfigurator" in text
    assert any(r.startswith("a decisive latency is derived from NVIDIA's published NCCL") for r in
               rec.confidence_reasons)


def test_explain_gives_every_number_its_kind_and_source():
    rec = ask("deepseek-v3", "ref-h200_sxm-x8", workload="decode")
    text = render_explain(rec)
    assert "sources of the numbers that are not measured here:" in text
    assert "  [1] derived from AIConfigurator" in text and "  [2] transferred from H3072 top8 E256 bf16" in text
    per_bucket = text.split("weighted over the workload:", 1)[0]
    rows = [line for line in per_bucket.splitlines() if line.startswith((f"  {AGRS} ", f"  {LL} ", f"  {HT} "))]
    assert rows and all(("derived [1]" in r) or ("transferred [2]" in r) for r in rows if "+-" in r and "[" in r)
    # every number says how it stands on vLLM's footing, and the footings and corrections are listed with sources
    assert all(r.endswith(("(framework-launch)", "(deepep-ll-graph)", "on the footing as published")) for r in rows
               if "[" in r)
    assert "footing: every number is put on one footing:" in text
    assert "  correction deepep-ll-graph (deepep_low_latency): x0.68..x1.00:" in text and "  [A7] " in text


def test_legal_backends_without_reference_evidence_are_unmeasured_with_the_bench_command():
    rec = ask("deepseek-v3", "ref-h200_sxm-x8", workload="decode")
    two = by_backend(rec)[TWO_SIDED]  # FlashInfer on H200: no published row
    assert two.status == "no data"
    assert two.warnings[0].startswith("no reference evidence: no published flashinfer_nvlink_two_sided rows on H200 at "
                                      "EP 8; those of GB200 are not carried to H200: GB200 is NVLink 5, H200 NVLink 4")
    # two-sided unmeasured, and deepep_low_latency not told apart from the default: one bench run settles both
    assert "--backends allgather_reducescatter,deepep_low_latency,flashinfer_nvlink_two_sided" in rec.bench_command
    assert any(w.startswith("run the bench command on a machine of the reference system: 8×H200") for w in
               rec.warnings)


def test_the_confidence_is_capped_at_reference_and_says_why():
    levels = [ask(m, c).confidence for m in ("deepseek-v3", "deepseek-r1-nvfp4") for c in
              ("ref-h200_sxm-x8", "ref-b200_sxm-x8", "ref-gb200-x4")]
    assert set(levels) == {"reference"}
    names = {cap.name: cap for cap in CONFIDENCE_CAPS}
    assert {names[k].cap for k in ("published", "derived", "transferred")} == {"reference"}
    base = dict(single=False, compared=True, any_measured=True, unmeasured=False, close_call=False,
                decisive_sources=frozenset({"point"}), stale=False)
    assert confidence(Facts(**base, decisive_kinds=frozenset({"measured"}))) == ("high", [])
    level, reasons = confidence(Facts(**base, decisive_kinds=frozenset({"published", "transferred"})))
    assert level == "reference" and reasons == [names["published"].text, names["transferred"].text]


# --------------------------------------------------------------------------------------
# Shape transfer
# --------------------------------------------------------------------------------------


def test_another_shape_is_transferred_by_bytes_per_token_and_marked():
    rec = ask("qwen3-30b-a3b", "ref-h200_sxm-x8", workload="decode")  # 2048 x top-8 x 128, bf16
    ll = by_backend(rec)[LL]
    assert ll.evidence == "transferred"
    assert all(b.evidence == "transferred" and b.reference.startswith("transferred from H3072 top8 E256 bf16")
               for b in ll.buckets)
    assert "by bytes per token (AIConfigurator 0.12.0, vLLM 0.24.0 DeepEP on 8×H200" in ll.buckets[0].reference
    assert any(r.startswith("a decisive latency is transferred") for r in rec.confidence_reasons)


def test_a_transfer_far_outside_the_published_bytes_is_refused():
    ref = default()
    # GB200's one-sided rows exist for 7168 x top-8 nvfp4 only (18432 bytes per token); Qwen3-30B's
    # nvfp4 moves 5312: more than SHAPE_TRANSFER_LIMIT x fewer.
    moved = ref.transferred("ref-gb200-x4", ONE_SIDED, hidden=2048, top_k=8, experts=128, dtype="nvfp4",
                            world_size=4)
    assert moved.points == [] and moved.refused.startswith("refused: H2048 top8 E128 nvfp4 moves 5312 bytes")
    rec = ask("qwen3-30b-a3b-nvfp4-ct", "ref-gb200-x4")
    one = by_backend(rec)[ONE_SIDED]
    assert one.status == "no data" and any("more than 2x outside the published shapes" in w for w in one.warnings)


def test_transfer_across_shapes_fits_latency_a_plus_bytes_over_bandwidth_at_each_token_count():
    ref = default()
    sources = ref.published("ref-h200_sxm-x8", LL, world_size=8)
    # A synthetic table: latency = 10 us + bytes / (1 byte per ns) at every shape -> exact transfer.
    bpt = {(7168, 8): 28736, (3072, 8): 12352, (4096, 6): 16432, (6144, 8): 24640}
    fake = [p._replace(latency_us=10 + p.tokens_per_rank * bpt[(p.hidden, p.top_k)] * 1e-3)
            for p in sources if (p.hidden, p.top_k) in bpt]
    moved = transfer_points(fake, hidden=2048, top_k=8, experts=128, dtype="bf16")
    assert moved.method == "fit across shapes at each token count"
    for p in moved.points:
        assert p.evidence == "transferred"
        assert p.latency_us == pytest.approx(10 + p.tokens_per_rank * 8256e-3, rel=1e-9)
        assert p.derivation["bytes_per_token"] == 8256
        assert p.derivation["flat"] is False  # the latency rises with the bytes: a bandwidth, not a mean
    assert moved.from_shapes[0] == "H3072 top8 E256 bf16"
    # shapes that cost less for more bytes: the slope is clamped at zero, every target gets their mean
    falling = [p._replace(latency_us=100 - p.tokens_per_rank * bpt[(p.hidden, p.top_k)] * 1e-6) for p in fake]
    flat = transfer_points(falling, hidden=2048, top_k=8, experts=128, dtype="bf16")
    assert all(p.derivation["flat"] and p.derivation["bandwidth_gbps"] is None for p in flat.points)
    wider = transfer_points(falling, hidden=2880, top_k=4, experts=128, dtype="bf16")
    assert [p.latency_us for p in flat.points] == [p.latency_us for p in wider.points]
    # The limit: bytes per token more than SHAPE_TRANSFER_LIMIT x below the smallest source's.
    tiny = transfer_points(fake, hidden=1024, top_k=2, experts=8, dtype="bf16")
    assert 4112 * SHAPE_TRANSFER_LIMIT < 12352 and tiny.points == [] and tiny.refused.startswith("refused")


def test_one_published_shape_transfers_the_same_bytes_at_an_equivalent_token_count():
    ref = default()
    sources = ref.published("ref-gb200-x4", ONE_SIDED, world_size=4)
    same = transfer_points(sources, hidden=7168, top_k=8, experts=384, dtype="nvfp4")  # Kimi-K2.5: same bytes
    assert same.method == "one shape: the same bytes at an equivalent token count"
    assert [p.latency_us for p in same.points] == [p.latency_us for p in sources]


# --------------------------------------------------------------------------------------
# The rules gate every candidate
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("ref_class", sorted(CLASSES))
def test_a_bf16_or_fp8_model_never_gets_one_sided_from_any_reference_row(ref_class):
    world_size = 4 if ref_class == "ref-gb200-nvl72" else None
    for model in ("qwen3-30b-a3b", "deepseek-v3", "kimi-k2", "deepseek-r1-nvfp4"):
        rec = ask(model, ref_class, world_size=world_size)
        if rec.activation_dtype == "nvfp4":
            continue  # nvfp4 on Blackwell: one-sided is legal there
        assert ONE_SIDED not in by_backend(rec)
        assert [r.kind for r in rec.rejected if r.backend == ONE_SIDED] == ["illegal"]
        assert rec.backend != ONE_SIDED


def test_a_one_sided_reference_row_offered_to_a_bf16_model_is_still_refused():
    profile = Shape(hidden=7168, top_k=8, experts=256, dtype="bf16").profile()

    class Offers:  # a reference source that (wrongly) has one-sided points for bf16, ten times faster
        kind = "published"
        considered = 1

        def for_backend(self, backend):
            latency = 1.0 if backend == ONE_SIDED else 100.0
            return BackendEvidence(backend, kind="published", source="a table",
                                   points=(MeasuredPoint(16, latency, 0.01, None, "published"),))

    for ref_class in ("ref-gb200-x4", "ref-b200_sxm-x8", "ref-h200_sxm-x8"):
        rec = recommend(profile, conn=None, deployment=Deployment(dp=4, tp=1), host_class=ref_class,
                        vllm_version=VERSION, evidence=lambda target: [Offers()])
        assert rec.backend != ONE_SIDED and ONE_SIDED in {r.backend for r in rec.rejected}


def test_reference_evidence_answers_every_backend_once():
    target = resolve(load_profile(str(MODELS / "deepseek-v3")), deployment=Deployment(dp=8, tp=1),
                     host_class="ref-h200_sxm-x8", vllm_version=VERSION)
    source = ReferenceEvidence(target, choose_reference(target, 0))
    first = source.for_backend(LL)
    assert source.for_backend(LL) is first and first.kind == "transferred" and first.points
    assert source.considered == len(first.points)


def test_the_readme_quick_start_shows_the_real_reference_answer(monkeypatch):
    readme = (ROOT / "README.md").read_text()
    command = "autoselect recommend --model deepseek-ai/DeepSeek-V3 --host-class ref-h200_sxm-x8 --workload decode"
    block = readme.split(f"```bash\n{command}\n```\n\n```text\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(ROOT)
    r = CliRunner().invoke(main, command.split()[1:], env={"AUTOSELECT_DB": "/nonexistent/x.db",
                                                          "AUTOSELECT_VLLM_PYTHON": None})
    assert r.exit_code == 0, r.output
    shown = [line for line in block.splitlines() if line]
    assert shown and [line for line in r.stdout.splitlines() if line in shown] == shown


# --------------------------------------------------------------------------------------
# What each backend sends, the derived range, the bound, the bands (decision-quality audit)
# --------------------------------------------------------------------------------------


def test_deepep_for_an_nvfp4_model_reads_the_exact_published_bf16_rows():
    # vLLM's DeepEP dispatches an nvfp4 model's activations as bf16 (rules.wire): the bf16 rows are exact
    rec = ask("deepseek-r1-nvfp4", "ref-b200_sxm-x8", tokens="4096:1")
    ht = by_backend(rec)[HT]
    assert ht.evidence == "published" and ht.wire_dtype == "bf16"
    published = default().published("ref-b200_sxm-x8", HT, hidden=7168, top_k=8, experts=256, dtype="bf16",
                                    world_size=8, tokens=[4096])[0]
    assert ht.weighted_us == pytest.approx(published.latency_us)  # 3613 us, not the 3010 us of nvfp4 bytes
    assert ht.buckets[0].reference.endswith("; bf16 rows: deepep_high_throughput sends nvfp4 activations as bf16: "
                                            "vLLM dispatches bf16 and quantizes after the dispatch (DeepEP carries "
                                            "only block-fp8 scales)")
    assert by_backend(rec)[AGRS].wire_dtype is None  # the default gathers the nvfp4 rows
    assert "deepep_high_throughput: sends nvfp4 activations as bf16 (vLLM's prepare step)" in render_text(rec)
    assert json.loads(json.dumps(rec.to_dict()))["candidates"][3]["wire_dtype"] == "bf16"


def test_the_derived_default_is_a_range_shown_in_text_and_json():
    rec = ask("deepseek-v3", "ref-h200_sxm-x8", tokens="1:1")
    agrs = by_backend(rec)[AGRS]
    low, high = agrs.range_us
    assert low < agrs.weighted_us < high and agrs.weighted_us == pytest.approx((low + high) / 2)
    # DeepSeek-V3 FP8 on Hopper gathers bf16 (vLLM runs FlashInfer CUTLASS experts, rules/experts.py): at 1 token
    # three gathers in one launch (no scales), two extra tensors at 0..0.61 of the 12.19 us floor, then two
    # launches of 16.2..21.8 us on vLLM's footing
    assert high - low == pytest.approx(2 * 0.61 * 12.19 + 2 * (21.8 - 16.2))
    assert agrs.halfwidth_us == pytest.approx((high - low) / 2 + 0.01 * agrs.weighted_us)
    doc = json.loads(json.dumps(rec.to_dict()))["candidates"][0]
    assert doc["range_us"] == [round(low, 3), round(high, 3)] and doc["buckets"][0]["range_us"]
    assert f"allgather_reducescatter: derived, between {low:.1f} and {high:.1f} us on vLLM's footing" in render_text(rec)


def test_a_transferred_value_carries_the_measured_transfer_error_as_its_band():
    from autoselect.reference.transfer import TRANSFER_ERROR

    rec = ask("qwen3-30b-a3b", "ref-h200_sxm-x8", tokens="128:1")
    ll = by_backend(rec)[LL]
    assert ll.evidence == "transferred"
    # the transfer's error plus half the range of its footing correction (graph-captured: x0.68..x1.00)
    assert ll.halfwidth_us == pytest.approx((TRANSFER_ERROR[LL] + 0.16 / 0.84) * ll.weighted_us)
    # published (an NVFP4 checkpoint dispatches bf16 on Hopper: DeepEP's published shape): the 1 % floor
    ht = by_backend(ask("deepseek-r1-nvfp4", "ref-h200_sxm-x8", tokens="4096:1"))[HT]
    assert ht.evidence == "published" and ht.halfwidth_us == pytest.approx(0.01 * ht.weighted_us)
    # block-fp8 crosses DeepEP low-latency as fp8: no published fp8 row, so DeepSeek-V3's number is transferred;
    # through high-throughput it crosses as bf16 on Hopper (FlashInfer CUTLASS experts): the published row
    assert by_backend(ask("deepseek-v3", "ref-h200_sxm-x8", tokens="128:1"))[LL].evidence == "transferred"
    assert by_backend(ask("deepseek-v3", "ref-h200_sxm-x8", tokens="4096:1"))[HT].evidence == "published"


def test_the_rack_beyond_a_tray_compares_published_backends_with_the_defaults_lower_bound():
    # EP 16, 4096 tokens: one-sided's published 917 us clears the default's bound (2060 us from the 4-GPU
    # NCCL rows, 2093 us with the framework's least per-launch cost on vLLM's footing)
    rec = ask("deepseek-r1-nvfp4", "ref-gb200-nvl72", world_size=16, tokens="4096:1")
    agrs = by_backend(rec)[AGRS]
    assert rec.backend == ONE_SIDED and rec.confidence == "reference"
    assert rec.decision == "faster than vLLM's default: 0.44x its lower bound, the bands apart"
    assert agrs.bound and agrs.evidence == "derived" and agrs.range_us is None
    assert any("only a lower bound" in r for r in rec.confidence_reasons)
    assert "allgather_reducescatter: >= 2093 us is only a lower bound" in render_text(rec)
    assert json.loads(json.dumps(rec.to_dict()))["candidates"][0]["bound"] is True


def test_a_pick_the_bound_cannot_decide_is_answered_at_confidence_none():
    # DeepSeek-V3 (block fp8: two-sided only, transferred to its bytes) at EP 8 and 1024 tokens: the bound is
    # below the candidate, so nothing is decided against the default; the fastest backend with a number is the
    # pick (the policy chosen by regret), at `none`
    rec = ask("deepseek-v3", "ref-gb200-nvl72", world_size=8, tokens="1024:1")
    statuses = {c.backend: c.status for c in rec.candidates}
    assert rec.backend == TWO_SIDED and statuses[AGRS] == "default"
    assert rec.confidence == "none"
    assert rec.decision.startswith("the fastest backend with a number; vLLM's default has only a lower bound here (")
    assert rec.confidence_reasons[0].startswith("the pick could not be compared with vLLM's default")


def test_no_reference_answer_without_a_number_for_its_pick_claims_confidence_reference():
    for world_size in (8, 16, 32, 64):
        for workload in ("decode", "prefill", "mixed"):
            rec = ask("deepseek-r1-nvfp4", "ref-gb200-nvl72", world_size=world_size, workload=workload)
            pick = by_backend(rec)[rec.backend]
            if pick.weighted_us is None or pick.bound or rec.decision.startswith("vLLM's default has only"):
                assert rec.confidence == "none", (world_size, workload, rec.decision)


def test_the_tie_rule_keeps_the_default_where_the_bands_overlap_and_asks_more_of_an_eager_step():
    from autoselect.reference.footing import PointFooting
    from autoselect.selector.answer import BucketValue, Candidate
    from autoselect.selector.decide import DEFAULT_POLICY, KEEPS_TIES, TIE_RULES, versus_default

    def cand(backend, latency, halfwidth, evidence, capture="graph"):
        footing = PointFooting("nccl-tests", capture, "", (latency, latency), ())
        bucket = BucketValue(64, latency, halfwidth, "measured", evidence=evidence, footing=footing)
        return Candidate(backend, "measured", latency, halfwidth, [bucket], None, evidence=evidence)

    assert DEFAULT_POLICY.tie_rule == "bands-1-0.85" and DEFAULT_POLICY.tie_rule in KEEPS_TIES
    default = cand(AGRS, 100.0, 10.0, "derived")  # graph-captured, 90..110
    assert versus_default(cand(LL, 85.0, 4.0, "published"), default) == "faster"  # 89 < 90: no overlap
    assert versus_default(cand(LL, 87.0, 4.0, "published"), default) == "tie"  # 91 > 90: overlap, the default stays
    assert versus_default(cand(LL, 120.0, 4.0, "published"), default) == "slower"
    eager = cand(AGRS, 100.0, 10.0, "derived", "eager")  # an eager step: 0.85 x 100 - 10 = 75 to clear
    assert versus_default(cand(HT, 80.0, 1.0, "published", "eager"), eager) == "tie"
    assert versus_default(cand(HT, 73.0, 1.0, "published", "eager"), eager) == "faster"
    # the measured-data rule when the default is measured: bands must not overlap
    measured = cand(AGRS, 100.0, 2.0, "measured")
    assert versus_default(cand(HT, 99.0, 1.0, "measured"), measured) == "tie"
    # the ranked variants: a margin rule leaves the default inside overlapping bands, so it keeps no tie
    assert TIE_RULES["margin-0.9-0.75"](cand(LL, 87.0, 20.0, "published"), default, [1.0])
    assert "margin-0.9-0.75" not in KEEPS_TIES and "bands-0.5" not in KEEPS_TIES and "bands" in KEEPS_TIES


def test_a_tie_keeps_what_needs_nothing_extra_and_says_how_to_settle_it():
    rec = ask("deepseek-r1-nvfp4", "ref-b300_sxm-x8")  # mixed: one-sided transferred within the default's band
    assert rec.backend == AGRS and rec.tie is not None and rec.tie.kept == AGRS
    assert set(rec.tie.backends) >= {AGRS, ONE_SIDED} and rec.tie.needs[AGRS].startswith("nothing")
    assert rec.tie.settle_command.startswith("autoselect bench --model ") and ONE_SIDED in rec.tie.settle_command
    effect = rec.tie.expected_effect
    assert effect.versus == AGRS and effect.kernel_change_range[0] < 0 < effect.kernel_change_range[1]
    assert effect.e2e_change_range[0] >= effect.kernel_change_range[0] / 3 - 1e-9
    doc = json.loads(json.dumps(rec.to_dict()))
    assert doc["tie"]["kept"] == AGRS and "expected_effect" not in doc  # the default kept: nothing to gain
    # DeepEP needs a source build: between DeepEP and a FlashInfer backend, FlashInfer is kept
    from autoselect.selector.decide import needs
    assert needs(LL)[0] > needs(ONE_SIDED)[0] > needs(AGRS)[0]


def test_hgx_blackwell_prices_one_and_two_sided_from_gb200_for_an_nvfp4_model():
    for ref_class, error in (("ref-b200_sxm-x8", "9.0%"), ("ref-b300_sxm-x8", "16.3%")):
        rec = ask("deepseek-r1-nvfp4", ref_class, tokens="128:1")
        for backend in (ONE_SIDED, TWO_SIDED):
            c = by_backend(rec)[backend]
            assert c.evidence == "transferred" and c.weighted_us is not None and c.halfwidth_us > 0
            assert c.buckets[0].reference.startswith("transferred from GB200 (AIConfigurator 0.12.0, TensorRT-LLM")
            assert f"band: p95 |{ref_class[4:8].upper()} / GB200 - 1| = {error}" in c.buckets[0].reference
        assert rec.backend == ONE_SIDED and rec.decision.startswith("faster than vLLM's default: ")
        assert rec.expected_effect is not None and rec.expected_effect.kernel_change < 0
        text = render_text(rec)
        assert "transferred  flashinfer_nvlink_one_sided: transferred from GB200" in text


def test_a_transfer_that_does_not_move_with_the_shape_says_so_next_to_the_number():
    # DeepEP low-latency on 8xB200 at decode: the published shapes at 8..32 tokens cost no more for more
    # bytes (the across-shapes fit's slope is clamped at zero), so Qwen3-30B-A3B (4160 dispatch bytes per
    # token) and gpt-oss-120b (5792) get the same mean (122.8 / 112.5 / 115.3 us as published, on vLLM's
    # footing graph-captured); each value is flagged flat in the JSON and the text
    qwen, oss = (by_backend(ask(m, "ref-b200_sxm-x8", workload="decode"))[LL] for m in ("qwen3-30b-a3b", "gpt-oss-120b"))
    assert [b.latency_us for b in qwen.buckets] == [b.latency_us for b in oss.buckets]
    assert [round(b.latency_us, 1) for b in qwen.buckets] == [103.2, 94.5, 96.9]
    assert all(b.flat and b.evidence == "transferred" for b in qwen.buckets)
    rec = ask("qwen3-30b-a3b", "ref-b200_sxm-x8", workload="decode")
    assert all(b["flat"] for b in by_backend(rec)[LL].to_dict()["buckets"])
    text = render_text(rec, explain=True)
    row = next(line for line in text.splitlines() if line.startswith("deepep_low_latency "))
    assert row.split()[-3:] == ["=103.2", "=94.5", "=96.9"]
    assert "deepep_low_latency: = a flat transfer at 8, 16, 32 tok: " in text
    assert text.count(", flat (every shape gets this value here); graph;") == 3
    # a value that moves with the bytes is not flagged: high-throughput's fit has a bandwidth at prefill (at
    # decode it is ineligible: vLLM runs it without CUDA graphs, selector/step.py)
    assert not any(b.flat for b in by_backend(ask("qwen3-30b-a3b", "ref-b200_sxm-x8", workload="prefill"))[HT].buckets)


def test_the_transfer_reads_bytes_per_token_not_the_expert_count():
    # Kimi-K2 (384 experts) and DeepSeek-V3 (256) move the same fp8 bytes per token: one transferred table
    kimi, ds = (by_backend(ask(m, "ref-h200_sxm-x8", workload="decode"))[LL] for m in ("kimi-k2", "deepseek-v3"))
    assert [b.latency_us for b in kimi.buckets] == [b.latency_us for b in ds.buckets]
