"""Counting the decoder layers that have routed experts, as each model family's modelling code does."""

from __future__ import annotations


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
