"""Model profiles: what one MoE checkpoint puts on the all2all (pure Python, no torch).

:func:`load_profile` reads a checkpoint's ``config.json`` (and ``hf_quant_config.json`` when
the checkpoint has one) from a local directory or the Hugging Face Hub — config files only,
never weights, never remote code — and returns a :class:`MoeProfile`: hidden size, routed
experts, top-k, MoE layer count, weight quantization and the activation dtype that crosses the
all2all on each GPU architecture. One module per step, in the order :func:`load_profile` runs them:

* :mod:`~autoselect.model.source` — which names resolve (:class:`ModelSource`) and to which
  files: local directories, ``serve``'s model roots, Hub ids (:mod:`~autoselect.model.hub`);
* :mod:`~autoselect.model.files` — one config file read as a bounded UTF-8 JSON object;
* :mod:`~autoselect.model.validation` — :func:`check_config`: every field the readers use,
  typed and bounded, before anything reads it;
* :mod:`~autoselect.model.fields` — the field names of the shape (and nested text configs);
  :mod:`~autoselect.model.layers` — which decoder layers have routed experts;
* :mod:`~autoselect.model.quantization` (and :mod:`~autoselect.model.compressed_tensors`) — the
  weight format, read as vLLM reads it; anything unknown is refused, never guessed;
* :mod:`~autoselect.model.formats` — the tables: weight format -> activation dtype per
  architecture (:data:`QUANT_FORMATS`), ModelOpt algorithms, compressed-tensors schemes;
* :mod:`~autoselect.model.profile` — :class:`MoeProfile`; :mod:`~autoselect.model.arch` —
  GPU architecture spellings; :mod:`~autoselect.model.errors` — one class per mistake.
"""

from autoselect.model.arch import GPU_ARCHS, UnknownGpuArch, normalize_arch
from autoselect.model.compressed_tensors import compressed_tensors_weight_quant
from autoselect.model.errors import (
    DenseModel,
    InvalidShape,
    ModelConfigInvalid,
    ModelConfigNotFound,
    MoeFieldsMissing,
    UnsupportedQuantization,
)
from autoselect.model.fields import EXPERT_FIELDS, HIDDEN_FIELDS, TEXT_CONFIG_KEYS, TOP_K_FIELDS, first_field, text_config
from autoselect.model.files import MAX_CONFIG_BYTES, read_config_json
from autoselect.model.formats import (
    CT_ARG_DEFAULTS,
    FP8_ACTIVATION_SCHEMES,
    MODELOPT_ALGOS,
    QUANT_FORMATS,
    WEIGHT_ONLY_INT_METHODS,
    CtScheme,
    QuantFormat,
)
from autoselect.model.hub import hub_cache_dir, hub_files, hub_offline
from autoselect.model.layers import count_moe_layers
from autoselect.model.load import load_profile
from autoselect.model.profile import MoeProfile
from autoselect.model.quantization import detect_weight_quant
from autoselect.model.source import CLI_SOURCE, MAX_MODEL_NAME, ModelSource, config_dir, locate_config
from autoselect.model.validation import CONFIG_INTS, CONFIG_LAYER_LISTS, CONFIG_TEXTS, MAX_LAYERS, check_config

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
