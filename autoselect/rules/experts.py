"""The expert kernel vLLM's MoE oracle chooses, release by release, and whether it quantizes its own input.

vLLM runs a MoE layer as a prepare step (the all2all's dispatch), an expert kernel and a
finalize step. The expert kernel is chosen at start-up by the weight format's *oracle*: a
priority list of kernel backends (``Fp8MoeBackend``), moved around per arch and deployment, each
backend one or more kernel classes, the first class whose ``is_supported_config`` accepts the
deployment winning. The choice matters to the all2all twice:

* a kernel that quantizes its own input (``expects_unquantized_inputs``) makes vLLM skip the
  quantization before the dispatch (``modular_kernel.py`` passes ``defer_input_quant``), so the
  all2all carries the unquantized bf16 activation: FlashInfer's CUTLASS experts do so for
  block-FP8 weights, and the oracle puts them first on Hopper with EP > 1 (DeepSeek-V3 FP8 on
  H100/H200 dispatches bf16 through allgather_reducescatter and DeepEP high-throughput);
* a monolithic kernel routes inside the kernel: allgather_reducescatter then gathers the router
  logits instead of top-k ids and weights (TensorRT-LLM's fp8 experts on Blackwell).

:data:`ORACLES` holds each modelled oracle's priority order and moves, :data:`EXPERT_KERNELS`
one row per kernel class with what its ``is_supported_config`` accepts for those weight
formats; :func:`expert_kernel` evaluates them for one deployment (or takes ``--moe-backend``).
Modelled: the fp8 oracle for block-FP8 weights (``fp8_block128``), the only format whose default
kernel changes what crosses the wire. The other formats' kernels quantize before the dispatch
(or the activation is bf16 already: :data:`autoselect.model.formats.QUANT_FORMATS`); for them
:func:`expert_kernel` returns None and the wire dtype is the prepare step's alone.

Not modelled, each a start-up setting autoselect does not see: ``VLLM_USE_DEEP_GEMM`` /
``VLLM_MOE_USE_DEEP_GEMM`` and the model types for which vLLM turns DeepGEMM off (they only
reorder kernels that quantize before the dispatch), LoRA (Triton then defers), the kernels' shape
and activation checks, the routing methods the monolithic TensorRT-LLM kernel takes (DeepSeek-V3's
grouped sigmoid routing is one of them), ROCm and XPU. ``scripts/read_release.py`` reads the
priority order, the moves, the classes per backend, the layouts, what each class accepts and
which defer, and compares them with these rows.
"""

from __future__ import annotations

from typing import NamedTuple

from autoselect.rules.versions import parse_version, version_in

#: The releases whose source the rows below were read from.
READ_IN = ("0.32.0", "0.33.0", "0.34.0")

_FM = "vllm/model_executor/layers/fused_moe"
_ORACLE = f"{_FM}/oracle/fp8.py"
_EX = f"{_FM}/experts"

# The activation layouts (vLLM's FusedMoEActivationFormat) a prepare step hands the experts.
STANDARD, BATCHED, PADDED = "standard", "batched_experts", "padded_standard"

#: What each all2all backend's prepare step produces (every other backend: STANDARD).
_LAYOUTS = (
    # (backend, layout, since, until, source)
    ("deepep_low_latency", BATCHED, "0.32.0", None,
     f"{_FM}/config.py:1057-1058 (0.32.0), :1066-1067 (0.33.0) use_batched_activation_format; "
     ":1468-1484 (0.34.0) activation_format"),
    ("nixl_ep", BATCHED, "0.32.0", None, "same lines as deepep_low_latency"),
    ("deepep_v2", PADDED, "0.34.0", None,
     f"{_FM}/config.py:1481-1482 (0.34.0) use_deepep_v2_kernels -> PaddedStandard (0.32.0-0.33.0: standard)"),
)

#: The quantization the oracle keys on, per modelled weight format (vLLM's QuantKey names).
QUANT_KEYS = {"fp8_block128": "kFp8Static128BlockSym x kFp8Dynamic128Sym"}

# Deployment conditions a move or a kernel row tests.
EP = "ep_size > 1"
NO_EP = "ep_size == 1"
DEEPEP_V2 = "use_deepep_v2_kernels"


class Move(NamedTuple):
    """``backend`` goes to the front of the priority list on ``arch`` for ``formats`` when ``when``."""

    backend: str
    arch: str  # "sm90" (is_device_capability(90)) | "sm100" (is_device_capability_family(100))
    formats: frozenset
    when: str  # EP | NO_EP | DEEPEP_V2
    source: str


class Oracle(NamedTuple):
    """One oracle's priority order in a release range, its moves on NVIDIA GPUs (applied in order,
    each to the front) and the kernel classes of each backend, in the order vLLM probes them."""

    name: str
    formats: frozenset  # the weight formats autoselect models it for
    since: str
    until: str | None
    order: tuple[str, ...]
    moves: tuple[Move, ...]
    kernels: dict  # backend -> (class, ...), the NVIDIA GPUs' (AITER, XPU, CPU, HPC: other platforms)
    removed: tuple[str, ...]  # backends taken out before the loop (allow_vllm_cutlass False)
    weight_only: tuple[str, ...]  # backends given a W8A16 quant config: nothing is quantized before the dispatch
    source: str


_ORDER_SOURCE = (f"{_ORACLE} _get_priority_backends: _AVAILABLE_BACKENDS :86-102 (0.32.0), :88-104 (0.33.0), "
                 ":94-110 (0.34.0); the loop over it :515 (0.32.0), :526 (0.33.0), :499 (0.34.0), first supported "
                 "class wins (oracle/base.py try_backend)")

ORACLES: tuple[Oracle, ...] = (
    Oracle(
        "fp8", frozenset({"fp8_block128"}), "0.32.0", None,
        order=("AITER", "FLASHINFER_TRTLLM", "FLASHINFER_CUTLASS", "DEEPGEMM", "VLLM_CUTLASS", "TRITON", "MARLIN",
               "HUMMING", "BATCHED_DEEPGEMM", "BATCHED_VLLM_CUTLASS", "BATCHED_TRITON", "XPU", "CPU_W8A8", "CPU",
               "HPC"),
        moves=(
            Move("FLASHINFER_TRTLLM", "sm100", frozenset({"fp8_block128"}), DEEPEP_V2,
                 f"{_ORACLE}:111-118 (0.32.0), :113-120 (0.33.0), :119-126 (0.34.0) 'TrtLLM's tile-level skipping "
                 "avoids wasted compute on padding rows'"),
            Move("FLASHINFER_CUTLASS", "sm90", frozenset({"fp8_block128"}), EP,
                 f"{_ORACLE}:121-128 (0.32.0), :123-130 (0.33.0), :129-136 (0.34.0) 'On Hopper for Block Fp8, "
                 "prefer Triton for TP and FI CUTLASS for EP'"),
            Move("TRITON", "sm90", frozenset({"fp8_block128"}), NO_EP,
                 f"{_ORACLE}:129-130 (0.32.0), :131-132 (0.33.0), :137-138 (0.34.0) (else branch)"),
        ),
        kernels={
            "FLASHINFER_TRTLLM": ("TrtLlmFp8ExpertsMonolithic", "TrtLlmFp8ExpertsModular"),
            "FLASHINFER_CUTLASS": ("FlashInferExperts",),
            "DEEPGEMM": ("TritonOrDeepGemmExperts",),
            "VLLM_CUTLASS": ("TritonOrCutlassExperts",),
            "TRITON": ("TritonExperts",),
            "MARLIN": ("MarlinExperts",),
            "HUMMING": ("BatchedHummingGroupedExperts", "HummingGroupedExperts", "HummingIndexedExperts"),
            "BATCHED_DEEPGEMM": ("BatchedDeepGemmExperts",),
            "BATCHED_VLLM_CUTLASS": ("CutlassBatchedExpertsFp8",),
            "BATCHED_TRITON": ("BatchedTritonExperts",),
        },
        removed=("VLLM_CUTLASS", "BATCHED_VLLM_CUTLASS"),
        weight_only=("MARLIN", "CPU"),
        source=_ORDER_SOURCE + f"; backend_to_kernel_cls {_ORACLE}:146 (0.32.0), :148 (0.33.0), :154 (0.34.0); "
               f"VLLM_CUTLASS removed unless allow_vllm_cutlass (:510 / :521 / :494; "
               "quantization/fp8.py passes False)",
    ),
)

#: ``--moe-backend`` value -> the fp8 oracle's backend (``map_fp8_backend``, oracle/fp8.py).
MOE_BACKEND_VALUES = {"triton": "TRITON", "deep_gemm": "DEEPGEMM", "cutlass": "VLLM_CUTLASS",
                      "flashinfer_trtllm": "FLASHINFER_TRTLLM", "flashinfer_cutlass": "FLASHINFER_CUTLASS",
                      "marlin": "MARLIN", "humming": "HUMMING", "aiter": "AITER", "hpc": "HPC"}
#: A batched prepare step takes the batched variant of an explicit backend (select_fp8_moe_backend).
_BATCHED_VARIANT = {"DEEPGEMM": "BATCHED_DEEPGEMM", "TRITON": "BATCHED_TRITON",
                    "VLLM_CUTLASS": "BATCHED_VLLM_CUTLASS"}

#: all2all backends whose prepare step is vLLM's allgather_reducescatter (use_ag_rs_all2all_kernels).
AGRS = "allgather_reducescatter"
_FI = frozenset({"flashinfer_nvlink_one_sided", "flashinfer_nvlink_two_sided"})


class ExpertKernel(NamedTuple):
    """One kernel class in a release range: what its ``is_supported_config`` accepts for the
    modelled weight formats, and whether it quantizes its own input.

    ``archs``: the archs where ``_supports_current_device`` and the quantization scheme hold
    (empty: another platform); ``layouts``: the prepare layouts it consumes (PaddedStandard takes
    standard too); ``accepts``: the all2all backends its ``_supports_parallel_config`` takes
    (None: every one); ``eplb`` / ``sequence_parallel``: whether it runs with EPLB / sequence
    parallel MoE; ``monolithic``: routes inside the kernel (the prepare step moves router logits);
    ``defers``: the weight formats for which ``expects_unquantized_inputs`` is true.
    """

    name: str
    since: str
    until: str | None
    archs: frozenset
    layouts: frozenset
    accepts: frozenset | None
    eplb: bool
    sequence_parallel: bool
    monolithic: bool
    defers: frozenset
    source: str


_ALL = None
_NOT_FI = frozenset({AGRS, "deepep_high_throughput", "deepep_low_latency", "deepep_v2", "nixl_ep", "moonep", "mori",
                     "mori_high_throughput", "mori_low_latency"})
_S, _B, _P = frozenset({STANDARD}), frozenset({BATCHED}), frozenset({PADDED, STANDARD})
_BOTH = frozenset({"sm90", "sm100"})

EXPERT_KERNELS: tuple[ExpertKernel, ...] = (
    ExpertKernel("TrtLlmFp8ExpertsMonolithic", "0.32.0", None, frozenset({"sm100"}), _S, frozenset({AGRS}),
                 False, False, True, frozenset(),
                 f"{_EX}/trtllm_fp8_moe.py: _supports_current_device :165-172 (0.32.0-0.33.0), :174-181 (0.34.0) "
                 "is_device_capability_family(100); _supports_parallel_config :189-196 / :198-205 'Monolithic "
                 "kernel so only use with naive DP/EP and TP' (no all2all kernels, or allgather_reducescatter; no "
                 "EPLB, no sequence parallel); dispatch_router_logits: prepare_finalize/naive_dp_ep.py:194 (0.34.0)"),
    ExpertKernel("TrtLlmFp8ExpertsModular", "0.32.0", "0.34.0", frozenset({"sm100"}), _S,
                 frozenset({AGRS, "deepep_v2"}) | _FI, False, True, False, frozenset(),
                 f"{_EX}/trtllm_fp8_moe.py:203-210 (0.32.0-0.33.0) _supports_parallel_config: "
                 "allgather_reducescatter, deepep_v2, FlashInfer one- and two-sided; no EPLB"),
    ExpertKernel("TrtLlmFp8ExpertsModular", "0.34.0", None, frozenset({"sm100"}), _P,
                 frozenset({AGRS, "deepep_v2"}) | _FI, False, True, False, frozenset(),
                 f"{_EX}/trtllm_fp8_moe.py:216-217 (0.34.0) PaddedStandard, :220-227 _supports_parallel_config"),
    ExpertKernel("FlashInferExperts", "0.32.0", None, frozenset({"sm90"}), _S, _ALL, True, True, False,
                 frozenset({"fp8_block128"}),
                 f"{_EX}/flashinfer_cutlass_moe.py: expects_unquantized_inputs :124-125 (0.32.0-0.33.0), :131-132 "
                 "(0.34.0) 'use_fp8_w8a8 and is_block_quantized'; block fp8 only on is_device_capability(90) "
                 ":168-170 / :175-177; _supports_parallel_config True :194 / :201; standard :202 / :209"),
    ExpertKernel("TritonOrDeepGemmExperts", "0.32.0", "0.34.0", _BOTH, _S, _NOT_FI, True, True, False, frozenset(),
                 f"{_EX}/fallback.py:86-92 (both classes' parallel configs); {_EX}/triton_moe.py:185-189 (0.32.0), "
                 ":187-191 (0.33.0) not FlashInfer one-/two-sided"),
    ExpertKernel("TritonOrDeepGemmExperts", "0.34.0", None, _BOTH, _P, _NOT_FI, True, True, False, frozenset(),
                 f"{_EX}/fallback.py:48-63 (0.34.0) the narrower format of DeepGemmExperts and TritonExperts, both "
                 f"PaddedStandard ({_EX}/deep_gemm_moe.py:166-167, triton_moe.py:144-145); :99-105; triton_moe.py:225-229"),
    ExpertKernel("TritonOrCutlassExperts", "0.32.0", None, _BOTH, _S,
                 frozenset({AGRS, "deepep_low_latency", "deepep_v2", "nixl_ep"}), True, True, False, frozenset(),
                 f"{_EX}/triton_cutlass_moe.py:19 (CutlassExpertsFp8 or TritonExperts); {_EX}/cutlass_moe.py:415 "
                 "(0.32.0), :417 (0.33.0), :423 (0.34.0) not DeepEP high-throughput nor FlashInfer; the fp8 "
                 "checkpoints' quantization method leaves it out (allow_vllm_cutlass False)"),
    ExpertKernel("TritonExperts", "0.32.0", "0.34.0", _BOTH, _S, _NOT_FI, True, True, False, frozenset(),
                 f"{_EX}/triton_moe.py:104-105, :185-189 (0.32.0); :106-107, :187-191 (0.33.0)"),
    ExpertKernel("TritonExperts", "0.34.0", None, _BOTH, _P, _NOT_FI, True, True, False, frozenset(),
                 f"{_EX}/triton_moe.py:144-145, :225-229 (0.34.0)"),
    ExpertKernel("MarlinExperts", "0.32.0", None, _BOTH, _S, _NOT_FI | {"flashinfer_nvlink_one_sided"}, True, True,
                 False, frozenset({"fp8_block128"}),
                 f"{_EX}/marlin_moe.py:624-628 (0.32.0), :629-633 (0.33.0), :576-580 (0.34.0) not two-sided; "
                 "weight-only: the oracle gives it fp8_w8a16_moe_quant_config, no activation quantization, so the "
                 f"prepare step moves bf16 ({_ORACLE}:747 (0.32.0), :758 (0.33.0), :712 (0.34.0))"),
    ExpertKernel("BatchedHummingGroupedExperts", "0.32.0", None, _BOTH, _B, _ALL, True, True, False, frozenset(),
                 f"{_EX}/fused_humming_moe.py: block fp8 w8a8 in SUPPORTED_W_A :349 (0.32.0), :352 (0.33.0), :351 "
                 "(0.34.0); expects_unquantized_inputs is 'not _prequantizes_dispatch_activation()', false for "
                 "block fp8 (:383-397 / :386-400 / :385-399); BatchedExperts :994-995 / :1029-1030 / :1017-1018; "
                 "humming-kernels is a requirement of the vLLM wheel (0.34.0 METADATA)"),
    ExpertKernel("HummingGroupedExperts", "0.32.0", "0.34.0", _BOTH, _S, _ALL, True, True, False, frozenset(),
                 f"{_EX}/fused_humming_moe.py:857 (0.32.0), :889 (0.33.0); :417 / :420 every parallel config"),
    ExpertKernel("HummingGroupedExperts", "0.34.0", None, _BOTH, _P, _ALL, True, True, False, frozenset(),
                 f"{_EX}/fused_humming_moe.py:877, :419 (0.34.0)"),
    ExpertKernel("HummingIndexedExperts", "0.32.0", "0.34.0", _BOTH, _S, _ALL, True, True, False, frozenset(),
                 f"{_EX}/fused_humming_moe.py:674 (0.32.0), :677 (0.33.0)"),
    ExpertKernel("HummingIndexedExperts", "0.34.0", None, _BOTH, _P, _ALL, True, True, False, frozenset(),
                 f"{_EX}/fused_humming_moe.py:665, :670-671 PaddedStandard (0.34.0)"),
    ExpertKernel("BatchedDeepGemmExperts", "0.32.0", None, _BOTH, _B, _ALL, True, True, False, frozenset(),
                 f"{_EX}/batched_deep_gemm_moe.py:324-325 BatchedExperts, :348-349 every parallel config "
                 "(0.32.0-0.34.0)"),
    ExpertKernel("CutlassBatchedExpertsFp8", "0.32.0", None, _BOTH, _B, _ALL, True, True, False, frozenset(),
                 f"{_EX}/cutlass_moe.py:450-454 (0.32.0), :452-456 (0.33.0), :458-462 (0.34.0); left out with "
                 "VLLM_CUTLASS"),
    ExpertKernel("BatchedTritonExperts", "0.32.0", None, _BOTH, _B, _ALL, True, True, False, frozenset(),
                 f"{_EX}/fused_batched_moe.py:801-802, :856-857 (0.32.0); :803-804, :858-859 (0.33.0); :957-958, "
                 ":1012-1013 (0.34.0)"),
)


class Expert(NamedTuple):
    """The kernel vLLM runs for one backend and deployment, and why."""

    kernel: str  # the class
    backend: str  # the oracle's backend (Fp8MoeBackend)
    defers: bool  # it takes the activation unquantized: the prepare step dispatches it so
    monolithic: bool
    chosen_by: str  # "vLLM's oracle" | "--moe-backend X"
    source: str
    read: bool = True  # the rows were read for the release asked about

    def describe(self) -> str:
        """``FlashInferExperts (FLASHINFER_CUTLASS, takes the activation unquantized)``."""
        what = [self.backend] + (["takes the activation unquantized"] if self.defers else []) + (
            ["monolithic: routes inside the kernel"] if self.monolithic else [])
        return f"{self.kernel} ({', '.join(what)})"

    def to_dict(self) -> dict:
        """A JSON-ready dict."""
        return {"kernel": self.kernel, "backend": self.backend, "defers_input_quant": self.defers,
                "monolithic": self.monolithic, "chosen_by": self.chosen_by, "source": self.source,
                "read_for_release": self.read}


class UnknownMoeBackend(ValueError):
    "A --moe-backend value the modelled oracle has no backend for (vLLM refuses it for this format)."


def _nearest(rows, vllm_version: str):
    """The rows in range for ``vllm_version`` and whether they were read for it (else the nearest range's)."""
    here = [r for r in rows if version_in(vllm_version, r.since, r.until)]
    if here or not rows:
        return here, True
    older = parse_version(vllm_version)[:4] < min(parse_version(r.since)[:4] for r in rows)
    edge = (min if older else max)(parse_version(r.since)[:4] for r in rows)
    return [r for r in rows if parse_version(r.since)[:4] == edge], False


def layout(backend: str, vllm_version: str) -> str:
    """The activation layout ``backend``'s prepare step hands the experts on ``vllm_version``."""
    rows = [r for r in _LAYOUTS if r[0] == backend and version_in(vllm_version, r[2], r[3])]
    return rows[0][1] if rows else STANDARD


def oracle_for(weight_quant: str, vllm_version: str) -> tuple[Oracle | None, bool]:
    """The :data:`ORACLES` row for ``weight_quant`` on ``vllm_version`` (None: not modelled) and whether it was read."""
    rows, read = _nearest([o for o in ORACLES if weight_quant in o.formats], vllm_version)
    return (rows[0] if rows else None), read


def priority(oracle: Oracle, weight_quant: str, gpu_arch: str, backend: str, ep_size: int) -> list[str]:
    """The oracle's backends in the order it tries them for this deployment (moves applied, removals made)."""
    order = list(oracle.order)
    for m in oracle.moves:
        applies = {EP: ep_size > 1, NO_EP: ep_size == 1, DEEPEP_V2: backend == "deepep_v2"}[m.when]
        if m.arch == gpu_arch and weight_quant in m.formats and applies:
            order.insert(0, order.pop(order.index(m.backend)))
    return [b for b in order if b not in oracle.removed]


def _kernel(name: str, vllm_version: str) -> ExpertKernel | None:
    rows = [k for k in EXPERT_KERNELS if k.name == name and version_in(vllm_version, k.since, k.until)]
    if not rows:
        rows, _ = _nearest([k for k in EXPERT_KERNELS if k.name == name], vllm_version)
    return rows[0] if rows else None


def supports(k: ExpertKernel, gpu_arch: str, backend: str, vllm_version: str, *, eplb: bool,
             sequence_parallel: bool) -> bool:
    """Whether ``k`` accepts this deployment (``is_supported_config``, as far as the row models it)."""
    return (gpu_arch in k.archs and layout(backend, vllm_version) in k.layouts
            and (k.accepts is None or backend in k.accepts) and (k.eplb or not eplb)
            and (k.sequence_parallel or not sequence_parallel))


def expert_kernel(weight_quant: str, gpu_arch: str, backend: str, vllm_version: str, *, ep_size: int = 2,
                  eplb: bool = False, sequence_parallel: bool = False, moe_backend: str | None = None) -> Expert | None:
    """The kernel vLLM ``vllm_version`` runs for ``weight_quant`` experts on ``gpu_arch`` behind
    ``backend`` (None: a weight format :data:`ORACLES` does not model, or no modelled class accepts).

    ``moe_backend`` (a line's ``--moe-backend`` other than ``auto``) names the oracle's backend
    itself (its batched variant behind a batched prepare step); vLLM refuses to start when no
    class of it accepts, and so does this (None). ``ep_size`` decides the Hopper move (EP > 1:
    FlashInfer CUTLASS first).
    """
    oracle, read = oracle_for(weight_quant, vllm_version)
    if oracle is None:
        return None
    if moe_backend not in (None, "auto"):
        named = MOE_BACKEND_VALUES.get(moe_backend)
        if named is None:
            raise UnknownMoeBackend(f"--moe-backend {moe_backend} is no {oracle.name} MoE backend vLLM knows "
                                    f"({', '.join(MOE_BACKEND_VALUES)})")
        if layout(backend, vllm_version) == BATCHED:
            named = _BATCHED_VARIANT.get(named, named)
        order, chosen_by = [named], f"--moe-backend {moe_backend}"
    else:
        order, chosen_by = priority(oracle, weight_quant, gpu_arch, backend, ep_size), "vLLM's oracle"
    for b in order:
        for name in oracle.kernels.get(b, ()):
            k = _kernel(name, vllm_version)
            if k is not None and supports(k, gpu_arch, backend, vllm_version, eplb=eplb,
                                          sequence_parallel=sequence_parallel):
                return Expert(name, b, weight_quant in k.defers, k.monolithic, chosen_by,
                              f"{oracle.source}; {k.source}", read)
    return None


def not_read_note(vllm_version: str) -> str:
    """The line an answer carries when ``vllm_version`` is outside the releases the rows were read in."""
    return (f"the expert kernel vLLM chooses was read in vLLM {', '.join(READ_IN)}; vLLM {vllm_version} is judged "
            "by that reading")
