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
* :mod:`~autoselect.launch.choose` — :func:`plan_launch`: the line judged by ``check``'s own judge
  (:func:`autoselect.check.judge_line`: any error refuses it, every warning is said), keep /
  insert / override / default, the line a pick makes judged again, and the ``--decision-json``
  document (:class:`LaunchPlan`). It loads ``local`` and ``service`` on first use
  (:func:`autoselect.lazy.lazy_module`).
* :mod:`~autoselect.launch.run` — :func:`run_plan`: print, write, ``--dry-run`` or exec.

No torch, numpy, vllm, sqlite-utils, optuna or pyarrow on this path (a test checks
``sys.modules``; ``perf/launch_latency.py`` times it).
"""

from autoselect.launch.choose import LaunchOptions, LaunchPlan, plan_launch
from autoselect.launch.run import check_decision_path, run_plan

__all__ = ["LaunchOptions", "LaunchPlan", "check_decision_path", "plan_launch", "run_plan"]
