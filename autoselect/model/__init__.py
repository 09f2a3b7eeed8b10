"""Model profiles: what one MoE checkpoint puts on the all2all (pure Python, no torch).

:func:`load_profile` reads a checkpoint's ``config.json`` (and ``hf_quant_config.json`` when
the checkpoint has one) from a local directory or the Hugging Face Hub — config files only,
never weights, never remote code — and returns a :class:`MoeProfile`: hidden size, routed
experts, top-k, MoE layer count, weight quantization and the activation dtype that crosses the
all2all on each GPU architecture. One module per step, in the order :func:`load_profile` runs them:

* :mod:`~autoselect.model.profile` — :class:`MoeProfile`, :func:`load_profile` (the route below,
  read top to bottom) and the GPU architecture spellings (:func:`normalize_arch`);
* :mod:`~autoselect.model.source` — which names resolve (:class:`ModelSource`) and to which
  files: local directories, ``serve``'s model roots, Hub ids; one config file read as a bounded
  UTF-8 JSON object;
* :mod:`~autoselect.model.config` — the config fields: their names (and nested text configs),
  :func:`check_config` (every field the readers use, typed and bounded, before anything reads
  it), which decoder layers have routed experts;
* :mod:`~autoselect.model.quantization` — the weight format, read as vLLM reads it (ModelOpt, FP8,
  compressed-tensors ...); anything unknown is refused, never guessed;
* :mod:`~autoselect.model.formats` — the tables: weight format -> activation dtype per
  architecture (:data:`QUANT_FORMATS`), ModelOpt algorithms, compressed-tensors schemes;
* :mod:`~autoselect.model.errors` — one class per mistake.
"""

from autoselect.model.config import (CONFIG_INTS, CONFIG_LAYER_LISTS, CONFIG_TEXTS, EXPERT_FIELDS, HIDDEN_FIELDS,
                                     MAX_LAYERS, TEXT_CONFIG_KEYS, TOP_K_FIELDS, check_config, count_moe_layers,
                                     first_field, text_config)
from autoselect.model.errors import (
    DenseModel,
    InvalidShape,
    ModelConfigInvalid,
    ModelConfigNotFound,
    MoeFieldsMissing,
    UnknownGpuArch,
    UnsupportedQuantization,
)
from autoselect.model.formats import (
    CT_ARG_DEFAULTS,
    FP8_ACTIVATION_SCHEMES,
    MODELOPT_ALGOS,
    QUANT_FORMATS,
    WEIGHT_ONLY_INT_METHODS,
    CtScheme,
    QuantFormat,
)
from autoselect.model.profile import GPU_ARCHS, MoeProfile, load_profile, normalize_arch
from autoselect.model.quantization import compressed_tensors_weight_quant, detect_weight_quant
from autoselect.model.source import (CLI_SOURCE, MAX_CONFIG_BYTES, MAX_MODEL_NAME, ModelSource, config_dir,
                                     hub_cache_dir, hub_files, hub_offline, locate_config, read_config_json)

__all__ = [
    "CLI_SOURCE", "CONFIG_INTS", "CONFIG_LAYER_LISTS", "CONFIG_TEXTS", "CT_ARG_DEFAULTS", "CtScheme", "DenseModel",
    "EXPERT_FIELDS", "FP8_ACTIVATION_SCHEMES", "GPU_ARCHS", "HIDDEN_FIELDS", "InvalidShape", "MAX_CONFIG_BYTES",
    "MAX_LAYERS", "MAX_MODEL_NAME", "MODELOPT_ALGOS", "ModelConfigInvalid", "ModelConfigNotFound", "ModelSource",
    "MoeFieldsMissing", "MoeProfile", "QUANT_FORMATS", "QuantFormat", "TEXT_CONFIG_KEYS", "TOP_K_FIELDS",
    "UnknownGpuArch", "UnsupportedQuantization", "WEIGHT_ONLY_INT_METHODS", "check_config",
    "compressed_tensors_weight_quant", "config_dir", "count_moe_layers", "detect_weight_quant", "first_field",
    "hub_cache_dir", "hub_files", "hub_offline", "load_profile", "locate_config", "normalize_arch",
    "read_config_json", "text_config",
]
