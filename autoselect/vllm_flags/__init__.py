"""`vllm serve` command lines: reading existing ones (for ``check``) and emitting new ones.

* :mod:`~autoselect.vllm_flags.command` — from pasted text or shell words to the words the
  server receives: continuations, comments, ``export`` lines, launchers and their environment.
* :mod:`~autoselect.vllm_flags.serve_args` — :class:`ServeArgs`, the options that matter to the
  all2all backend, read with vLLM's spellings (old ones included).
* :mod:`~autoselect.vllm_flags.launchers` — the programs a line may run behind (``env``, ``sudo``,
  ``docker run`` ...) read with their own options, and the one rule for what ``launch`` starts.
* :mod:`~autoselect.vllm_flags.trusted` — what ``launch`` takes from an answer it did not
  compute: the flags autoselect emits and the knob table's variables, nothing else.
* :mod:`~autoselect.vllm_flags.emit` — the flags (or, before the flag, the environment) that run
  a chosen backend, and the one-sided workspace's token budget.

No vLLM import anywhere: ``check`` and ``recommend`` stay fast.
"""

from autoselect.lazy import lazy_exports
from autoselect.vllm_flags.emit import (
    DEFAULT_MAX_WORKSPACE_GIB,
    BackendSetting,
    backend_setting,
    serve_flags,
    vllm_default_max_num_batched_tokens,
    workspace_max_num_batched_tokens,
)

#: The reading side, loaded on first use (PEP 562 ``__getattr__``): the module of this package ->
#: the names it defines. ``recommend`` only emits flags; the readers' dataclasses and patterns
#: cost its start ~5 ms (:mod:`autoselect.lazy`).
_LAZY = {
    "command": ("SHELL_VARIABLES", "Command", "has_shell_expansion", "is_python", "leading_assignments", "read_command",
                "shell_expansions"),
    "launchers": ("WRAPPERS", "start_problem"),
    "trusted": ("TrustedAnswer", "UntrustedAnswer", "trusted_answer", "trusted_env", "trusted_tuned_flags"),
    "serve_args": ("CONFIG_UNREAD", "ServeArgs", "parse_serve_argv", "serve_args_of"),
}
__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

__all__ = [
    "CONFIG_UNREAD", "DEFAULT_MAX_WORKSPACE_GIB", "SHELL_VARIABLES", "WRAPPERS", "BackendSetting", "Command", "ServeArgs", "TrustedAnswer",
    "UntrustedAnswer", "backend_setting", "has_shell_expansion", "is_python", "leading_assignments", "parse_serve_argv",
    "read_command", "serve_args_of", "serve_flags", "shell_expansions",
    "start_problem", "trusted_answer", "trusted_env", "trusted_tuned_flags", "vllm_default_max_num_batched_tokens", "workspace_max_num_batched_tokens",
]
