""":func:`load_profile`: a checkpoint's config files -> its :class:`MoeProfile`."""

from __future__ import annotations

from autoselect.model.errors import DenseModel, MoeFieldsMissing
from autoselect.model.fields import EXPERT_FIELDS, HIDDEN_FIELDS, TOP_K_FIELDS, first_field, text_config
from autoselect.model.files import read_config_json
from autoselect.model.formats import QUANT_FORMATS
from autoselect.model.layers import count_moe_layers
from autoselect.model.profile import MoeProfile
from autoselect.model.quantization import detect_weight_quant
from autoselect.model.source import CLI_SOURCE, ModelSource, locate_config
from autoselect.model.validation import check_config


def load_profile(model: str, *, source: ModelSource = CLI_SOURCE) -> MoeProfile:
    """Read a checkpoint's config files and return its :class:`MoeProfile`.

    :param model: a local checkpoint directory (or its ``config.json``), or a Hugging Face
        model id. Hub ids fetch ``config.json`` and, when present, ``hf_quant_config.json`` into
        the Hugging Face cache (honours ``HF_HUB_OFFLINE``, ``HF_HOME``); never weights, never
        remote code.
    :raises ModelConfigNotFound: no such directory / no config.json / unknown or uncached hub id.
    :raises ModelConfigInvalid: malformed JSON.
    :raises DenseModel: no routed experts.
    :raises MoeFieldsMissing: hidden size, experts or top-k missing.
    :raises UnsupportedQuantization: a quantization scheme autoselect cannot map.
    :param source: which names resolve, and where (:class:`ModelSource`; ``serve`` passes its own).
    """
    config_path, quant_path, notes, label = locate_config(model, source)
    config = read_config_json(config_path, "config.json", label)
    hf_quant = (read_config_json(quant_path, "hf_quant_config.json", label.replace("config.json", "hf_quant_config.json"))
                if quant_path is not None else None)
    text = text_config(config)
    check_config(config, text, hf_quant, label)
    model_type = text.get("model_type") or config.get("model_type")

    # check_config has refused every shape field that is not an integer in range
    expert_field, experts = first_field(text, EXPERT_FIELDS)
    hidden_field, hidden = first_field(text, HIDDEN_FIELDS)
    _, top_k = first_field(text, TOP_K_FIELDS)
    if expert_field is None or experts == 0:
        if hidden_field is not None:
            raise DenseModel(
                f"{model} ({model_type or 'unknown type'}) is a dense model: it has no routed "
                f"experts, so there is no all2all and --all2all-backend has no effect"
            )
        raise MoeFieldsMissing(
            f"{label} has no MoE fields (hidden_size, one of {', '.join(EXPERT_FIELDS)}, "
            f"num_experts_per_tok); is it a language model's config.json?"
        )
    missing = [n for n, v in (("hidden_size", hidden), ("num_experts_per_tok", top_k)) if v is None]
    if missing:
        raise MoeFieldsMissing(
            f"{label} has routed experts ({expert_field}) but no {' or '.join(missing)}; "
            f"fix the config or use an explicit shape"
        )
    moe_layers = count_moe_layers(text)
    if moe_layers == 0 and text.get("num_hidden_layers"):
        raise DenseModel(
            f"{model} ({model_type or 'unknown type'}) has {expert_field}={experts} but no layer uses "
            f"them (first_k_dense_replace / moe_layer_freq / interleave_moe_layer_step): no all2all runs"
        )
    weight_quant, quant_source = detect_weight_quant(config, text, hf_quant)
    fmt = QUANT_FORMATS[weight_quant]
    num_layers = text.get("num_hidden_layers")
    return MoeProfile(
        model=model,
        model_type=model_type,
        hidden_size=hidden,
        num_experts=experts,
        top_k=top_k,
        moe_layers=moe_layers,
        weight_quant=weight_quant,
        activation_dtypes=dict(fmt.activation),
        num_layers=int(num_layers) if isinstance(num_layers, int) else None,
        quant_source=quant_source,
        notes=tuple(notes),
    )
