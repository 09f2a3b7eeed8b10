"""The mistakes a model name, a checkpoint's config files or a GPU architecture can hold: one class per mistake."""

from __future__ import annotations

from autoselect.errors import UserError


class ModelConfigNotFound(UserError):
    "No config.json could be found for the model the user named."


class ModelConfigInvalid(UserError):
    "The model's config.json (or hf_quant_config.json) is not valid JSON or not an object."


class DenseModel(UserError):
    "The model has no routed experts, so it has no all2all to choose a backend for."


class MoeFieldsMissing(UserError):
    "config.json lacks the fields a MoE profile needs (hidden size, routed experts, top-k)."


class UnsupportedQuantization(UserError):
    "The checkpoint's quantization scheme is not one autoselect can map to an activation dtype."


class UnknownGpuArch(UserError):
    "The GPU architecture given is not one autoselect knows."
