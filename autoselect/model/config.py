"""A checkpoint's config.json fields: their names, their validation, the MoE layer count.

:func:`text_config` finds the dict that holds the language model's fields (the top level, or a
multimodal config's nested one); :func:`check_config` refuses every field the readers use that
is of the wrong type or out of range with one error naming it, so a hostile or broken
config.json never becomes a traceback or a wrong answer; then :func:`first_field` reads a shape
field under its family's name and :func:`count_moe_layers` counts the layers with routed experts.
"""

from __future__ import annotations

import json
from typing import Any

from autoselect.model.errors import ModelConfigInvalid, UnsupportedQuantization
from autoselect.options import MAX_EXPERTS, MAX_HIDDEN

#: Routed-expert, top-k and hidden-size field names, first match wins: DeepSeek-V3 / Kimi-K2 / GLM-4.5 say
#: ``n_routed_experts``, Qwen3-MoE ``num_experts``, Mixtral and gpt-oss ``num_local_experts`` (gpt-oss also
#: ``experts_per_token``); Llama-4 keeps them under ``text_config``.
EXPERT_FIELDS = ("n_routed_experts", "num_experts", "num_local_experts", "moe_num_experts")
TOP_K_FIELDS = ("num_experts_per_tok", "experts_per_token", "moe_topk")
HIDDEN_FIELDS = ("hidden_size", "d_model", "n_embd")
#: Where multimodal checkpoints keep the language model's config.
TEXT_CONFIG_KEYS = ("text_config", "language_config", "llm_config")


def text_config(config: dict) -> dict:
    """The dict that holds the language model's fields (top level, or a nested text config)."""
    if any(k in config for k in EXPERT_FIELDS) or any(k in config for k in HIDDEN_FIELDS):
        return config
    for key in TEXT_CONFIG_KEYS:
        if isinstance(config.get(key), dict):
            return config[key]
    return config


def first_field(config: dict, names: tuple[str, ...]):
    """``(name, value)`` of the first of ``names`` that ``config`` sets (not null), else ``(None, None)``."""
    for name in names:
        if config.get(name) is not None:
            return name, config[name]
    return None, None


# --------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------


#: The most decoder layers a config may declare (the largest MoE checkpoints have ~100):
#: layer counting walks the layers, so a value like 1e11 must be refused, not counted.
MAX_LAYERS = 4096

#: integer fields -> (lowest, highest) value a real checkpoint can have; null means absent
CONFIG_INTS: dict[str, tuple[int, int]] = {
    **{f: (1, MAX_HIDDEN) for f in HIDDEN_FIELDS},
    **{f: (0, MAX_EXPERTS) for f in EXPERT_FIELDS},  # 0: a dense model
    **{f: (1, MAX_EXPERTS) for f in TOP_K_FIELDS},
    "num_hidden_layers": (0, MAX_LAYERS),
    "first_k_dense_replace": (0, MAX_LAYERS),
    "decoder_sparse_step": (0, MAX_LAYERS),  # 0 counts as 1 (every layer), as before
    "interleave_moe_layer_step": (0, MAX_LAYERS),  # Llama-4: 0 means no MoE layer
}
#: fields holding a list of layer indices
CONFIG_LAYER_LISTS = ("mlp_only_layers", "moe_layers")
#: fields holding a string (printed, or compared as text)
CONFIG_TEXTS = ("model_type", "torch_dtype", "dtype")


def _kind(value: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list",
            dict: "an object", type(None): "null"}.get(type(value), type(value).__name__)


def _shown(value: Any) -> str:
    text = repr(value) if not isinstance(value, (int, float)) or isinstance(value, bool) else json.dumps(value)
    return text if len(text) <= 40 else f"{_kind(value)} of {len(text)} characters"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_config(config: dict, text: dict, hf_quant: dict | None, label: str) -> None:
    """Refuse a config whose fields this module reads are of the wrong type or out of range.

    Every command that loads a checkpoint goes through :func:`load_profile`, and it calls this
    first, so a hostile or broken config.json is one :class:`ModelConfigInvalid` (or
    :class:`UnsupportedQuantization`) naming the field, never a traceback or a wrong answer.
    """
    def bad(field: str, value: Any, want: str) -> ModelConfigInvalid:
        return ModelConfigInvalid(f"{label}: {field} is {_shown(value)}, {want}; fix the config or use an explicit shape")

    for part in (config, text):
        for name, (low, high) in CONFIG_INTS.items():
            value = part.get(name)
            if value is None:
                continue
            if not _is_int(value):
                raise bad(name, value, "not an integer")
            if not low <= value <= high:
                raise bad(name, value, f"not between {low} and {high}")
        for name in CONFIG_LAYER_LISTS:
            value = part.get(name)
            if value is not None and not (isinstance(value, list) and len(value) <= MAX_LAYERS
                                          and all(_is_int(i) and 0 <= i < MAX_LAYERS for i in value)):
                raise bad(name, value, f"not a list of layer indices (integers 0 to {MAX_LAYERS - 1})")
        freq = part.get("moe_layer_freq")
        if freq is not None and not (
            (_is_int(freq) and 0 <= freq <= MAX_LAYERS)
            or (isinstance(freq, list) and len(freq) <= MAX_LAYERS and all(f in (0, 1) for f in freq))
        ):
            raise bad("moe_layer_freq", freq, f"neither a layer step (0 to {MAX_LAYERS}) nor a list of 0/1 flags")
        for name in CONFIG_TEXTS:
            value = part.get(name)
            if value is not None and not isinstance(value, str):
                raise bad(name, value, "not a string")
    for name in TEXT_CONFIG_KEYS:
        if config.get(name) is not None and not isinstance(config[name], dict):
            raise bad(name, config[name], "not an object")
    experts, top_k = first_field(text, EXPERT_FIELDS), first_field(text, TOP_K_FIELDS)
    if experts[1] and top_k[1] and top_k[1] > experts[1]:
        raise ModelConfigInvalid(
            f"{label}: {top_k[0]} ({top_k[1]}) exceeds the {experts[1]} routed experts ({experts[0]}); no router "
            "picks more experts than exist: fix the config or use an explicit shape"
        )
    for where, q in (("config.json quantization_config", config.get("quantization_config")),
                     ("config.json text config quantization_config", text.get("quantization_config"))):
        if q is not None:
            _check_quant_block(q, where)
    if hf_quant is not None:
        for key in ("producer", "quantization"):
            if hf_quant.get(key) is not None and not isinstance(hf_quant[key], dict):
                raise UnsupportedQuantization(f"hf_quant_config.json: {key} is {_kind(hf_quant[key])}, not an "
                                              "object; autoselect never guesses a dtype: fix the file or use an explicit shape")
        quant = hf_quant.get("quantization") or {}
        _check_quant_fields(quant, "hf_quant_config.json quantization")


def _check_quant_block(q: Any, where: str) -> None:
    """A ``quantization_config`` must be an object autoselect can read: a string (``"fp8"``), a
    list or an empty object names no scheme, and reading it as unquantized would be a guess."""
    if not isinstance(q, dict):
        raise UnsupportedQuantization(
            f"{where} is {_kind(q)} ({_shown(q)}), not an object with a quant_method; autoselect never guesses "
            "the activation dtype: fix the config or use an explicit shape"
        )
    if not q:
        raise UnsupportedQuantization(
            f"{where} is empty: no quant_method; autoselect never guesses the activation dtype: fix the config "
            "or use an explicit shape"
        )
    _check_quant_fields(q, where)


def _check_quant_fields(q: dict, where: str) -> None:
    """The fields of a quantization block the readers below use, each of the type they need."""
    def bad(field: str, value: Any, want: str) -> UnsupportedQuantization:
        return UnsupportedQuantization(f"{where}: {field} is {_kind(value)} ({_shown(value)}), not {want}; "
                                       "fix the config or use an explicit shape")

    for name in ("quant_method", "quant_algo", "activation_scheme"):
        if q.get(name) is not None and not isinstance(q[name], str):
            raise bad(name, q[name], "a string")
    if q.get("quantization") is not None:
        if not isinstance(q["quantization"], dict):
            raise bad("quantization", q["quantization"], "an object")
        _check_quant_fields(q["quantization"], f"{where}.quantization")
    block = q.get("weight_block_size")
    if block is not None and not (isinstance(block, list) and len(block) <= 4 and all(_is_int(b) for b in block)):
        raise bad("weight_block_size", block, "a list of integers")
    layers = q.get("quantized_layers")
    if layers is not None and not (isinstance(layers, dict) and all(isinstance(v, dict) for v in layers.values())):
        raise bad("quantized_layers", layers, "an object of per-layer objects")
    groups = q.get("config_groups")
    if groups is None:
        return
    if not isinstance(groups, dict) or not all(isinstance(g, dict) for g in groups.values()):
        raise bad("config_groups", groups, "an object of group objects")
    for name, group in groups.items():
        targets = group.get("targets")
        if targets is not None and not (isinstance(targets, list) and all(isinstance(t, str) for t in targets)):
            raise bad(f"config_groups.{name}.targets", targets, "a list of module names")
        for part in ("weights", "input_activations"):
            args = group.get(part)
            if args is not None and not isinstance(args, dict):
                raise bad(f"config_groups.{name}.{part}", args, "an object")
            for key, value in (args or {}).items():
                if key == "block_structure" and value is not None and not (
                        isinstance(value, list) and all(_is_int(v) for v in value)):
                    raise bad(f"config_groups.{name}.{part}.{key}", value, "a list of integers")
                if key in ("num_bits", "group_size") and value is not None and not _is_int(value):
                    raise bad(f"config_groups.{name}.{part}.{key}", value, "an integer")
                if key in ("type", "strategy") and value is not None and not isinstance(value, str):
                    raise bad(f"config_groups.{name}.{part}.{key}", value, "a string")


# --------------------------------------------------------------------------------------
# MoE layers
# --------------------------------------------------------------------------------------


def count_moe_layers(text: dict) -> int:
    """How many decoder layers have routed experts, as each family's modelling code decides.

    DeepSeek/Kimi/GLM: ``i >= first_k_dense_replace and i % moe_layer_freq == 0``; Qwen-MoE:
    ``(i + 1) % decoder_sparse_step == 0 and i not in mlp_only_layers``; Llama-4:
    ``(i + 1) % interleave_moe_layer_step == 0`` (or the explicit ``moe_layers`` list); Mixtral
    and gpt-oss: every layer. Absent fields are neutral, so one rule covers every family.
    """
    n = int(text.get("num_hidden_layers") or 0)
    explicit = text.get("moe_layers")
    if isinstance(explicit, list) and explicit:
        return len(explicit)
    first_dense = int(text.get("first_k_dense_replace") or 0)
    freq = text.get("moe_layer_freq", 1)
    if isinstance(freq, list):  # per-layer 0/1 flags
        return sum(1 for i, flag in enumerate(freq[:n]) if flag and i >= first_dense)
    freq = int(freq or 1)
    sparse_step = int(text.get("decoder_sparse_step") or 1)
    interleave = int(text.get("interleave_moe_layer_step", 1) or 0)
    if interleave <= 0:  # Llama-4: a step of 0 means no MoE layer at all
        return 0
    mlp_only = set(text.get("mlp_only_layers") or [])
    return sum(
        1
        for i in range(n)
        if i >= first_dense
        and i % freq == 0
        and (i + 1) % sparse_step == 0
        and (i + 1) % interleave == 0
        and i not in mlp_only
    )
