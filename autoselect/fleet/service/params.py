"""The query parameters' grammar: the command line's, parameter by parameter.

``/v1/recommend?dp=8`` means what ``recommend --dp 8`` means and is refused where that is
refused. Every parameter arrives as text (never through the web framework's own number parsing,
which reads ``dp=1_0`` as 10); the numbers go through the grammars every numeric option of every
command uses (:func:`autoselect.options.parse_int`, :func:`~autoselect.options.parse_number`:
ASCII digits, bounded, finite), and the rest through the checks of the library call itself
(``tokens``, ``workload``, ``vllm_version``, ``gpu_arch`` ...), which the CLI shares. Text that
is not UTF-8 was refused before (:func:`autoselect.text.check_query`).
"""

from __future__ import annotations

from typing import Any

from autoselect.options import parse_int, parse_number

#: parameters that are whole numbers (the options ``--dp``, ``--tp`` ... of ``recommend``)
WHOLE = frozenset({"dp", "tp", "world_size", "concurrency", "max_num_batched_tokens"})
#: parameters that are decimals (``--max-workspace-gib``; ``fleet drift``'s thresholds)
DECIMAL = frozenset({"max_workspace_gib", "min_slowdown", "noise_k"})


def read_params(params: dict[str, str | None]) -> dict[str, Any]:
    """``params`` with each number converted by its grammar (None stays None: not given).

    :raises autoselect.options.BadNumber: a number the command line would refuse, naming the parameter.
    """
    out: dict[str, Any] = {}
    for name, text in params.items():
        if text is None:
            out[name] = None
        elif name in WHOLE:
            out[name] = parse_int(text, what=name)
        elif name in DECIMAL:
            out[name] = parse_number(text, what=name)
        else:
            out[name] = text
    return out
