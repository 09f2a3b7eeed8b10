"""compressed-tensors quantization configs: the group that covers the routed experts, matched
against the format table's patterns (vLLM's ``CompressedTensorsConfig._is_*`` predicates)."""

from __future__ import annotations

from autoselect.model.errors import UnsupportedQuantization
from autoselect.model.formats import CT_ARG_DEFAULTS, QUANT_FORMATS


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
