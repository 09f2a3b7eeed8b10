"""Worker side: how vLLM's own quantization classes read a checkpoint (runs inside vLLM's interpreter).

:func:`read_quantization` finds the checkpoint's quantization config as vLLM does (its
``get_config``, else the raw JSON files), lets vLLM normalise it and pick the method
(``ModelConfig._verify_quantization``), builds vLLM's config class from it and names the scheme
from that class's own attributes and predicates. Standard library, vLLM and this folder's
:mod:`protocol` only (see :mod:`worker`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

if __package__:  # imported as autoselect.bridge.worker_quant (the client's tests)
    from .protocol import QuantAnswer, first_line, jsonable
else:  # imported by worker.py run as a script: this folder is on sys.path
    from protocol import QuantAnswer, first_line, jsonable

#: A routed-expert layer in a ModelOpt MIXED_PRECISION ``quantized_layers`` prefix.
_ROUTED_EXPERTS = re.compile(r"\.experts(\.|$)")
#: Where a checkpoint's quantization section may sit: (attribute of the hf config, source name).
_HF_CONFIG_SECTIONS = (("quantization_config", "config"), ("text_config.quantization_config", "text_config"),
                       ("compression_config", "compression_config"))


def read_quantization(model_dir: str, modelopt_algos: dict) -> QuantAnswer:
    """vLLM's reading of ``model_dir``'s quantization config (config files only, no weights).

    :param modelopt_algos: ModelOpt ``quant_algo`` -> scheme (the client's model table).
    A config vLLM refuses is an answer (``ok=False`` with vLLM's message), not an exception.
    """
    from vllm.model_executor.layers import quantization as q

    quant_cfg, hf_config, source, notes = _quant_config(model_dir)
    base = dict(model_dir=model_dir, source=source)
    if quant_cfg is not None:
        try:
            quant_cfg = _normalized(quant_cfg)
        except ValueError as e:  # vLLM refuses an unknown ModelOpt algo here
            return QuantAnswer(**base, ok=False, error=f"ValueError: {first_line(e)}", notes=tuple(notes))
    if quant_cfg is None:
        return QuantAnswer(**base, ok=True, scheme="unquantized", notes=tuple(notes),
                           torch_dtype=jsonable(_dtype_of(hf_config)))
    method = _detect_method(quant_cfg, hf_config, notes)
    try:
        config = q.get_quantization_config(method).from_config(quant_cfg)
    except Exception as e:  # vLLM refusing the checkpoint is the answer
        return QuantAnswer(**base, ok=False, method=method, error=f"{type(e).__name__}: {first_line(e)}",
                           notes=tuple(notes))
    scheme, detail = scheme_of(config, modelopt_algos)
    return QuantAnswer(**base, ok=True, method=method, config_class=type(config).__name__, scheme=scheme,
                       detail=detail, notes=tuple(notes))


def _quant_config(model_dir):
    """(quantization config dict, hf config or None, where it came from, notes)."""
    notes = []
    hf_config = None
    try:
        from vllm.transformers_utils.config import get_config

        hf_config = get_config(model_dir, trust_remote_code=False)
    except Exception as e:  # model types transformers does not know (kimi_k2 ...)
        notes.append(f"vLLM's get_config could not load the config ({type(e).__name__}: "
                     f"{first_line(e)[:160]}); read its quantization section directly")
    if hf_config is not None:
        for path, source in _HF_CONFIG_SECTIONS:
            value = hf_config
            for name in path.split("."):
                value = getattr(value, name, None) if value is not None else None
            if value is not None:
                return _as_dict(value), hf_config, source, notes
        return None, hf_config, None, notes
    raw = json.loads((Path(model_dir) / "config.json").read_text())
    for value, source in ((raw.get("quantization_config"), "config.json"),
                          ((raw.get("text_config") or {}).get("quantization_config"), "config.json text_config"),
                          (raw.get("compression_config"), "config.json compression_config")):
        if value is not None:
            return value, None, source, notes
    hf_quant = Path(model_dir) / "hf_quant_config.json"
    if hf_quant.exists():
        return json.loads(hf_quant.read_text()), None, "hf_quant_config.json", notes
    return None, None, None, notes


def _detect_method(quant_cfg, hf_config, notes) -> str:
    """Run vLLM's own ``ModelConfig._verify_quantization`` on just this config."""
    from vllm.config.model import ModelConfig

    shim = SimpleNamespace(
        quantization=None,
        model_arch_config=SimpleNamespace(quantization_config=quant_cfg),
        hf_config=hf_config,
        allow_deprecated_quantization=True,
    )
    try:
        ModelConfig._verify_quantization(shim)
        return shim.quantization
    except Exception as e:  # another vLLM version: fall back to the override hooks
        notes.append(f"ModelConfig._verify_quantization unusable here ({type(e).__name__}: "
                     f"{first_line(e)[:160]}); used the override hooks directly")
    from vllm.model_executor.layers import quantization as q

    for name in q.QUANTIZATION_METHODS:
        try:
            override = q.get_quantization_config(name).override_quantization_method(quant_cfg, None)
        except TypeError:
            continue
        if override:
            return override
    return quant_cfg.get("quant_method")


def _normalized(quant_cfg: dict) -> dict:
    """vLLM's own normalisation (ModelOpt ``producer`` files get their ``quant_method``)."""
    quant_cfg = json.loads(json.dumps(quant_cfg))  # vLLM edits it in place
    try:
        from vllm.transformers_utils.model_arch_config_convertor import ModelArchConfigConvertorBase
    except ImportError:  # older vLLM: configs are used as read
        return quant_cfg
    normalize = getattr(ModelArchConfigConvertorBase, "_normalize_quantization_config", None)
    if normalize is None:
        return quant_cfg
    return normalize(None, SimpleNamespace(quantization_config=quant_cfg)) or quant_cfg


def _as_dict(value):
    if isinstance(value, dict):
        return value
    to_dict = getattr(value, "to_dict", None)
    return to_dict() if callable(to_dict) else dict(vars(value))


def _dtype_of(hf_config):
    if hf_config is None:
        return None
    for name in ("dtype", "torch_dtype"):
        value = getattr(hf_config, name, None)
        if value is not None:
            return str(value).replace("torch.", "")
    return None


# --------------------------------------------------------------------------------------
# Naming the scheme from vLLM's config class
# --------------------------------------------------------------------------------------


def scheme_of(config, modelopt_algos: dict):
    """``(scheme, detail)`` for a vLLM quantization config instance, from vLLM's own attributes.

    Names match autoselect's weight formats where one exists (``nvfp4``, ``w4a16_nvfp4``,
    ``fp8``, ``fp8_block128``, ``mxfp4``, ...); anything else is spelled ``other:...``.
    """
    name = type(config).__name__
    if name == "ModelOptNvFp4Config":
        algo = str(getattr(config, "quant_method", "NVFP4"))
        return ("w4a16_nvfp4" if "W4A16" in algo else "nvfp4"), {"quant_algo": algo}
    if name == "ModelOptFp8Config":
        algo = str(getattr(config, "quant_method", "FP8")).upper()
        return modelopt_algos.get(algo, "fp8"), {"quant_algo": algo}
    if name == "ModelOptMxFp8Config":
        return "mxfp8", {}
    if name == "ModelOptMixedPrecisionConfig":
        return _mixed_scheme(config, modelopt_algos)
    if name == "Fp8Config":
        block = getattr(config, "weight_block_size", None)
        return (_block_scheme(block) if block else "fp8"), {
            "weight_block_size": jsonable(block),
            "activation_scheme": getattr(config, "activation_scheme", None),
        }
    if name in ("Mxfp4Config", "GptOssMxfp4Config"):
        return "mxfp4", {}
    if name == "CompressedTensorsConfig":
        return _compressed_tensors_scheme(config)
    return f"other:{name}", {}


def _mixed_scheme(config, modelopt_algos: dict):
    """The routed experts' algorithm of a ModelOpt MIXED_PRECISION config."""
    algos = sorted({
        str(info.get("quant_algo", "")).upper()
        for prefix, info in (getattr(config, "quantized_layers", {}) or {}).items()
        if _ROUTED_EXPERTS.search(prefix)
    })
    detail = {"expert_quant_algos": algos}
    if len(algos) == 1 and algos[0] in modelopt_algos:
        return modelopt_algos[algos[0]], detail
    return f"other:modelopt_mixed experts {'/'.join(algos) or 'unquantized'}", detail


def _block_scheme(block) -> str:
    """fp8 block scheme name: the DeepSeek [128, 128] layout, or the size spelled out."""
    block = [int(b) for b in block]
    return "fp8_block128" if block == [128, 128] else f"fp8_block{'x'.join(map(str, block))}"


def _args_dict(args):
    if args is None:
        return None
    out = {}
    for name in ("type", "num_bits", "strategy", "group_size", "dynamic", "symmetric", "block_structure"):
        value = getattr(args, name, None)
        out[name] = jsonable(getattr(value, "value", value))
    return out


def _compressed_tensors_scheme(config):
    schemes = getattr(config, "target_scheme_map", {}) or {}
    target = "Linear" if "Linear" in schemes else next(iter(schemes), None)
    if target is None:
        return "bf16", {"target": None}
    entry = schemes[target]
    weights, inputs = entry.get("weights"), entry.get("input_activations")
    detail = {"target": target, "weights": _args_dict(weights), "input_activations": _args_dict(inputs)}
    # The predicates vLLM's CompressedTensorsMoEMethod.get_moe_method uses, in its order.
    if hasattr(config, "_is_mxfp4_w4a8_fp8") and config._is_mxfp4_w4a8_fp8(weights, inputs):
        return "other:mxfp4 weights with dynamic fp8 input activations (W4A8)", detail
    if hasattr(config, "_is_mxfp4") and config._is_mxfp4(weights):
        return "mxfp4", detail
    if hasattr(config, "_is_mxfp8") and config._is_mxfp8(weights):
        return "mxfp8", detail
    if hasattr(config, "_is_wNa16_group_channel") and config._is_wNa16_group_channel(weights, inputs):
        return f"int{weights.num_bits}_weight_only", detail
    if config._is_nvfp4_format(weights):
        if inputs is None:
            return "w4a16_nvfp4", detail
        if config._is_nvfp4_format(inputs):
            return "nvfp4", detail
        return "other:nvfp4 weights with non-nvfp4 input activations (vLLM refuses these)", detail
    if config._is_fp8_w8a8(weights, inputs):
        strategy = getattr(weights.strategy, "value", weights.strategy)
        if strategy == "block":
            return _block_scheme(weights.block_structure or []), detail
        return "fp8", detail
    if getattr(weights, "num_bits", None) == 8 and str(getattr(weights.type, "value", weights.type)) == "float" \
            and inputs is None:
        return "fp8_weight_only", detail
    return f"other:compressed-tensors {target}", detail
