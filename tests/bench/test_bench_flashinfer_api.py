"""The FlashInfer adapters for a vLLM 0.34.0 target, bound to the real FlashInfer signatures: the one
installed (0.7.2.post1) and FlashInfer 0.7.4 (unpacked, ``AUTOSELECT_TEST_FLASHINFER074``).

vLLM 0.34.0 pins flashinfer-python 0.7.3, which is not on PyPI; its calls need what 0.7.4 has:
``NVLinkOneSidedConfig(cft=False, lamport=False)`` (0.34.0 all2all.py:860-868) and
``dispatch(..., runtime_max_tokens_per_rank=)`` (prepare_finalize/flashinfer_nvlink_one_sided.py:
141-147, flashinfer_nvlink_two_sided.py:167-173). ``support/flashinfer_bind.py`` runs both adapters'
setup, dispatch and combine with ``create_communication`` and the communicators' methods replaced by
recorders bound to the real signatures (no kernel runs). .ci/run unpacks 0.7.4's ``flashinfer/*.py``
(as it does 0.6.18.post1's) and sets the variable; without it the 0.7.4 test skips and says why.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from support.paths import REPO, TESTS

pytest.importorskip("flashinfer", reason="flashinfer-python not installed (CI: .ci/run installs it)")

FLASHINFER074 = os.environ.get("AUTOSELECT_TEST_FLASHINFER074")


def _bind(first_on_path: str | None) -> dict:
    paths = [p for p in (first_on_path, str(TESTS), str(REPO), os.environ.get("PYTHONPATH")) if p]
    run = subprocess.run([sys.executable, "-m", "support.flashinfer_bind"], capture_output=True, text=True,
                         timeout=300, cwd=REPO, env={**os.environ, "PYTHONPATH": os.pathsep.join(paths)})
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_on_the_installed_0_7_2_a_0_34_target_makes_the_calls_this_flashinfer_can_make():
    import flashinfer

    if not flashinfer.__version__.startswith("0.7.2"):
        pytest.skip(f"written for FlashInfer 0.7.2.post1 (vLLM 0.33's pin), this is {flashinfer.__version__}")
    d = _bind(None)
    one, two = d["flashinfer_nvlink_one_sided"], d["flashinfer_nvlink_two_sided"]
    # no cft / lamport in 0.7.2.post1's NVLinkOneSidedConfig (config.py:29-34): vLLM 0.33's calls
    assert (one["cft"], one["lamport"], one["dispatch_keywords"]) == ("absent", "absent", ["max_tokens_per_rank"])
    assert one["code_path"]["vllm_calls"] == "vLLM 0.33.0-0.33.x (flashinfer.moe_ep)" and one["poisoned"] == 1
    assert one["code_path"]["vllm_calls_note"].startswith("this FlashInfer cannot make the calls of vLLM 0.34.0+")
    # 0.34's two-sided goes through moe_ep, which 0.7.2.post1 has (nvlink_two_sided/communication.py:38-84)
    assert (two["config"], two["invalid_expert_id"], two["code_path"]["vllm_calls"]) == (
        "NVLinkTwoSidedConfig", 32, "vLLM 0.34.0+ (flashinfer.moe_ep)")


@pytest.mark.skipif(not FLASHINFER074, reason="AUTOSELECT_TEST_FLASHINFER074 unset (.ci/run unpacks flashinfer-python "
                                              "0.7.4 and sets it)")
def test_on_flashinfer_0_7_4_a_0_34_point_makes_vllm_0_34s_calls():
    d = _bind(FLASHINFER074)
    assert d["flashinfer"] == "0.7.4"
    assert d["installed"] == {"legacy_one_sided": False, "legacy_two_sided": False, "moe_ep_one_sided": True,
                              "moe_ep_two_sided": True, "transport_fields": True,
                              "dispatch_keyword": "runtime_max_tokens_per_rank"}
    one, two = d["flashinfer_nvlink_one_sided"], d["flashinfer_nvlink_two_sided"]
    assert (one["config"], one["cft"], one["lamport"]) == ("NVLinkOneSidedConfig", False, False)
    assert one["dispatch_keywords"] == two["dispatch_keywords"] == ["runtime_max_tokens_per_rank"]
    # 0.7.4 keeps its own workspace layout: the receive region is DISPATCH_PAYLOAD_OFFSET/SIZE_INDEX
    assert one["poisoned"] == 1
    assert one["code_path"] == {"flashinfer_api": "flashinfer.moe_ep (cft=False, lamport=False)",
                                "vllm_calls": "vLLM 0.34.0+ (flashinfer.moe_ep, fence transport)"}
    assert two["code_path"] == {"flashinfer_api": "flashinfer.moe_ep", "vllm_calls": "vLLM 0.34.0+ (flashinfer.moe_ep)"}
    assert two["invalid_expert_id"] == 32
