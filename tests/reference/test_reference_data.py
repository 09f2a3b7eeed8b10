"""The built-in reference data: known values from NVIDIA's tables, units, provenance, legality.

Everything here reads the packaged SQLite file with the stdlib only (no pyarrow, no package).
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys

import pytest

from autoselect import payload
from autoselect.reference import AGRS, CLASSES, DERIVED, ReferenceData, default
from autoselect.reference import datafile
from autoselect.reference.datafile import attach, canonical_dump, connect
from autoselect.reference.query import PUBLISHED
from autoselect.reference.systems import ReferenceWorldSizeUnavailable, UnknownReferenceClass
from autoselect.reference.tables import FIDELITY, ROUND_TRIP

DSV3 = dict(hidden=7168, top_k=8, experts=256)


@pytest.fixture(scope="module")
def ref() -> ReferenceData:
    return default()


def one(points):
    assert len(points) == 1, points
    return points[0]


# --- known values, read from the published parquet tables -----------------------------------


def test_h200_deepep_ll_128_tokens_is_dispatch_plus_combine(ref):
    p = one(ref.query("ref-h200_sxm-x8", "deepep_low_latency", dtype="bf16", tokens=[128], **DSV3))
    assert round(p.dispatch_us, 1) == 112.1 and round(p.combine_us, 1) == 100.6
    assert round(p.latency_us, 1) == 212.7 and p.latency_us == p.dispatch_us + p.combine_us
    assert p.prepare_us is None and p.evidence == PUBLISHED and p.world_size == 8
    assert p.wire_dtype == "bf16" and p.combine_dtype == "bf16" and p.routing == "random"


def test_h200_deepep_ht_4096_tokens(ref):
    p = one(ref.query("ref-h200_sxm-x8", "deepep_high_throughput", dtype="bf16", tokens=[4096], **DSV3))
    assert (round(p.dispatch_us, 1), round(p.combine_us, 1)) == (981.5, 1452.0)
    assert round(p.latency_us, 1) == 2433.5
    assert p.raw == {"unit": "us", "comm_backend": "deepep_ht", "comm_dtype": "default", "sms": 20,
                     "latency": {"dispatch": p.dispatch_us, "combine": p.combine_us}}


def test_gb200_ep4_nvfp4_256_tokens_one_and_two_sided(ref):
    one_sided = one(ref.query("ref-gb200-x4", "flashinfer_nvlink_one_sided", dtype="nvfp4", tokens=[256], **DSV3))
    assert (round(one_sided.dispatch_us, 1), round(one_sided.combine_us, 1)) == (19.4, 29.3)
    assert one_sided.prepare_us is None
    assert one_sided.latency_us == one_sided.dispatch_us + one_sided.combine_us
    two = one(ref.query("ref-gb200-x4", "flashinfer_nvlink_two_sided", dtype="nvfp4", tokens=[256], **DSV3))
    assert (round(two.prepare_us, 1), round(two.dispatch_us, 1), round(two.combine_us, 1)) == (13.5, 20.7, 39.8)
    assert two.latency_us == two.prepare_us + two.dispatch_us + two.combine_us
    # TensorRT-LLM's NVFP4 combine is kept aside, never in vLLM's round trip (bf16 combine)
    assert round(two.extra["combine_low_precision_us"], 1) == 45.3 and two.combine_dtype == "bf16"
    assert one_sided.routing == two.routing == "balanced"


def test_gb200_ep8_one_and_two_sided_cross_near_64_tokens(ref):
    def rt(backend, t):
        return one(ref.query("ref-gb200-nvl72", backend, dtype="nvfp4", world_size=8, tokens=[t], **DSV3)).latency_us

    assert round(rt("flashinfer_nvlink_one_sided", 1), 1) == 43.6
    assert round(rt("flashinfer_nvlink_two_sided", 1), 1) == 39.3
    assert round(rt("flashinfer_nvlink_one_sided", 65536) / 1000, 1) == 12.6
    assert round(rt("flashinfer_nvlink_two_sided", 65536) / 1000, 1) == 16.9


def test_units_ms_tables_become_us_and_keep_the_published_value(ref):
    p = one(ref.query("ref-gb200-x4", "flashinfer_nvlink_two_sided", dtype="bf16", tokens=[1], **DSV3))
    assert p.raw["unit"] == "ms"
    assert p.prepare_us == p.raw["latency"]["alltoall_prepare"] * 1000.0
    assert round(p.raw["latency"]["alltoall_prepare"], 8) == 0.0113824  # the first row of the table, in ms
    conn = connect()
    for us, ms in conn.execute("SELECT latency_us, raw_latency_ms FROM collectives"):
        assert us == ms * 1000.0
    conn.close()
    deepep = one(ref.query("ref-b200_sxm-x8", "deepep_low_latency", dtype="bf16", tokens=[1], **DSV3))
    assert deepep.raw["unit"] == "us" and deepep.dispatch_us == deepep.raw["latency"]["dispatch"]


def test_every_system_and_table_is_there(ref):
    conn = connect()
    kinds = conn.execute("SELECT kind, system, framework, framework_version FROM sources ORDER BY id").fetchall()
    conn.close()
    assert [k[:2] for k in kinds if k[0] == "vllm_moe_a2a"] == [
        ("vllm_moe_a2a", s) for s in ("h100_sxm", "h200_sxm", "b200_sxm", "b300_sxm", "gb200", "gb300")]
    assert ("trtllm_alltoall", "gb200", "TensorRT-LLM", "1.2.0rc6") in kinds
    assert sum(k[0] == "nccl" and k[3] == "2.29.2" for k in kinds) == 6
    # 6 shapes x (13 HT + 14 LL token counts) per system; one-sided EP 2-32, two-sided 3 dtypes x EP 2-64
    assert len(ref.published("ref-h200_sxm-x8", "deepep_high_throughput")) == 6 * 13
    assert len(ref.published("ref-h200_sxm-x8", "deepep_low_latency")) == 6 * 14
    assert len(ref.published("ref-gb200-nvl72", "flashinfer_nvlink_one_sided")) == 4 * 30 + 28
    assert len(ref.published("ref-gb200-nvl72", "flashinfer_nvlink_two_sided")) == 3 * 6 * 30


def test_deepep_v2_rows_are_skipped_and_said_so(ref):
    assert not ref.published("ref-h100_sxm-x8", "deepep_v2")
    skipped = [s for s in ref.skipped() if "deepep_v2" in s["what"]]
    assert len(skipped) == 1 and skipped[0]["rows"] == 324 and "h100_sxm" in skipped[0]["table_path"]
    assert "cannot judge" in skipped[0]["reason"]


# --- provenance on every row ----------------------------------------------------------------


def test_every_published_point_carries_its_provenance(ref):
    for name in CLASSES:
        for p in ref.published(name):
            assert p.evidence == PUBLISHED and len(p.sources) == 1
            s = p.sources[0]
            assert s.package == "aiconfigurator-core" and s.package_version == "0.12.0"
            assert s.table_path.startswith("aiconfigurator_core/systems/data/") and len(s.table_sha256) == 64
            assert s.framework and s.framework_version and s.device and s.how_measured and s.collector
            assert {"latency", "num_tokens"} <= set(s.columns) and all(s.columns.values())
            assert p.source_line.startswith("AIConfigurator 0.12.0, ") and p.fidelity == FIDELITY[p.backend]
            assert p.latency_us == sum(getattr(p, f"{ph}_us") for ph in ROUND_TRIP[p.backend])
            assert p.raw and p.raw["unit"] in ("us", "ms")


def test_source_lines_name_framework_gpus_and_date(ref):
    dl = one(ref.query("ref-h200_sxm-x8", "deepep_low_latency", dtype="bf16", tokens=[128], **DSV3))
    assert dl.source_line == "AIConfigurator 0.12.0, vLLM 0.24.0 DeepEP on 8×H200, collected 2026-08-31"
    s = dl.sources[0]
    assert s.image_digest.startswith("sha256:") and s.source_commit.startswith("ee0da84")
    assert s.collector_ref == "65aab00d1a52a2924755ef2c389442c645571409"
    gb = one(ref.query("ref-gb200-nvl72", "flashinfer_nvlink_one_sided", dtype="nvfp4", world_size=16, tokens=[256],
                       **DSV3))
    assert gb.source_line == ("AIConfigurator 0.12.0, TensorRT-LLM 1.2.0rc6 NVLinkOneSided on 16×GB200 (4 trays, MNNVL), "
                              "collection date not recorded")
    b300 = one(ref.query("ref-b300_sxm-x8", "deepep_low_latency", dtype="bf16", tokens=[128], **DSV3))
    assert b300.source_line.endswith("on 8×B300, collected 2026-08-30")


def test_derived_agrs_rows_are_marked_and_never_called_measured(ref):
    rows = ref.query("ref-h200_sxm-x8", AGRS, dtype="bf16", **DSV3)
    assert [p.tokens_per_rank for p in rows] == list(ref.token_grid("ref-h200_sxm-x8"))
    for p in rows:
        assert p.evidence == DERIVED and p.raw is None and p.derivation["formula"]
        assert p.source_line.startswith("derived from AIConfigurator 0.12.0 NCCL 2.29.2 all_gather + reduce_scatter")
        assert p.source_line.endswith("not a measured all2all") and "derived" in p.fidelity
        assert p.sources[0].kind == "nccl" and p.latency_us == p.dispatch_us + p.combine_us
    assert rows[-1].derivation["all_gather_read"]["how"].startswith("extrapolated")


def test_agrs_works_for_any_shape_and_dtype(ref):
    # Qwen3-30B-A3B: not a reference shape, but AGRS moves bytes: derivable directly
    bf16 = one(ref.query("ref-h200_sxm-x8", AGRS, hidden=2048, top_k=8, experts=128, dtype="bf16", tokens=[256]))
    fp4 = one(ref.query("ref-b200_sxm-x8", AGRS, hidden=2048, top_k=8, experts=128, dtype="nvfp4", tokens=[256]))
    assert bf16.derivation["all_gather_bytes"] == 8 * 256 * (2 * 2048 + 64)
    assert fp4.derivation["all_gather_bytes"] == 8 * 256 * (1024 + 128 + 64)
    assert fp4.derivation["reduce_scatter_bytes"] == 8 * 256 * 2 * 2048


def test_agrs_beyond_the_nccl_rows_is_a_lower_bound_labelled_as_one(ref):
    assert ref.agrs_world_sizes("ref-h200_sxm-x8") == [2, 4, 8]
    assert ref.agrs_world_sizes("ref-gb200-nvl72") == [2, 4]
    assert not one(ref.query("ref-gb200-nvl72", AGRS, dtype="nvfp4", world_size=4, tokens=[64], **DSV3)).bound
    p = one(ref.query("ref-gb200-nvl72", AGRS, dtype="nvfp4", world_size=16, tokens=[4096], **DSV3))
    assert p.bound and p.range_us is None and p.evidence == DERIVED
    assert p.source_line.startswith("lower bound for 16×GB200 (4 trays, MNNVL) from AIConfigurator 0.12.0 NCCL")
    assert "no NCCL rows at 16 GPUs" in p.source_line
    assert p.derivation["bound"] == "lower" and p.derivation["nccl_rows_gpus"] == 4
    # the audit's bandwidth-only bound was >= 2051 us; read at equal bytes per rank it is 2060 us, and the
    # published one-sided (917 us) is faster than it
    assert p.latency_us == pytest.approx(2060.4, abs=0.1)


# --- legality: a bf16 model never gets a one-sided row --------------------------------------


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_one_sided_rows_are_nvfp4_only(ref, name):
    assert all(p.wire_dtype == "nvfp4" for p in ref.published(name, "flashinfer_nvlink_one_sided"))
    for dtype in ("bf16", "fp8", "fp8_block128", "mxfp8"):
        for ws in range(2, CLASSES[name].max_world_size + 1):
            assert ref.published(name, "flashinfer_nvlink_one_sided", dtype=dtype, world_size=ws) == []


def test_published_dtypes_are_autoselect_activation_dtypes(ref):
    conn = connect()
    dtypes = {r[0] for r in conn.execute("SELECT DISTINCT wire_dtype FROM points")}
    combine = {r[0] for r in conn.execute("SELECT DISTINCT combine_dtype FROM points")}
    conn.close()
    assert dtypes == {"bf16", "fp8", "nvfp4"} and dtypes <= set(payload.ACTIVATION_DTYPES)
    assert combine == {payload.COMBINE_DTYPE}


# --- classes and world sizes ----------------------------------------------------------------


def test_world_size_domain_of_each_class(ref):
    assert {p.world_size for p in ref.published("ref-gb200-x4")} == {2, 4}
    assert {p.world_size for p in ref.published("ref-gb200-nvl72")} == {2, 4, 8, 16, 32, 64}
    assert {p.world_size for p in ref.published("ref-h200_sxm-x8")} == {8}
    assert ref.published("ref-gb300-x4", "flashinfer_nvlink_one_sided") == []  # no GB300 TensorRT-LLM table
    with pytest.raises(ReferenceWorldSizeUnavailable, match="--world-size"):
        ref.query("ref-gb200-nvl72", "flashinfer_nvlink_two_sided", dtype="bf16", **DSV3)
    with pytest.raises(ReferenceWorldSizeUnavailable, match="ref-gb200-nvl72"):
        ref.query("ref-gb200-x4", "flashinfer_nvlink_two_sided", dtype="bf16", world_size=8, **DSV3)
    with pytest.raises(UnknownReferenceClass, match="ref-h200_sxm-x8"):
        ref.query("ref-h300-x8", "deepep_low_latency", dtype="bf16", **DSV3)


def test_available_lists_published_shapes_and_agrs(ref):
    av = ref.available("ref-h200_sxm-x8")
    shapes = {(a["hidden"], a["top_k"], a["experts"]) for a in av if a["evidence"] == PUBLISHED}
    assert (7168, 8, 256) in shapes and (2048, 8, 128) not in shapes and len(shapes) == 6
    assert [a["world_size"] for a in av if a["backend"] == AGRS] == [2, 4, 8]


# --- the file: read-only, canonical, attachable ---------------------------------------------


def test_the_file_is_read_only():
    conn = connect()
    with pytest.raises(sqlite3.OperationalError):
        conn.execute("INSERT INTO meta (key, value) VALUES ('x', 'y')")
    conn.close()


def test_meta_and_licence_ship_with_the_data():
    conn = connect()
    meta = dict(conn.execute("SELECT key, value FROM meta"))
    conn.close()
    assert meta["package"] == "aiconfigurator-core" and meta["package_version"] == "0.12.0"
    assert meta["licence"] == "Apache-2.0" and "NVIDIA" in meta["attribution"]
    assert meta["schema_version"] == str(datafile.SCHEMA_VERSION)
    assert "Apache License" in (datafile.DATA_DIR / "LICENSE").read_text()
    notice = (datafile.DATA_DIR / "NOTICE").read_text()
    assert "aiconfigurator-core 0.12.0" in notice and "derived" in notice


def test_canonical_dump_is_stable_and_complete():
    conn = connect()
    a, b = canonical_dump(conn), canonical_dump(conn)
    n = conn.execute("SELECT (SELECT COUNT(*) FROM points) + (SELECT COUNT(*) FROM collectives) + "
                     "(SELECT COUNT(*) FROM sources) + (SELECT COUNT(*) FROM meta) + (SELECT COUNT(*) FROM skipped)"
                     ).fetchone()[0]
    conn.close()
    assert a == b
    rows = [line for line in a.splitlines() if line.startswith("[")]
    assert len(rows) == n and all(isinstance(json.loads(r), list) for r in rows)


def test_attach_next_to_a_results_database(tmp_path):
    user = tmp_path / "results.db"
    sqlite3.connect(user).close()
    conn = sqlite3.connect(f"{user.as_uri()}?mode=ro", uri=True)  # as db.queries opens it
    attach(conn, "reference")
    assert conn.execute("SELECT COUNT(*) FROM reference.points").fetchone()[0] > 1000
    with pytest.raises(sqlite3.OperationalError):
        conn.execute("DELETE FROM reference.points")
    conn.close()
    # without uri=True the URI is honoured only where SQLite was built with SQLITE_USE_URI (Debian's
    # is); elsewhere the attach fails. Either way: the right file, read-only, and no stray file.
    plain = sqlite3.connect(user)
    try:
        attach(plain, "reference")
    except sqlite3.OperationalError:
        pass
    else:
        path = dict((name, f) for _, name, f in plain.execute("PRAGMA database_list"))["reference"]
        assert path == str(datafile.DEFAULT_PATH)
        with pytest.raises(sqlite3.OperationalError):
            plain.execute("DELETE FROM reference.points")
    plain.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.db"]


def test_reference_import_needs_no_heavy_package():
    code = ("import sys, autoselect.reference as r; r.default().query('ref-h200_sxm-x8', 'deepep_low_latency', "
            "hidden=7168, top_k=8, experts=256, dtype='bf16'); "
            "bad = [m for m in ('pyarrow', 'yaml', 'numpy', 'pandas', 'torch', 'sqlite_utils') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
