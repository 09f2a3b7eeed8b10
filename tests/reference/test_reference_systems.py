"""Reference systems and classes: names, hardware facts, matching a host fingerprint."""

from __future__ import annotations

import pytest

from autoselect.hardware import NVLINK_GBPS_PER_LINK, HostFingerprint, cpu_fingerprint
from autoselect.reference import CLASSES, get_class, is_reference_class, match_host
from autoselect.reference.systems import SYSTEMS, ReferenceWorldSizeUnavailable, UnknownReferenceClass


def host(gpu_name, count, *, links_up=True, fabric=None, arch="sm90"):
    return HostFingerprint(hostname="h", machine_id="m", host_class=f"x{count}-abc", device="cuda",
                           gpu_name=gpu_name, gpu_count=count, gpu_arch=arch, all_nvlinks_up=links_up, fabric=fabric)


def test_class_names_and_facts():
    assert list(CLASSES) == ["ref-h100_sxm-x8", "ref-h200_sxm-x8", "ref-b200_sxm-x8", "ref-b300_sxm-x8",
                             "ref-gb200-x4", "ref-gb300-x4", "ref-gb200-nvl72"]
    h200 = get_class("ref-h200_sxm-x8").to_dict()
    assert h200 == {"name": "ref-h200_sxm-x8", "system": "h200_sxm", "gpu_name": "NVIDIA H200", "gpu_count": 8,
                    "gpu_arch": "sm90", "compute_capability": "9.0", "nvlink": "NVLink 4", "nvlink_gbps": 450.0,
                    "domain": "node", "default_world_size": 8}
    gb = get_class("ref-gb200-x4")
    assert (gb.system.arch, gb.system.nvlink, gb.system.nvlink_gbps, gb.gpu_count) == ("sm100", "NVLink 5", 900.0, 4)
    assert get_class("ref-b300_sxm-x8").system.compute_capability == "10.3"
    rack = get_class("ref-gb200-nvl72")
    assert (rack.gpu_count, rack.domain, rack.default_world_size) == (72, "nvl72", None)
    assert rack.describe() == "72×GB200 (sm100, NVLink 5, 900 GB/s per GPU per direction, NVL72 rack, MNNVL across trays)"
    assert set(SYSTEMS) == {c.system.key for c in CLASSES.values()}


def test_nvlink_facts_agree_with_the_hardware_table():
    for s in SYSTEMS.values():  # every system has 18 NVLinks per GPU
        generation, per_link = NVLINK_GBPS_PER_LINK[s.compute_capability]
        assert (s.nvlink, s.nvlink_gbps) == (generation, per_link * 18)


def test_unknown_class_lists_the_known_ones():
    assert is_reference_class("ref-anything") and not is_reference_class("h200x8-1a2b3c4d")
    with pytest.raises(UnknownReferenceClass, match="ref-gb200-nvl72"):
        get_class("ref-h200-x8")


def test_world_sizes():
    h200 = get_class("ref-h200_sxm-x8")
    assert h200.check_world_size(None) == 8 and h200.check_world_size(4) == 4
    with pytest.raises(ReferenceWorldSizeUnavailable, match="2 to 8 GPUs, not a world size of 16"):
        h200.check_world_size(16)
    with pytest.raises(ReferenceWorldSizeUnavailable, match="use ref-gb200-nvl72"):
        get_class("ref-gb200-x4").check_world_size(8)
    assert get_class("ref-gb200-nvl72").check_world_size(64) == 64
    with pytest.raises(ReferenceWorldSizeUnavailable, match="give the world size"):
        get_class("ref-gb200-nvl72").check_world_size(None)


@pytest.mark.parametrize("gpu_name, count, expected", [
    ("NVIDIA H200", 8, "ref-h200_sxm-x8"),
    ("NVIDIA H100 80GB HBM3", 8, "ref-h100_sxm-x8"),
    ("NVIDIA B200", 8, "ref-b200_sxm-x8"),
    ("NVIDIA B300 SXM6 AC", 8, "ref-b300_sxm-x8"),
    ("NVIDIA GB200", 4, "ref-gb200-x4"),
    ("NVIDIA GB300", 4, "ref-gb300-x4"),
    ("nvidia  h200", 8, "ref-h200_sxm-x8"),  # NVML spacing/case
    ("NVIDIA H200", 4, None),  # a 4-GPU board is not the 8-GPU NVSwitch system measured
    ("NVIDIA H200 NVL", 8, None),  # PCIe card with NVLink bridges: another system
    ("NVIDIA H100 PCIe", 8, None),
    ("NVIDIA A100-SXM4-80GB", 8, None),  # no all2all tables for A100
])
def test_match_by_gpu_model_and_count(gpu_name, count, expected):
    m = match_host(host(gpu_name, count))
    assert (m.ref_class.name if m else None) == expected
    if m:
        assert m.caveats == ()


def test_match_a_hosts_row_dict_and_cpu_hosts():
    row = {"device": "cuda", "gpu_name": "NVIDIA B200", "gpu_count": 8, "all_nvlinks_up": 0, "fabric": None}
    m = match_host(row)
    assert m.ref_class.name == "ref-b200_sxm-x8" and "not every NVLink" in m.caveats[0]
    assert match_host(cpu_fingerprint()) is None


def test_multi_node_world_sizes_match_only_the_gb200_rack():
    tray = host("NVIDIA GB200", 4, fabric="completed cluster=ab clique=1", arch="sm100")
    assert match_host(tray, world_size=4).ref_class.name == "ref-gb200-x4"
    assert match_host(tray, world_size=2).ref_class.name == "ref-gb200-x4"
    assert match_host(tray, world_size=32).ref_class.name == "ref-gb200-nvl72"
    assert match_host(tray, world_size=144) is None
    assert match_host(host("NVIDIA GB200", 4, fabric=None), world_size=16) is None  # no MNNVL fabric up
    assert match_host(host("NVIDIA GB300", 4, fabric="completed cluster=ab clique=1"), world_size=8) is None
    assert match_host(host("NVIDIA H200", 8), world_size=16) is None  # HGX across nodes: no rows
