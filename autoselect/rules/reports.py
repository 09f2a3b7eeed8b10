"""Upstream reports (bugs, accuracy drops) about the backends, with the releases they concern.

Each :class:`UpstreamReport` row says which backends, activation dtypes, architectures, tensor
parallel sizes, serving roles and line settings (``--enforce-eager``, ``--enable-dbo``,
asynchronous EPLB) it was seen with, the releases it affects (first affected, first fixed, and a
range where nobody knows), its status as read from upstream on the row's date, and the sources.
:func:`reports_for` returns the notes that apply to one deployment, worded for a user: the
status, the version range, and when something is unknown, that it is.
"""

from __future__ import annotations

from typing import NamedTuple

from autoselect.rules.selection import release_range
from autoselect.rules.versions import version_in

#: When the statuses below were read from GitHub (the issues index), unless a row says otherwise.
STATUS_READ = "2026-12-01"

#: The line settings a report can depend on, as :func:`reports_for` takes them, and how a note names them.
SETTINGS = {
    "enforce_eager": "--enforce-eager",
    "enable_dbo": "--enable-dbo",
    "eplb_async": "asynchronous EPLB (--enable-eplb with use_async)",
}

OPEN, FIXED = "open", "fixed"

ONE_SIDED = "flashinfer_nvlink_one_sided"
TWO_SIDED = "flashinfer_nvlink_two_sided"


class UpstreamReport(NamedTuple):
    """One upstream report and where it applies."""

    ref: str  # "#39722" (vllm-project/vllm)
    backends: frozenset
    summary: str  # what users saw
    status: str  # OPEN | FIXED (as read on STATUS_READ)
    affected_since: str | None  # first release known to have it
    fixed_in: str | None  # first release with the fix
    unknown_since: str | None = None  # releases from here to affected_since: nobody checked
    dtypes: frozenset | None = None  # dispatch dtypes it was seen with (None: any)
    archs: frozenset | None = None  # GPU archs it was seen on (None: any)
    min_tensor_parallel: int = 1  # it needs -tp of at least this
    roles: frozenset | None = None  # serving roles it concerns ("prefill", "decode"); None: any
    where: str = ""  # the reported setting, in words
    source: str = ""
    needs: frozenset = frozenset()  # SETTINGS keys the line must have on
    status_read: str = STATUS_READ

    def range_words(self) -> str:
        """``affects 0.16.0-0.21.x, fixed in 0.22.0``-style words for the version range."""
        if self.fixed_in:
            span = release_range(self.affected_since or "?", self.fixed_in)
            return f"affects vLLM {span}, fixed in {self.fixed_in}"
        return f"seen from vLLM {self.affected_since}, no fix known" if self.affected_since else "no fix known"


UPSTREAM_REPORTS = (
    UpstreamReport(
        "#41382", frozenset({ONE_SIDED, TWO_SIDED}),
        "vLLM reduced the FlashInfer combine output a second time over the TP group (accuracy drop)",
        FIXED, affected_since="0.16.0", fixed_in="0.22.0", unknown_since="0.11.0", min_tensor_parallel=2,
        where="with -tp > 1 and data + expert parallelism (its test: -tp 2 -dp 2)",
        source="PR #41382 (opened 2026-04-30): output_is_reduced() -> True in both prepare/finalize classes, "
               "first in 0.22.0 (prepare_finalize/flashinfer_nvlink_two_sided.py:52-53, "
               "flashinfer_nvlink_one_sided.py:69-70; still False in 0.21.0); the extra reduce is "
               "tensor_model_parallel_all_reduce (0.21.0 runner/moe_runner.py:407-414), a no-op at TP 1; "
               "its author traces it to PR #32567 (first in 0.16.0); the older flashinfer_all2allv path "
               "also reported False (0.14.1 flashinfer_cutlass_prepare_finalize.py:57), unverified",
    ),
    UpstreamReport(
        "#39722", frozenset({TWO_SIDED}),
        "flashinfer_nvlink_two_sided produced gibberish (Qwen3-30B-A3B and GLM, bf16)",
        OPEN, affected_since="0.19.0", fixed_in=None, unknown_since="0.11.0", archs=frozenset({"sm100"}),
        where="on GB200 (arm64), -dp 4 with expert parallelism, TP 1",
        source="vllm-project/vllm#39722 (2026-04-13; vllm 0.19.0, flashinfer 0.6.7.post3); TP 1, so not "
               "the double reduce #41382 fixed; SemiAnalysis InferenceX PR #2450 avoids two-sided for it",
    ),
    UpstreamReport(
        "#40373", frozenset({ONE_SIDED}),
        "DeepSeek-R1 NVFP4 with one-sided on the prefill instances lost accuracy (GSM8K 96.3% -> 92.9%; "
        "decode with one-sided was fine)",
        OPEN, affected_since="0.19.1", fixed_in=None, unknown_since="0.18.0", dtypes=frozenset({"nvfp4"}),
        archs=frozenset({"sm100"}), roles=frozenset({"prefill"}),
        where="on the prefill side of prefill/decode disaggregation, GB200, TP 1",
        source="vllm-project/vllm#40373 (2026-04-20, main after 0.19.1); its config "
               "(tlrmchlsmth/j-llm-d gb200/base/prefill.yaml) runs TP_SIZE=1, so not the double reduce #41382 fixed",
    ),
    UpstreamReport(
        "#42118", frozenset({ONE_SIDED, TWO_SIDED, "allgather_reducescatter"}),
        "mxfp8 activation scales reach the FlashInfer CUTLASS MoE kernel unswizzled after the all2all: "
        "wrong output (NaN logits, GSM8K 0)",
        OPEN, affected_since="0.20.1", fixed_in=None, dtypes=frozenset({"mxfp8"}),
        where="with FlashInfer CUTLASS MXFP4 x MXFP8 experts and DP > 1",
        source="vllm-project/vllm#42118 (2026-05-08; the post-dispatch swizzle is gated on nvfp4 in "
               "naive_dp_ep.py and both flashinfer_nvlink prepare/finalize files); fix PR #49335 open (2026-07-21)",
    ),
    UpstreamReport(
        "#51824", frozenset({"deepep_v2"}),
        "vLLM crashed at start-up: 'expert_indices dim1 must match top_k' (the TRT-LLM BF16 experts read top_k "
        "from the layer, not from DeepEP v2's expanded top-k ids)",
        FIXED, affected_since="0.26.0", fixed_in="0.29.0", dtypes=frozenset({"bf16"}), archs=frozenset({"sm100"}),
        needs=frozenset({"enforce_eager"}), status_read="2026-12-03",
        where="with --enforce-eager and the TRT-LLM BF16 experts (Blackwell, unquantized model)",
        source="PR #51824 (merged 2026-08-11); the modular TrtLlmBf16ExpertsModular first in 0.26.0 "
               "(fused_moe/experts/trtllm_bf16_moe.py:98, top_k=self.topk at :182; 0.28.0 :210); fixed in 0.29.0 "
               "(trtllm_bf16_moe.py:211 top_k=topk_ids.size(1)); the experts run on the SM100 family only "
               "(_supports_current_device, 0.29.0 :87-95)",
    ),
    UpstreamReport(
        "#35212", frozenset({"allgather_reducescatter", "naive"}),
        "asynchronous EPLB hung: the EPLB thread's NCCL weight exchange overlapped the NCCL all-gather / "
        "reduce-scatter of the main thread",
        FIXED, affected_since="0.12.0", fixed_in="0.17.0", needs=frozenset({"eplb_async"}), status_read="2026-12-03",
        where="with --enable-eplb and use_async true (async EPLB came in 0.12.0, off by default until 0.23.0)",
        source="PR #35212 (merged 2026-02-24; pytorch/pytorch#175145): 0.17.0-0.19.x force synchronous EPLB for "
               "these backends (0.17.0 config/parallel.py:777-786); 0.20.0 drops the forcing and gives async EPLB "
               "the torch_gloo communicator (0.20.0 parallel.py:856-867); affected from 0.12.0 by the code (an NCCL "
               "weight exchange and no guard: 0.12.0 config/parallel.py:63)",
    ),
    UpstreamReport(
        "#32860", frozenset({"deepep_low_latency"}),
        "asynchronous EPLB deadlocked: its NCCL kernels held the SMs DeepEP low-latency's cooperative launch "
        "waits for, and ranks launched the two in different orders",
        FIXED, affected_since="0.12.0", fixed_in="0.17.0", needs=frozenset({"eplb_async"}), status_read="2026-12-03",
        where="with --enable-eplb and use_async true, data parallel > 1 (deepseek-ai/DeepEP#496)",
        source="PR #32860 (merged 2026-01-22): vLLM sets NCCL_MAX_CTAS=8 for EPLB with deepep_low_latency from 0.17.0 "
               "(distributed/eplb/eplb_utils.py:15-52; not in 0.16.0); affected from 0.12.0 by the code (async EPLB "
               "and no NCCL_MAX_CTAS: 0.12.0 config/parallel.py:63)",
    ),
    UpstreamReport(
        "#29670", frozenset({"deepep_low_latency"}),
        "--enable-dbo with deepep_low_latency failed on one node of 8x H20",
        OPEN, affected_since="0.11.2", fixed_in=None, unknown_since="0.11.0", archs=frozenset({"sm90"}),
        needs=frozenset({"enable_dbo"}), status_read="2026-12-03",
        where="on a single node (8x H20), DeepSeek-V2-Lite, -dp 2 with expert parallelism",
        source="vllm-project/vllm#29670 (open; vLLM 0.11.2, VLLM_ALL2ALL_BACKEND=deepep_low_latency "
               "--enable-dbo); --enable-dbo exists from 0.11.0",
    ),
)

def report(ref: str) -> UpstreamReport:
    """The :data:`UPSTREAM_REPORTS` row ``ref``."""
    return next(r for r in UPSTREAM_REPORTS if r.ref == ref)


class ReportNote(NamedTuple):
    """One report as it bears on one deployment."""

    report: UpstreamReport
    certain: bool  # False: the release is in the unknown range, or a condition could not be checked
    text: str


def reports_for(backend: str, vllm_version: str, *, dtype: str | None = None, arch: str | None = None,
                tensor_parallel_size: int | None = None, role: str | None = None,
                settings: dict | None = None) -> list[ReportNote]:
    """The reports that concern ``backend`` on ``vllm_version`` for this deployment.

    A report is left out when the release is fixed or older than anything known, or when a
    condition the caller knows (dtype, arch, TP size, role, a setting) rules it out; a condition
    the caller does not know (None) keeps it, worded as a condition. ``settings`` maps
    :data:`SETTINGS` keys to True / False / None (unknown); None as a whole: a deployment with
    none of them on (what ``recommend`` emits).
    """
    out = []
    for r in UPSTREAM_REPORTS:
        if backend not in r.backends:
            continue
        if r.fixed_in and version_in(vllm_version, r.fixed_in, None):
            continue
        affected = r.affected_since is None or version_in(vllm_version, r.affected_since, None)
        unknown = (not affected and r.unknown_since is not None
                   and version_in(vllm_version, r.unknown_since, r.affected_since))
        if not affected and not unknown:
            continue
        if r.dtypes is not None and dtype is not None and dtype not in r.dtypes:
            continue
        if r.archs is not None and arch is not None and arch not in r.archs:
            continue
        if tensor_parallel_size is not None and tensor_parallel_size < r.min_tensor_parallel:
            continue
        if r.roles is not None and role is not None and role != "both" and role not in r.roles:
            continue
        known = {k: (settings or {}).get(k, False if settings is None else None) for k in r.needs}
        if any(v is False for v in known.values()):
            continue
        conditions = [f"applies only with {SETTINGS[k]}" for k in sorted(known) if known[k] is None]
        if dtype is None and r.dtypes is not None:
            conditions.append(f"applies only to {'/'.join(sorted(r.dtypes))} dispatch")
        if arch is None and r.archs is not None:
            conditions.append(f"seen on {'/'.join(sorted(r.archs))} only")
        if tensor_parallel_size is None and r.min_tensor_parallel > 1:
            conditions.append(f"applies only with -tp >= {r.min_tensor_parallel}")
        if r.roles is not None and role in (None, "both"):
            conditions.append(f"applies where this instance runs {'/'.join(sorted(r.roles))}")
        status = f"{r.status} as of {r.status_read}" if r.status == OPEN else r.status
        head = f"upstream report {r.ref} ({status}; {r.range_words()}): {r.summary}, {r.where}"
        if unknown:
            head += (f"; whether vLLM {vllm_version} has it is unknown (first seen in {r.affected_since}, "
                     f"nobody checked {release_range(r.unknown_since, r.affected_since)})")
        if conditions:
            head += "; " + ", ".join(conditions)
        out.append(ReportNote(r, affected and not conditions, head))
    return out
