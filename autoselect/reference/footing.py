"""One footing: what each published number includes, and the corrections that put it where vLLM's layer is.

The reference's numbers come from three harnesses that time different things (:data:`FOOTINGS`):
nccl-tests loops (the NCCL rows the default is derived from), vLLM 0.24's DeepEP prepare/finalize
timed eagerly (AIConfigurator's DeepEP rows), and TensorRT-LLM's kernels replayed as CUDA graphs
(the one- and two-sided rows). Comparing them as they are compares harnesses. The **common
footing** (:data:`COMMON`) is what vLLM's step pays for one MoE layer with a backend: its dispatch
+ combine as vLLM runs them at that step size, under a CUDA graph where vLLM captures the step
and the backend allows it (:func:`autoselect.rules.graph_capture.capture`: decode-sized steps),
eagerly otherwise (prefill chunks, DeepEP high-throughput always).

Every number is moved from its own footing to the common one by the corrections of
:data:`CORRECTIONS`, each a range (never a point: none of them is measured on the reference
systems themselves) from a cited public measurement (:data:`EVIDENCE`). A correction's range
becomes part of the number's range, so its band carries it. The derived default's model
(``derived.py``) is one launch per NCCL group plus a per-tensor term (:data:`EXTRA_TENSOR`) on
the nccl-tests footing; the framework's per-launch cost is its correction here.

:func:`on_common_footing` applies them to one :class:`~autoselect.reference.query.ReferencePoint`
and says what it did (:class:`PointFooting`: the answer's per-number ``footing``). Pure Python.
"""

from __future__ import annotations

from typing import NamedTuple

from autoselect.rules.graph_capture import EAGER, EAGER_BACKENDS, GRAPH, MAX_CAPTURE, capture

AGRS = "allgather_reducescatter"
ONE_SIDED, TWO_SIDED = "flashinfer_nvlink_one_sided", "flashinfer_nvlink_two_sided"
DEEPEP_HT, DEEPEP_LL = "deepep_high_throughput", "deepep_low_latency"


class Evidence(NamedTuple):
    """One public measurement (or source reading) a footing or correction rests on."""

    key: str
    says: str  # what was measured, with the numbers used here
    source: str  # where (PR, file, page) and when


#: The public measurements behind the footings and corrections (gathered 2026-12-05; none by this project).
EVIDENCE: dict[str, Evidence] = {e.key: e for e in (
    Evidence("A1", "an NCCL all_gather inside a framework (SGLang 0.5.18, torch.distributed on an NCCL group), "
                   "captured in a CUDA graph and replayed 50x back-to-back, max over ranks, on 8xB300: 37.2 / 61.5 / "
                   "146.5 us at 112 KiB / 7 MiB / 56 MiB, where the nccl-tests rows give 18.3 / 39.7 / 130.3 us: "
                   "+18.9 / +21.8 / +16.2 us per launch, about constant",
             "sgl-project/sglang PR #37255 (2026-08-31), scripts/bench_sp_collective_sweep.py"),
    Evidence("A2", "vLLM's own small all_gathers on 8xB300 (TP 8, CUDA graphs, slowest rank): a second, separately "
                   "launched gather adds 10.0 / 5.8 / 6.2 us at 8 / 32 / 128 rows, 0.61 / 0.31 / 0.34 of the "
                   "nccl-tests latency floor there (16.4 / 18.8 / 18.4 us); one packed gather costs 38.2-46.3 us, at "
                   "most 2.3-2.5x the floor with the top-k kernels around it timed too (+20-28 us)",
             "vllm-project/vllm PR #55961 (2026-09-08)"),
    Evidence("NCCL-group", "NCCL runs the calls of one ncclGroupStart/End in a single launch (aggregated "
                           "operations, NCCL 2.2 and later); an all_gather is a byte copy whatever its dtype "
                           "(ncclInfoSetDerived: count = nBytes, datatype = ncclInt8), so vLLM's 3-4 gathers of "
                           "one layer are tasks of one kernel, spread over the channels by traffic",
             "NCCL documentation, 'Group Calls'; NVIDIA/nccl src/include/info.h, scheduleCollTasksToPlan"),
    Evidence("A7", "graph-captured low-latency-class round trips on 8xB200 (identity expert, p50 per rank): nixl_ep "
                   "LL 82.4 / 100.9 us at 8 / 64 tokens per rank (DeepSeek-V3 7168 x top-8 x 256), where the "
                   "eager DeepEP LL rows read 120.6 / 149.1 us (x0.68 both); NCCL-EP LL 119.6 us at 8 (x0.99)",
             "mhoqueanik/moe_ep_benchmark model_shapes/results_ep8_ll_nixl_20260814/RESULTS.md (2026-08-14)"),
    Evidence("B8", "vLLM's one-sided combine writing straight into the output instead of through a staging copy: "
                   "-3.10 % TPOT, +2.31 % throughput (GB200 x4, Nemotron-Ultra-550B NVFP4, ISL/OSL 50000/2048)",
             "vllm-project/vllm PR #47156 (merged 2026-06-30)"),
    Evidence("vLLM-0.34-glue", "vLLM 0.34.0's FlashInfer backends: one-sided lets the experts write the combine "
                               "input into the workspace (get_combine_input_buffer) and dispatches hidden states, "
                               "scales, ids and weights in one call; two-sided dispatches them in one "
                               "flashinfer.moe_ep call: what remains over the kernel benchmark is vLLM's glue (an "
                               "expert-id sanitize, a scale swizzle for CUTLASS experts)",
             "vllm 0.34.0 model_executor/layers/fused_moe/prepare_finalize/flashinfer_nvlink_one_sided.py:85-100, "
             ":142-148; flashinfer_nvlink_two_sided.py:125-185"),
    Evidence("A3", "TensorRT-LLM's one-sided blog plots a figure labelled B200 whose bf16 baseline equals the "
                   "GB200 EP 8 row: the same kernel moves the same bytes in the same time on both NVLink-5 systems",
             "NVIDIA/TensorRT-LLM docs/source/blogs/tech_blog/blog18 (PR #12195, 2026-03-13)"),
)}


class Footing(NamedTuple):
    """What one harness's number includes."""

    key: str
    harness: str  # what was timed
    framework: str  # the framework code inside the timed region, or none
    capture: str  # how the kernels were launched: CUDA graph, eager, or a pipelined loop
    quantize: str  # whether the activation quantization pass is inside
    statistic: str  # which rank and which average
    source: str  # where this was read (collector file and lines, docs/reference-data.md)


NCCL_TESTS, VLLM_DEEPEP, TRTLLM_KERNEL, VLLM_LAYER = "nccl-tests", "vllm-deepep-eager", "trtllm-kernel-graph", "vllm-layer"

#: The footing of every published table (docs/reference-data.md, "How each table was measured").
FOOTINGS: dict[str, Footing] = {f.key: f for f in (
    Footing(NCCL_TESTS, "nccl-tests all_gather_perf / reduce_scatter_perf, one collective per call, never grouped",
            "none", "a pipelined loop: -w 40 -n 100 back-to-back calls (60 above 16 MiB), each launch hidden behind "
            "the previous call", "none", "the out-of-place time averaged over the calls and over the ranks (-a 1)",
            "ai-dynamo/aiconfigurator collector/network/collect_nccl.py (61-79, 96)"),
    Footing(VLLM_DEEPEP, "vLLM 0.24.0's DeepEPHTPrepareAndFinalize / DeepEPLLPrepareAndFinalize prepare() and "
            "finalize()", "vLLM's prepare/finalize (Python, buffers, the DeepEP calls)", "eager: no CUDA graph",
            "none: bf16 with FusedMoEQuantConfig.make(None)", "CUDA events, the mean of 10 rounds on rank 0",
            "ai-dynamo/aiconfigurator collector/wideep/vllm/collect_moe_a2a.py at 65aab00d"),
    Footing(TRTLLM_KERNEL, "TensorRT-LLM 1.2.0rc6's moe_a2a_dispatch / moe_a2a_combine (one-sided) and MnnvlMoe "
            "prepare / dispatch / combine (two-sided) called directly", "none (no vLLM, no Python state machine)",
            "a CUDA graph replayed (eager only where capture failed)", "none: the payload is quantized beforehand",
            "the mean of 10 replays on rank 0, balanced routing",
            "ai-dynamo/aiconfigurator collector/slurm_comm_collector/collect_trtllm_alltoall.py and "
            "collector/helper.py at cef980f2b"),
)}

#: The one footing every compared number stands on.
COMMON = Footing(VLLM_LAYER, "one MoE layer's dispatch + combine as vLLM runs it at this step size",
                 "vLLM's glue around the backend's calls", "a CUDA graph where vLLM captures the step and the backend "
                 "allows it (steps up to the largest captured size: decode), eagerly otherwise (prefill chunks; "
                 "DeepEP high-throughput always)",
                 "left out: every backend quantizes the activation once, before or after its dispatch, so it moves "
                 "no comparison", "the step waits for the slowest rank: a collective or an all2all kernel ends when "
                 "the last rank's data has arrived", "autoselect.rules.graph_capture (where vLLM captures a step)")

#: Which footing each backend's published (or derived) numbers stand on.
BACKEND_FOOTING = {AGRS: NCCL_TESTS, DEEPEP_HT: VLLM_DEEPEP, DEEPEP_LL: VLLM_DEEPEP, ONE_SIDED: TRTLLM_KERNEL,
                   TWO_SIDED: TRTLLM_KERNEL}

#: The derived default's per-tensor term, in latency floors of the system's all_gather (its
#: smallest measured size): each gathered tensor beyond the first adds between nothing (one launch
#: for the group: NCCL-group) and what a separately launched small gather adds in vLLM (A2: at most
#: 0.61 of a floor). Its range is the derivation's range on the nccl-tests footing.
EXTRA_TENSOR = (0.0, 0.61)
EXTRA_TENSOR_EVIDENCE = ("NCCL-group", "A2")

SCALE, ADD_PER_LAUNCH = "scale", "add per NCCL launch"


class Correction(NamedTuple):
    """One move from a source footing to the common one: ``low``..``high`` times the number
    (``scale``) or microseconds per NCCL launch of the round trip (``add per NCCL launch``)."""

    key: str
    backends: tuple[str, ...]
    source_footing: str
    capture: tuple[str, ...]  # the common footing's launch modes it applies to (GRAPH, EAGER)
    kind: str  # SCALE | ADD_PER_LAUNCH
    low: float
    high: float
    what: str
    evidence: tuple[str, ...]

    def effect(self, launches: int | None = None) -> str:
        """``x0.68..x1.00`` / ``+2 x 16.2..21.8 us`` (``+16.2..21.8 us per NCCL launch`` without a count)."""
        if self.kind == SCALE:
            return f"x{self.low:.2f}..x{self.high:.2f}"
        if launches is None:
            return f"+{self.low:g}..{self.high:g} us per NCCL launch"
        return f"+{launches} x {self.low:g}..{self.high:g} us"


#: Every correction, by key. A number whose footing and launch mode match no row is already on the
#: common footing (DeepEP's eager rows where vLLM runs the step eagerly) and says so.
CORRECTIONS: dict[str, Correction] = {c.key: c for c in (
    Correction("framework-launch", (AGRS,), NCCL_TESTS, (GRAPH, EAGER), ADD_PER_LAUNCH, 16.2, 21.8,
               "what a framework pays per NCCL launch over nccl-tests' pipelined loop (the launch, the slowest rank "
               "instead of the mean): once for the dispatch's group, once for the reduce_scatter",
               ("A1", "A2")),
    Correction("deepep-ll-graph", (DEEPEP_LL,), VLLM_DEEPEP, (GRAPH,), SCALE, 0.68, 1.0,
               "vLLM captures DeepEP low-latency in the step's CUDA graph; the rows were timed eagerly: between the "
               "graph-captured low-latency-class kernels' x0.68 and no change", ("A7",)),
    Correction("vllm-flashinfer-glue", (ONE_SIDED, TWO_SIDED), TRTLLM_KERNEL, (GRAPH, EAGER), SCALE, 1.0, 1.031,
               "vLLM's glue around the TensorRT-LLM kernels FlashInfer ships: between none (0.34 dispatches in one "
               "call and lets the experts write into the workspace) and the 3.1 % the staging copy once cost",
               ("vLLM-0.34-glue", "B8")),
)}


class AppliedCorrection(NamedTuple):
    """One correction as applied to one number (JSON)."""

    correction: str
    effect: str
    evidence: tuple[str, ...]

    def to_dict(self) -> dict:
        return {"correction": self.correction, "effect": self.effect, "evidence": list(self.evidence)}


class PointFooting(NamedTuple):
    """How one number was put on the common footing: its own footing, how vLLM launches it at this
    step size (``capture``: graph / eager, and why), the number on its own footing (a range for the
    derived default) and the corrections applied."""

    source: str  # a FOOTINGS key
    capture: str  # GRAPH | EAGER
    capture_why: str
    as_source_us: tuple[float, float]
    corrections: tuple[AppliedCorrection, ...]

    def to_dict(self) -> dict:
        return {"source": self.source, "capture": self.capture, "as_source_us": [round(v, 3) for v in self.as_source_us],
                "corrections": [c.to_dict() for c in self.corrections]}

    def describe(self) -> str:
        """``graph; x0.68..x1.00 (deepep-ll-graph)`` / ``eager; as published``."""
        fixes = ", ".join(f"{c.effect} ({c.correction})" for c in self.corrections)
        return f"{self.capture}; {fixes or 'on the footing as published'}"


class Footed(NamedTuple):
    """A number on the common footing: its central value, its range and how it got there."""

    latency_us: float
    low_us: float
    high_us: float
    footing: PointFooting

    @property
    def range_us(self) -> tuple[float, float] | None:
        return (self.low_us, self.high_us) if self.high_us > self.low_us else None


def launches(point) -> int:
    """NCCL launches of a derived round trip: one per group (the dispatch's), one per other call."""
    derivation = point.derivation or {}
    return int(derivation.get("launches", 2))


def corrections_for(backend: str, source: str, mode: str) -> list[Correction]:
    """The corrections that move ``backend``'s numbers from footing ``source`` at launch mode ``mode``."""
    return [c for c in CORRECTIONS.values() if backend in c.backends and c.source_footing == source and mode in c.capture]


def on_common_footing(point, arch: str, vllm_version: str | None = None) -> Footed:
    """``point`` (a reference row, on its own footing: ``as_source`` is its range, or its value)
    moved to the common footing at its token count on ``arch`` under ``vllm_version`` (default: the
    newest known). A lower bound stays a lower bound: only each correction's low end is applied."""
    source = BACKEND_FOOTING.get(point.backend, VLLM_LAYER)
    mode = capture(point.backend, point.tokens_per_rank, arch, vllm_version)
    low, high = point.range_us if point.range_us is not None else (point.latency_us, point.latency_us)
    applied = []
    for c in corrections_for(point.backend, source, mode.mode):
        n = launches(point) if c.kind == ADD_PER_LAUNCH else 1
        if c.kind == SCALE:
            low, high = low * c.low, high * (c.low if point.bound else c.high)
        else:
            low, high = low + n * c.low, high + n * (c.low if point.bound else c.high)
        applied.append(AppliedCorrection(c.key, c.effect(n), c.evidence))
    as_source = point.range_us if point.range_us is not None else (point.latency_us, point.latency_us)
    footing = PointFooting(source, mode.mode, mode.why, as_source, tuple(applied))
    central = low if point.bound else (low + high) / 2
    return Footed(central, low, high if not point.bound else low, footing)


def describe_footing(f: Footing) -> str:
    """One line: what a harness's number includes."""
    return (f"{f.harness}; framework: {f.framework}; launched: {f.capture}; quantize pass: {f.quantize}; "
            f"statistic: {f.statistic} ({f.source})")


def summary(footings, derived: bool = False) -> dict:
    """The footings, corrections and evidence behind a set of :class:`PointFooting` (an answer's
    numbers), each with its source: the answer's ``reference.footing``. ``derived``: a derived
    default is among them (its per-tensor term's evidence is listed too)."""
    used = [f for f in footings if f is not None]
    sources = sorted({f.source for f in used if f.source in FOOTINGS})
    fixes = sorted({c.correction for f in used for c in f.corrections})
    keys = [k for c in fixes for k in CORRECTIONS[c].evidence]
    if derived:
        keys += list(EXTRA_TENSOR_EVIDENCE)
    out = {
        "common": describe_footing(COMMON),
        "capture": {"largest captured step": "; ".join(f"from {r.since}: {r.sm100} tokens per rank on sm100, "
                                                         f"{r.other} elsewhere ({r.source})" for r in MAX_CAPTURE),
                    "eager backends": "; ".join(f"{b}: {src}" for b, src in EAGER_BACKENDS.items())},
        "footings": {k: describe_footing(FOOTINGS[k]) for k in sources},
        "corrections": {k: {"what": CORRECTIONS[k].what, "effect": CORRECTIONS[k].effect(),
                            "backends": list(CORRECTIONS[k].backends), "evidence": list(CORRECTIONS[k].evidence)}
                        for k in fixes},
        "evidence": {k: f"{EVIDENCE[k].says} ({EVIDENCE[k].source})" for k in dict.fromkeys(keys)},
    }
    if derived:
        out["derived_default"] = (f"one launch per NCCL group (the fused all_gather) + each gathered tensor beyond the "
                                  f"first {EXTRA_TENSOR[0]:g}..{EXTRA_TENSOR[1]:g} of the all_gather's latency floor "
                                  f"({', '.join(EXTRA_TENSOR_EVIDENCE)}), on the nccl-tests footing; then "
                                  f"the framework's per-launch cost ({CORRECTIONS['framework-launch'].effect()})")
    return out
