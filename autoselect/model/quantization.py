"""The weight format of a checkpoint, read from its quantization blocks as vLLM reads them.

Schemes are recognised from the blocks real checkpoints carry (ModelOpt ``hf_quant_config.json``
and ``quantization_config``, compressed-tensors config groups, block/per-tensor FP8, MXFP4);
anything else is refused with a clear message rather than guessed, because a wrong dtype could put
a model on a backend that corrupts it. Configs vLLM refuses to load (block FP8 with static
activations) or runs with a different dtype in different layers (MIXED_PRECISION experts in
several formats) are refused too. compressed-tensors config groups are matched against the
format table's patterns (vLLM's ``CompressedTensorsConfig._is_*`` predicates).
"""

from __future__ import annotations

from collections import Counter

from autoselect.model.errors import UnsupportedQuantization
from autoselect.model.formats import (CT_ARG_DEFAULTS, FP8_ACTIVATION_SCHEMES, MODELOPT_ALGOS, QUANT_FORMATS,
                                      WEIGHT_ONLY_INT_METHODS)


# --------------------------------------------------------------------------------------
# The entry point
# --------------------------------------------------------------------------------------


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
    field = next((k for k in ("torch_dtype", "dtype") if text.get(k) or config.get(k)), None)
    dtype = str(text.get(field) or config.get(field)) if field else "bfloat16"
    where = f"{field} {dtype}" if field else "no torch_dtype: bf16 assumed"
    return ("fp16" if dtype in ("float16", "half", "fp16") else "bf16"), f"{where}, no quantization_config"


# --------------------------------------------------------------------------------------
# ModelOpt and FP8
# --------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------
# compressed-tensors
# --------------------------------------------------------------------------------------


def _ct_group_for_experts(groups: dict) -> dict | None:
    """The compressed-tensors config group whose targets cover the routed experts."""
    chosen = None
    for group in groups.values():
        if not isinstance(group, dict):
            continue
        targets = [str(t) for t in group.get("targets") or []]
        if any("experts" in t and "shared_expert" not in t for t in targets):
            return group
        if "Linear" in targets and chosen is None:
            chosen = group
    return chosen


def _ct_args(args: dict | None) -> dict | None:
    """A config group's weights / input_activations as compressed-tensors reads them.

    Absent fields take ``QuantizationArgs``' defaults and the strategy is inferred as it infers
    it (no group size: ``tensor``; a positive one: ``group``; -1: ``channel``); ``dynamic``
    (``true`` or ``"local"``) becomes a bool.
    """
    if not args:
        return None
    out = {**CT_ARG_DEFAULTS, **{k: v for k, v in args.items() if v is not None}}
    if out.get("strategy") is None:
        group = out["group_size"]
        out["strategy"] = "tensor" if group is None else "channel" if group == -1 else "group"
    out["dynamic"] = bool(out["dynamic"])
    if isinstance(out["block_structure"], (list, tuple)):
        out["block_structure"] = list(out["block_structure"])
    return out


def _ct_matches(args: dict | None, pattern: dict | None) -> bool:
    if pattern is None or args is None:
        return pattern is None and args is None
    for name, want in pattern.items():
        value = args.get(name)
        if isinstance(want, tuple):
            if value not in want:
                return False
        elif value != want:
            return False
    return True


def compressed_tensors_weight_quant(q: dict, where: str) -> str:
    group = _ct_group_for_experts(q.get("config_groups") or {})
    if group is None:
        raise UnsupportedQuantization(
            f"{where}: compressed-tensors config without a group covering the experts; "
            f"use an explicit shape instead"
        )
    w, a = _ct_args(group.get("weights")), _ct_args(group.get("input_activations"))
    for fmt in QUANT_FORMATS.values():
        if any(_ct_matches(w, p.weights) and _ct_matches(a, p.inputs) for p in fmt.compressed_tensors):
            return fmt.weight_quant
    weights = _ct_describe(w) if w else "missing"
    inputs = _ct_describe(a) if a else "none (weight-only)"
    raise UnsupportedQuantization(
        f"{where}: compressed-tensors weights {weights} with input activations {inputs} match no "
        f"scheme vLLM runs for MoE layers that autoselect knows (NVFP4: 4-bit float tensor_group "
        f"16; MXFP4: 4-bit float group 32; FP8 tensor/channel/block [128, 128]; integer weight-only); "
        f"use an explicit shape instead"
    )


def _ct_describe(args: dict) -> str:
    """``4-bit float (group, group_size 16)`` for messages."""
    layout = args["strategy"]
    if args.get("group_size") not in (None, -1):
        layout += f", group_size {args['group_size']}"
    if args.get("block_structure"):
        layout += f", block {args['block_structure']}"
    if not args.get("symmetric"):
        layout += ", asymmetric"
    return f"{args['num_bits']}-bit {args['type']} ({layout})"
