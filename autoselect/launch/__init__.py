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
* :mod:`~autoselect.launch.choose` — :func:`plan_launch`: legality (the one source,
  :func:`autoselect.candidates.candidate_backends`), keep / insert / override / default, the
  line and the ``--decision-json`` document (:class:`LaunchPlan`).
* :mod:`~autoselect.launch.run` — :func:`run_plan`: print, write, ``--dry-run`` or exec.

No torch, numpy, vllm, sqlite-utils, optuna or pyarrow on this path (a test checks
``sys.modules``; ``perf/launch_latency.py`` times it).
"""

from autoselect.lazy import lazy_exports
from autoselect.launch.choose import LaunchOptions, LaunchPlan, plan_launch
from autoselect.launch.run import check_decision_path, run_plan

#: Loaded on first use (PEP 562, :mod:`autoselect.lazy`): the selector's side (only a pick needs it) and
#: the service's HTTP client (only ``--server``). :mod:`autoselect.launch.choose` calls them through
#: this package so that a kept backend or the CPU platform never imports them.
_LAZY = {"local": ("class_arch", "database_state", "local_answer", "local_source"),
         "service": ("ask_service", "check_server_url", "plain_http_beyond_loopback", "read_token_file")}
__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

__all__ = ["LaunchOptions", "LaunchPlan", "check_decision_path", "plan_launch", "run_plan"]
