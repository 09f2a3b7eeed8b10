"""``autoselect launch``: start vLLM with the pick, and refuse to start it with an illegal backend.

``autoselect launch [OPTIONS] -- <the user's own server line>`` reads the line as ``check`` reads
it, runs the selector as ``recommend`` does (or asks the fleet's ``autoselect serve``), puts the
pick into the line the way the target vLLM release takes it, says what it chose and why on one
stderr line, and replaces itself with the server (``os.execvpe``: same PID). The modules, in
the order the decision runs:

* :mod:`~autoselect.launch.line` — the line: read, its program and Python, rewritten (appending
  only), shell-quoted.
* :mod:`~autoselect.launch.platform` — which vLLM platform it runs on here (GPUs, or the CPU
  platform that builds one all2all manager).
* :mod:`~autoselect.launch.pick` — the selector's answer as launch uses it (:class:`Pick`).
* :mod:`~autoselect.launch.service` — the fleet's ``autoselect serve`` asked for it (the bearer
  token, one deadline, no redirects); loaded on first use.
* :mod:`~autoselect.launch.local` — the answer on this machine: the database state and
  :func:`autoselect.selector.recommend_for`; loaded on first use, so a kept backend or the CPU
  platform never imports the selector or the database readers.
* :mod:`~autoselect.launch.decide` — :func:`plan_launch`: legality (the one source,
  :func:`autoselect.candidates.candidate_backends`), keep / insert / override / default, the
  line and the ``--decision-json`` document (:class:`LaunchPlan`).
* :mod:`~autoselect.launch.run` — :func:`run_plan`: print, write, ``--dry-run`` or exec.

No torch, numpy, vllm, sqlite-utils, optuna or pyarrow on this path (a test checks
``sys.modules``; ``perf/launch_latency.py`` times it).
"""

from autoselect.lazy import lazy_exports
from autoselect.launch.pick import Pick, ServiceUnavailable, pick_of
from autoselect.launch.decide import (ACTIONS, DEFAULT, DEFAULT_SERVER_TIMEOUT_S, INSERT, KEEP, OVERRIDE,
                                      SCHEMA_VERSION, UNCHANGED, BadLaunchOption, ConfigUnreadable, IllegalBackend,
                                      LaunchOptions, LaunchPlan, NoEvidence, NothingToLaunch, plan_launch)
from autoselect.launch.line import (CannotRewrite, FinalCommand, LaunchLine, NoServerProgram, line_python, read_line,
                                    rewrite)
from autoselect.launch.platform import CPU, TARGET_DEVICE, PlatformChoice, line_platform
from autoselect.launch.run import ProgramNotFound, check_decision_path, run_plan

#: The selector's side, loaded on first use (PEP 562, :mod:`autoselect.lazy`): only a pick needs it.
_LAZY = {"local": ("DatabaseState", "class_arch", "database_state", "local_answer", "local_source"),
         "service": ("BadServerUrl", "ask_service", "check_server_url", "plain_http_beyond_loopback",
                     "read_token_file")}
__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

__all__ = [
    "ACTIONS", "CPU", "DEFAULT", "DEFAULT_SERVER_TIMEOUT_S", "INSERT", "KEEP", "OVERRIDE", "SCHEMA_VERSION",
    "TARGET_DEVICE", "UNCHANGED",
    "BadLaunchOption", "BadServerUrl", "CannotRewrite", "ConfigUnreadable", "DatabaseState", "FinalCommand",
    "IllegalBackend", "LaunchLine", "LaunchOptions", "LaunchPlan", "NoEvidence", "NoServerProgram",
    "NothingToLaunch", "Pick", "PlatformChoice", "ProgramNotFound", "ServiceUnavailable",
    "ask_service", "check_decision_path", "class_arch", "database_state", "line_platform", "line_python",
    "local_answer", "local_source", "pick_of", "plan_launch", "read_line", "rewrite", "run_plan",
]
