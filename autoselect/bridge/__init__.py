"""The vLLM bridge: ask an installed vLLM itself, in a subprocess, and resolve which vLLM is targeted.

* :mod:`~autoselect.bridge.interpreter` — which Python runs vLLM (``$AUTOSELECT_VLLM_PYTHON``, else
  this one when it has vllm) and which vLLM version an interpreter has, without importing it.
* :mod:`~autoselect.bridge.version` — the target vLLM version every command judges flags against.
* :mod:`~autoselect.bridge.protocol` — the typed request/response messages (stdlib only: the
  worker imports it from its own folder).
* :mod:`~autoselect.bridge.worker`, :mod:`~autoselect.bridge.worker_quant` — run *inside* vLLM's
  interpreter as a script: vLLM's parser, ``ParallelConfig`` and quantization classes.
* :mod:`~autoselect.bridge.client` — starts the worker with one batch of questions, reads the answers.
* :mod:`~autoselect.bridge.verdicts`, :mod:`~autoselect.bridge.quant` — the answers as autoselect
  uses them (verdicts on command lines; quantization in autoselect's vocabulary and the cross-check).
* :mod:`~autoselect.bridge.hooks` — what ``check`` and ``inspect --cross-check`` ask.

Nothing here imports vLLM or torch in the caller's process.
"""

from autoselect.bridge.interpreter import VllmPythonInvalid, vllm_python
from autoselect.bridge.version import (SOURCE_FLAG, SOURCE_NEWEST, TargetVersion, installed_vllm_version, same_release,
                                       target_version)
from autoselect.lazy import lazy_exports

#: The re-exports that talk to vLLM, loaded on first use (PEP 562 ``__getattr__``): the module of
#: this package -> the names it defines. ``recommend`` without ``--validate`` needs only
#: :func:`target_version`; importing the worker protocol, the client and the quantization answers
#: for it (a dozen frozen dataclasses) cost it ~15 ms a start (:mod:`autoselect.lazy`).
_LAZY = {
    "client": ("require_vllm", "unavailable_reason", "validate_serve_flags", "vllm_info"),
    "verdicts": ("FlagValidation", "ensure_accepted"),
    "hooks": ("cross_check_model", "serve_command_check"),
}
__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

__all__ = [
    "SOURCE_FLAG", "SOURCE_NEWEST", "FlagValidation", "TargetVersion", "VllmPythonInvalid", "cross_check_model",
    "ensure_accepted", "installed_vllm_version", "same_release",
    "require_vllm", "serve_command_check", "target_version", "unavailable_reason", "validate_serve_flags", "vllm_info",
    "vllm_python",
]
