"""Weight formats -> the activation dtype each dispatches on each architecture (data tables).

The activation dtype follows vLLM's kernel choice per architecture (vLLM's ``quant_dtype``: an
NVFP4 W4A4 checkpoint dispatches nvfp4 on Blackwell but bf16 on Hopper, which has no FP4 MoE kernel
and runs the weights weight-only): it is a table, :data:`QUANT_FORMATS`, not code.
compressed-tensors config groups are matched against the patterns in the same table
(:class:`CtScheme`, vLLM's ``CompressedTensorsConfig._is_*`` predicates); ModelOpt's
``quant_algo`` names and the weight-only ``quant_method`` values are tables too.
"""

from __future__ import annotations

from typing import NamedTuple


#: compressed-tensors ``QuantizationArgs`` defaults (a field absent from a config group means this).
CT_ARG_DEFAULTS = {"num_bits": 8, "type": "int", "symmetric": True, "dynamic": False,
                   "group_size": None, "block_structure": None}


class CtScheme(NamedTuple):
    """compressed-tensors quantization args that vLLM runs as one format (its ``_is_*`` predicates).

    Each field of ``weights`` / ``inputs`` must equal the value given (a tuple: any of these).
    ``inputs=None``: the group has no ``input_activations`` (weight-only). Patterns of different
    formats never overlap, so the table order does not matter.
    """

    weights: dict
    inputs: dict | None = None


class QuantFormat(NamedTuple):
    """One weight format: the activation dtype it dispatches on each arch, and why."""

    weight_quant: str
    activation: dict  # {"sm90": dtype, "sm100": dtype}
    why: str
    #: the compressed-tensors config groups that are this format (vLLM 0.32
    #: CompressedTensorsConfig._is_nvfp4_format, _is_mxfp4, _is_fp8_w8a8, _is_fp8_w8a16,
    #: _is_wNa16_group_channel, as CompressedTensorsMoEMethod.get_moe_method applies them)
    compressed_tensors: tuple = ()


#: vLLM's ``_is_nvfp4_format``: 4-bit float, one scale per 16 values plus a global scale.
_CT_NVFP4 = {"type": "float", "num_bits": 4, "strategy": "tensor_group", "group_size": 16, "symmetric": True}
#: vLLM's ``_is_mxfp4``: 4-bit float, one e8m0 scale per 32 values (the OCP MX layout).
_CT_MXFP4 = {"type": "float", "num_bits": 4, "strategy": "group", "group_size": 32, "symmetric": True}
#: vLLM's ``_is_fp8_w8a8`` / ``_is_fp8_w8a16`` weights: static symmetric e4m3.
_CT_FP8_TENSOR = {"type": "float", "num_bits": 8, "strategy": ("tensor", "channel"), "symmetric": True,
                  "dynamic": False}
_CT_FP8_BLOCK128 = {"type": "float", "num_bits": 8, "strategy": "block", "block_structure": [128, 128],
                    "symmetric": True, "dynamic": False}
#: ``_is_fp8_w8a8`` inputs: any dynamic e4m3, or static symmetric per-tensor.
_CT_FP8_INPUTS = (
    {"type": "float", "num_bits": 8, "dynamic": True},
    {"type": "float", "num_bits": 8, "dynamic": False, "symmetric": True, "strategy": "tensor"},
)
#: ``_is_wNa16_group_channel``: static per-channel or per-group integer weights, no input quant.
_CT_INT = {"type": "int", "strategy": ("channel", "group"), "dynamic": False}


#: weight_quant -> QuantFormat. The only place that decides an activation dtype.
QUANT_FORMATS: dict[str, QuantFormat] = {
    q.weight_quant: q
    for q in (
        QuantFormat("bf16", {"sm90": "bf16", "sm100": "bf16"}, "unquantized: vLLM dispatches bf16"),
        QuantFormat("fp16", {"sm90": "fp16", "sm100": "fp16"}, "unquantized fp16 checkpoint"),
        QuantFormat(
            "fp8",
            {"sm90": "fp8", "sm100": "fp8"},
            "FP8 per-tensor/per-token: e4m3 activations",
            tuple(CtScheme(_CT_FP8_TENSOR, inputs) for inputs in _CT_FP8_INPUTS),
        ),
        QuantFormat(
            "fp8_block128",
            {"sm90": "fp8_block128", "sm100": "fp8_block128"},
            "FP8 block [128,128]: e4m3 + one fp32 scale per 128 values",
            tuple(CtScheme(_CT_FP8_BLOCK128, inputs) for inputs in _CT_FP8_INPUTS),
        ),
        QuantFormat(
            "nvfp4",
            {"sm90": "bf16", "sm100": "nvfp4"},
            "NVFP4 W4A4: nvfp4 activations on Blackwell; Hopper has no FP4 kernel and runs "
            "the weights weight-only with bf16 activations",
            (CtScheme(_CT_NVFP4, _CT_NVFP4),),
        ),
        QuantFormat(
            "w4a16_nvfp4",
            {"sm90": "bf16", "sm100": "bf16"},
            "NVFP4 weights only (W4A16): activations stay bf16",
            (CtScheme(_CT_NVFP4, None),),
        ),
        QuantFormat(
            "mxfp4",
            {"sm90": "bf16", "sm100": "bf16"},
            "MXFP4 weights (gpt-oss; compressed-tensors 4-bit float in groups of 32): bf16 "
            "activations on vLLM's default expert kernels, which quantize inside the expert",
            # vLLM's CompressedTensorsW4A4Mxfp4MoEMethod takes MXFP4 weights whatever the input
            # args say, except dynamic fp8 inputs (_is_mxfp4_w4a8_fp8: no format here, refused)
            (CtScheme(_CT_MXFP4, None), CtScheme(_CT_MXFP4, {"type": "float", "num_bits": 4})),
        ),
        QuantFormat(
            "mxfp8",
            {"sm90": "bf16", "sm100": "mxfp8"},
            "MXFP8: mxfp8 activations on Blackwell; Hopper runs the weights with Marlin (bf16 activations)",
        ),
        QuantFormat(
            "fp8_weight_only",
            {"sm90": "bf16", "sm100": "bf16"},
            "FP8 weights only: activations stay bf16",
            (CtScheme({**_CT_FP8_TENSOR, "strategy": ("tensor", "channel", "block")}, None),),
        ),
        QuantFormat(
            "int4_weight_only",
            {"sm90": "bf16", "sm100": "bf16"},
            "4-bit integer weights only (AWQ/GPTQ/W4A16): activations stay bf16",
            (CtScheme({**_CT_INT, "num_bits": 4}, None),),
        ),
        QuantFormat(
            "int8_weight_only",
            {"sm90": "bf16", "sm100": "bf16"},
            "8-bit (or 2/3/5-7-bit) integer weights only: activations stay bf16",
            (CtScheme({**_CT_INT, "num_bits": (2, 3, 5, 6, 7, 8)}, None),),
        ),
    )
}

#: ModelOpt ``quant_algo`` -> weight_quant (vLLM 0.33.0 modelopt.py LINEAR_ALGOS and its
#: ``resolve()``: FP8_PB_WO is 128x128 block weights with dynamic per-128 activations, W8A8).
MODELOPT_ALGOS = {
    "NVFP4": "nvfp4",
    "W4A16_NVFP4": "w4a16_nvfp4",
    "FP8": "fp8",
    "FP8_PER_CHANNEL_PER_TOKEN": "fp8",
    "FP8_PB_WO": "fp8_block128",
    "FP8_BLOCK_SCALES": "fp8_block128",
    "MXFP8": "mxfp8",
}

#: ``quant_method`` values whose activations stay in the model dtype (weight-only int).
WEIGHT_ONLY_INT_METHODS = {
    "awq": "int4_weight_only",
    "awq_marlin": "int4_weight_only",
    "gptq": "int4_weight_only",
    "gptq_marlin": "int4_weight_only",
    "auto-round": "int4_weight_only",
    "bitsandbytes": "int4_weight_only",
}

#: ``activation_scheme`` values vLLM's Fp8Config accepts (its ACTIVATION_SCHEMES).
FP8_ACTIVATION_SCHEMES = ("static", "dynamic")
