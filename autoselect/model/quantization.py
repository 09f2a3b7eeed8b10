"""The weight format of a checkpoint, read from its quantization blocks as vLLM reads them.

Schemes are recognised from the blocks real checkpoints carry (ModelOpt ``hf_quant_config.json``
and ``quantization_config``, compressed-tensors config groups, block/per-tensor FP8, MXFP4);
anything else is refused with a clear message rather than guessed, because a wrong dtype could put
a model on a backend that corrupts it. Configs vLLM refuses to load (block FP8 with static
activations) or runs with a different dtype in different layers (MIXED_PRECISION experts in
several formats) are refused too.
"""

from __future__ import annotations

from collections import Counter

from autoselect.model.compressed_tensors import compressed_tensors_weight_quant
from autoselect.model.errors import UnsupportedQuantization
from autoselect.model.formats import FP8_ACTIVATION_SCHEMES, MODELOPT_ALGOS, WEIGHT_ONLY_INT_METHODS


def _modelopt_weight_quant(algo: str | None, quantized_layers: dict | None, where: str) -> str:
    algo = (algo or "").upper()
    if algo == "MIXED_PRECISION":
        expert_algos = Counter(
            str(v.get("quant_algo", "")).upper()
            for k, v in (quantized_layers or {}).items()
            if isinstance(v, dict) and "experts" in k and "shared_expert" not in k
        )
        if not expert_algos:
            raise UnsupportedQuantization(
                f"{where}: ModelOpt MIXED_PRECISION without per-layer entries for the routed "
                f"experts; autoselect cannot tell their format (use an explicit shape instead)"
            )
        formats = {MODELOPT_ALGOS.get(a, a) for a in expert_algos}
        if len(formats) > 1:
            # vLLM quantizes each layer's experts as that layer says, so the dtype on the
            # all2all changes from layer to layer: no one activation dtype is right.
            counts = ", ".join(f"{a}: {n} layer(s)" for a, n in sorted(expert_algos.items()))
            raise UnsupportedQuantization(
                f"{where}: ModelOpt MIXED_PRECISION whose routed experts use different formats "
                f"({counts}): vLLM dispatches a different dtype in different layers and a profile "
                f"has one; use an explicit shape for each dtype instead"
            )
        algo = expert_algos.most_common(1)[0][0]
    if algo in MODELOPT_ALGOS:
        return MODELOPT_ALGOS[algo]
    raise UnsupportedQuantization(
        f"{where}: ModelOpt quant_algo {algo or 'missing'!r} is not supported; known: "
        f"{', '.join(sorted(MODELOPT_ALGOS))} and MIXED_PRECISION"
    )


def _fp8_weight_quant(q: dict, where: str) -> str:
    """``quant_method: fp8`` as vLLM's ``Fp8Config`` reads it, refusing what it refuses to load."""
    scheme = q.get("activation_scheme")
    if scheme not in FP8_ACTIVATION_SCHEMES:
        said = "no activation_scheme" if scheme is None else f"activation_scheme {scheme!r}"
        raise UnsupportedQuantization(
            f"{where}: FP8 with {said}: vLLM refuses to load it (Fp8Config needs 'static' or "
            f"'dynamic'); fix the config or use an explicit shape"
        )
    block = q.get("weight_block_size")
    if block is None:
        return "fp8"
    if list(block) != [128, 128]:
        raise UnsupportedQuantization(
            f"{where}: FP8 block size {list(block)} is not [128, 128]; use an explicit shape"
        )
    if scheme != "dynamic":
        raise UnsupportedQuantization(
            f"{where}: FP8 block {list(block)} weights with activation_scheme 'static': vLLM refuses "
            f"to load it (its Fp8Config runs block-wise FP8 with dynamic activations only); use an "
            f"explicit shape instead"
        )
    return "fp8_block128"


def detect_weight_quant(config: dict, text: dict, hf_quant: dict | None) -> tuple[str, str]:
    """(weight_quant, where it was read) following vLLM's precedence: config.json first."""
    q = config.get("quantization_config") or text.get("quantization_config")
    if isinstance(q, dict) and q:
        where = "config.json quantization_config"
        method = str(q.get("quant_method", "")).lower()
        if method == "fp8":
            return _fp8_weight_quant(q, where), where
        if method.startswith("modelopt"):
            algo = q.get("quant_algo") or (q.get("quantization") or {}).get("quant_algo")
            groups = q.get("config_groups")
            if str(algo).upper() == "NVFP4" and isinstance(groups, dict) and groups and all(
                isinstance(g, dict) and g.get("input_activations") is None for g in groups.values()
            ):
                # vLLM routes an "NVFP4" export without activation quantization through W4A16
                return "w4a16_nvfp4", where
            return _modelopt_weight_quant(algo, q.get("quantized_layers"), where), where
        if method == "compressed-tensors":
            return compressed_tensors_weight_quant(q, where), where
        if method == "mxfp4":
            return "mxfp4", where
        if method == "fbgemm_fp8":
            return "fp8", where
        if method in WEIGHT_ONLY_INT_METHODS:
            return WEIGHT_ONLY_INT_METHODS[method], where
        raise UnsupportedQuantization(
            f"{where}: quant_method {method or 'missing'!r} is not supported (known: fp8, modelopt, "
            f"compressed-tensors, mxfp4, fbgemm_fp8, {', '.join(sorted(WEIGHT_ONLY_INT_METHODS))}); "
            f"use an explicit shape instead"
        )
    if hf_quant is not None:
        where = "hf_quant_config.json"
        producer = str((hf_quant.get("producer") or {}).get("name", "")).lower()
        quant = hf_quant.get("quantization") or {}
        if producer and producer != "modelopt":
            raise UnsupportedQuantization(f"{where}: producer {producer!r} is not supported (only modelopt)")
        return _modelopt_weight_quant(quant.get("quant_algo"), quant.get("quantized_layers"), where), where
    dtype = str(text.get("torch_dtype") or text.get("dtype") or config.get("torch_dtype") or config.get("dtype") or "bfloat16")
    return ("fp16" if dtype in ("float16", "half", "fp16") else "bf16"), f"unquantized ({dtype})"


# --------------------------------------------------------------------------------------
# Entry point
