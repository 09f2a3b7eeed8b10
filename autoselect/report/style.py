"""How each backend and each outcome is drawn: colours, markers, legend wording, figure size.

Tables, so the same backend looks the same in every figure, the page and the terminal.
"""

from __future__ import annotations

from typing import Sequence

#: Stable colour and marker per backend, so the same backend looks the same in every figure.
BACKEND_STYLE: dict[str, tuple[str, str]] = {
    "allgather_reducescatter": ("#1f77b4", "o"),
    "flashinfer_nvlink_one_sided": ("#d62728", "s"),
    "flashinfer_nvlink_two_sided": ("#2ca02c", "^"),
    "flashinfer_all2allv": ("#2ca02c", "^"),
    "deepep_high_throughput": ("#9467bd", "D"),
    "deepep_low_latency": ("#ff7f0e", "v"),
    "deepep_v2": ("#8c564b", "P"),
    "nixl_ep": ("#e377c2", "X"),
    "mori_high_throughput": ("#bcbd22", "<"),
    "mori_low_latency": ("#17becf", ">"),
    "moonep": ("#7f7f7f", "h"),
    "reference_all_to_all": ("#555555", "."),
}
#: Colours for backends the table does not name (third-party adapters), in order of appearance.
EXTRA_COLOURS = ("#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd")

#: How a point that was not timed is marked along the bottom of the latency axes.
FAILED_MARKER: dict[str, str] = {"incorrect": "x", "unavailable": "|", "error": "X", "timeout": "1"}

#: Legend wording per backend state; ``{detail}`` is filled in per backend.
STATE_LABEL: dict[str, str] = {
    "ok": "{backend}",
    "partial": "{backend} — not timed at {detail}",
    "disqualified": "{backend} — DISQUALIFIED for this shape ({detail}); never a candidate",
    "illegal": "{backend} — ILLEGAL here ({detail}); measured only, never a candidate",
    "incorrect": "{backend} — INCORRECT: failed the correctness gate ({detail})",
    "unavailable": "{backend} — not measured: unavailable here ({detail})",
    "error": "{backend} — error: {detail}",
    "timeout": "{backend} — timed out ({detail})",
}

#: Which non-ok status names a backend that has no timed point at all (worst first).
FAILURE_ORDER = ("incorrect", "error", "timeout", "unavailable")

#: Line styles, one meaning each: measured here and a candidate (solid), NVIDIA's published
#: reference (dashed, open markers), measured here but never a candidate (dotted: illegal,
#: disqualified, or a benchmark-only baseline).
MEASURED_LINE = "-"
REFERENCE_LINE = "--"
NOT_CANDIDATE_LINE = ":"
#: The terminal has no dashes: reference curves are unconnected points, one character per curve.
REFERENCE_MARKERS = ("•", "○", "◆", "△", "□", "×")

#: What kind of number a value is, as the page and the terminal say it: (mark, words). The
#: selector's evidence kinds, strongest first; ``~`` in front of a value adds "estimated
#: between or beyond the token counts it rests on".
EVIDENCE_WORDS: dict[str, tuple[str, str]] = {
    "measured": ("M", "measured here"),
    "published": ("P", "published by NVIDIA (AIConfigurator reference tables)"),
    "derived": ("D", "derived from published NCCL timings, not a measured all2all"),
    "transferred": ("T", "transferred from another shape's published rows"),
    "estimated": ("E", "estimated"),
    "synthetic": ("S", "synthetic example data, not measured on any machine"),
}
ESTIMATED_MARK = "~"

FIGSIZE_IN = (11.0, 6.5)  # every figure: 1100 x 650 px at DPI
DPI = 100

BANDWIDTH_FORMULA = (
    "logical bandwidth = bytes_per_rank / t_p50 with bytes_per_rank = T × (dispatch + combine bytes per token): "
    "dispatch = activation row + 8·top_k (int32 ids, fp32 weights), combine = 2·H (bf16); local-rank traffic "
    "included (DeepEP's 'logical' convention)"
)


def backend_order(backend: str) -> tuple[int, str]:
    """Sort key: the order of :data:`BACKEND_STYLE`, then unknown backends by name."""
    names = list(BACKEND_STYLE)
    return (names.index(backend) if backend in names else len(names), backend)


def backend_style(backend: str, seen: Sequence[str] = ()) -> tuple[str, str]:
    """(colour, marker) of a backend: from :data:`BACKEND_STYLE`, else the next spare colour."""
    if backend in BACKEND_STYLE:
        return BACKEND_STYLE[backend]
    extras = [b for b in seen if b not in BACKEND_STYLE]
    index = extras.index(backend) if backend in extras else len(extras)
    return EXTRA_COLOURS[index % len(EXTRA_COLOURS)], "o"


def short_name(backend: str) -> str:
    """A backend's name shortened for an annotation on the axes."""
    return backend.replace("flashinfer_nvlink_", "flashinfer_").replace("allgather_reducescatter", "allgather_rs")

