"""The host fingerprint: NVML answers replayed from fixtures, and the real CPU path."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from support.nvml import ReplayNvml, load

import autoselect
from autoselect import hardware
from autoselect.hardware import HostFingerprint, fingerprint, link_matrix, local_gpu_arch, nvlink_per_link_gbps


def test_hgx_h200_has_18_nvlinks_per_gpu_and_18_between_every_pair():
    fp = fingerprint(ReplayNvml(load("hgx_h200_8gpu")))
    assert (fp.device, fp.gpu_name, fp.gpu_count, fp.gpu_arch) == ("cuda", "NVIDIA H200", 8, "sm90")
    assert [(g.nvlinks_up, g.nvlinks_total) for g in fp.gpus] == [(18, 18)] * 8
    assert fp.nvlink_matrix == [[0 if i == j else 18 for j in range(8)] for i in range(8)]
    assert fp.all_nvlinks_up is True
    assert fp.nvlink_peak_gbps == 450.0  # 18 NVLink-4 links x 25 GB/s per direction
    assert fp.fabric is None  # Hopper HGX: NVML reports no fabric
    assert (fp.driver_version, fp.cuda_version) == ("570.133.20", "12.8")
    g = fp.gpus[5]
    assert (g.index, g.memory_total_mib, g.compute_capability, g.sm_arch, g.pci_bus_id) == (
        5, 143771, "9.0", "sm90", "00000000:ab:00.0")
    assert fp.host_class.startswith("h200x8-")


def test_single_h200_without_nvlink_has_no_links_and_no_peak():
    fp = fingerprint(ReplayNvml(load("h200_1gpu_no_nvlink")))
    assert (fp.gpu_count, fp.gpu_arch, fp.cuda_version) == (1, "sm90", "13.0")
    assert (fp.gpus[0].nvlinks_up, fp.gpus[0].nvlinks_total) == (0, 0)
    assert fp.nvlink_matrix == [[0]]
    assert fp.all_nvlinks_up is False
    assert fp.nvlink_peak_gbps is None
    assert fp.fabric is None


def test_gb200_tray_reports_completed_fabric_and_nvlink5_peak():
    fp = fingerprint(ReplayNvml(load("gb200_nvl72_tray")))
    assert (fp.gpu_arch, fp.gpu_count) == ("sm100", 4)
    assert fp.fabric == "completed cluster=5e3a7c1d9b2f4e6a8c0d1e2f3a4b5c6d clique=32766"
    assert fp.nvlink_peak_gbps == 900.0  # 18 NVLink-5 links x 50 GB/s
    assert fp.nvlink_matrix[0] == [0, 18, 18, 18]


def test_same_gpus_and_topology_on_another_machine_share_the_host_class():
    rec = load("hgx_h200_8gpu")
    other = copy.deepcopy(rec)
    for i, dev in enumerate(other["devices"]):
        dev["uuid"] = f"GPU-other-{i}"
        dev["pci_bus_id"] = f"00000000:{0x30 + i:02x}:00.0"
    other["devices"].reverse()
    other["driver_version"] = "580.1.2"
    assert fingerprint(ReplayNvml(other)).host_class == fingerprint(ReplayNvml(rec)).host_class


def test_a_link_down_changes_the_host_class_and_lowers_the_peak():
    rec = load("hgx_h200_8gpu")
    broken = copy.deepcopy(rec)
    broken["devices"][3]["nvlinks"][0] = {"state": 0}
    fp = fingerprint(ReplayNvml(broken))
    assert fp.host_class != fingerprint(ReplayNvml(rec)).host_class
    assert fp.all_nvlinks_up is False
    assert (fp.gpus[3].nvlinks_up, fp.gpus[3].nvlinks_total) == (17, 18)
    assert fp.nvlink_matrix[3][0] == 17 and fp.nvlink_matrix[0][3] == 17 and fp.nvlink_matrix[0][1] == 18
    assert fp.nvlink_peak_gbps == 425.0  # the slowest GPU bounds an all2all


def test_direct_gpu_to_gpu_links_are_counted_per_pair():
    buses = ["00000000:01:00.0", "00000000:02:00.0", "00000000:03:00.0"]
    links = [
        [{"up": True, "remote": buses[1], "type": 0}] * 4 + [{"up": True, "remote": buses[2], "type": 0}] * 2,
        [{"up": True, "remote": buses[0], "type": 0}] * 4,
        [{"up": True, "remote": buses[0], "type": 0}] * 2 + [{"up": False, "remote": None, "type": None}],
    ]
    assert link_matrix(buses, links) == [[0, 4, 2], [4, 0, 0], [2, 0, 0]]


def test_nvml_that_cannot_start_gives_the_cpu_fingerprint():
    fp = fingerprint(ReplayNvml(load("hgx_h200_8gpu"), init_error="DriverNotLoaded"))
    assert (fp.device, fp.gpu_count, fp.gpu_arch, fp.gpus) == ("cpu", 0, None, [])


def test_nvml_is_shut_down_after_the_fingerprint():
    nvml = ReplayNvml(load("hgx_h200_8gpu"))
    fingerprint(nvml)
    assert nvml.calls == ["nvmlInit", "nvmlShutdown"]


@pytest.mark.parametrize("recording", ["hgx_h200_8gpu", "gb200_nvl72_tray", "h200_1gpu_no_nvlink"])
def test_local_gpu_arch_is_the_fingerprint_s_arch_and_shuts_nvml_down(recording):
    nvml = ReplayNvml(load(recording))
    assert local_gpu_arch(nvml) == fingerprint(ReplayNvml(load(recording))).gpu_arch is not None
    assert nvml.calls == ["nvmlInit", "nvmlShutdown"]


def test_local_gpu_arch_without_usable_nvml_is_none():
    assert local_gpu_arch(ReplayNvml(load("hgx_h200_8gpu"), init_error="DriverNotLoaded")) is None


def test_per_link_bandwidth_follows_the_nvlink_generation_table():
    assert [nvlink_per_link_gbps(cc) for cc in ("7.0", "8.0", "9.0", "10.0", "10.3", "12.0")] == [
        25.0, 25.0, 25.0, 50.0, 50.0, None]


def test_cpu_path_on_this_machine_fingerprints_the_cpu():
    fp = fingerprint()
    if fp.device == "cuda":
        pytest.skip("this machine has a GPU visible to NVML")
    assert (fp.device, fp.gpu_count, fp.gpu_arch, fp.gpu_name) == ("cpu", 0, None, None)
    assert fp.host_class.startswith("cpu-")
    assert fp.host_class == fingerprint().host_class
    assert fp.versions["autoselect"] == autoselect.__version__
    assert fp.versions["torch"] == metadata.version("torch")
    assert "vllm" not in fp.versions or fp.versions["vllm"] == metadata.version("vllm")


def test_machine_id_is_stable_and_never_the_raw_systemd_id():
    mid = hardware.machine_id()
    assert mid == hardware.machine_id() and len(mid) == 32
    raw = Path("/etc/machine-id")
    if raw.exists():
        assert raw.read_text().strip() != mid


def test_fingerprint_round_trips_through_a_dict_and_json():
    fp = fingerprint(ReplayNvml(load("hgx_h200_8gpu")))
    again = HostFingerprint.from_dict(json.loads(json.dumps(fp.to_dict())))
    assert again == fp


def test_versions_come_from_metadata_without_importing_the_packages():
    code = (
        "import sys; from autoselect.hardware import fingerprint; fp = fingerprint(); "
        "print(sorted(m for m in ('torch', 'flashinfer', 'vllm', 'deep_ep', 'numpy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("name", ["Ref Board 9000", "REF-accelerator", "NVIDIA Ref H200", "ref"])
def test_no_gpu_name_gives_a_class_in_the_reserved_reference_namespace(name):
    rec = copy.deepcopy(load("hgx_h200_8gpu"))
    for dev in rec["devices"]:
        dev["name"] = name
    host = fingerprint(ReplayNvml(rec))
    assert not hardware.is_reference_class(host.host_class), host.host_class
    assert host.host_class.startswith("gpu-ref") or host.host_class.startswith("refx")
