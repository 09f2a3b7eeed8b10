"""What ``check`` and ``inspect --cross-check`` ask vLLM, in the form those commands report.

``check`` gets findings (``(severity, code, message)``) and never fails because vLLM is missing,
crashes or is slow; ``inspect --cross-check`` was asked for vLLM, so a missing vLLM is an error.
"""

from __future__ import annotations

from typing import Sequence

from autoselect.bridge.client import (DEFAULT_TIMEOUT_S, VllmFailed, VllmTimedOut, classify_quantization,
                                      require_vllm, validate_serve_words)
from autoselect.bridge.interpreter import VllmPythonInvalid, vllm_python
from autoselect.bridge.protocol import VllmInfo
from autoselect.bridge.quant import CrossCheck, cross_check
from autoselect.model import config_dir


def serve_command_check(serve_words: Sequence[str], *, timeout_s: float = DEFAULT_TIMEOUT_S
                        ) -> tuple[VllmInfo | None, list[tuple[str, str, str]]]:
    """What vLLM's own parser says about one `vllm serve` line, and which vLLM said it.

    :param serve_words: the words ``vllm serve`` receives, as check read them
        (:attr:`autoselect.vllm_flags.Command.serve_words`); passed to vLLM unchanged.
    Returns ``(info, findings)``: ``info`` is the vLLM that answered (its version is the one
    ``check`` should judge the line against), None when vLLM is not installed or did not
    answer; ``findings`` are ``(severity, code, message)`` tuples, empty without vLLM (``check``
    then relies on autoselect's own rules). A rejection is an ``error`` quoting vLLM; what vLLM
    logs (a removed backend rewritten) is a ``warning``; a vLLM that crashes or times out is a
    ``warning``, not a failure of check.
    """
    try:
        if vllm_python() is None:
            return None, []
        validation = validate_serve_words([serve_words], timeout_s=timeout_s)
    except (VllmPythonInvalid, VllmTimedOut, VllmFailed) as e:
        return None, [("warning", "vllm-unchecked", f"could not ask vLLM's own parser: {e}")]
    verdict, label = validation.verdicts[0], validation.vllm.label()
    if not verdict.ok:
        return validation.vllm, [("error", "vllm-rejected", f"{label} rejects this command line: {verdict.error}")]
    findings = [("warning", "vllm-warning", f"{label}: {w}") for w in verdict.warnings]
    findings += [("info", "vllm-note", f"{label}: {n}") for n in verdict.notes]
    findings.append(("info", "vllm-parsed", f"{label}'s own `vllm serve` parser accepts the command line"))
    return validation.vllm, findings


def cross_check_model(model: str, profile, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> CrossCheck:
    """Classify ``model``'s config files with vLLM's quantization classes and compare with ``profile``.

    :raises autoselect.bridge.VllmNotInstalled: without vLLM (the user asked for the cross-check).
    """
    info, [classification] = classify_quantization([config_dir(model)], python=require_vllm(),
                                                   timeout_s=timeout_s)
    return CrossCheck(info, classification, tuple(cross_check(profile, classification)))
