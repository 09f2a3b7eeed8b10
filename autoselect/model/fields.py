"""The config.json field names that give a MoE model's shape, and where a multimodal config keeps them."""

from __future__ import annotations

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
