"""``autoselect check``: what is wrong with an existing `vllm serve` command line.

* :mod:`~autoselect.check.findings` — each rule of a line as a :class:`Finding` with a severity.
* :mod:`~autoselect.check.serve_line` — :func:`judge_line`, the one judge of a line ``check`` and
  ``launch`` both call: the line read, the release and the backend it runs resolved, every finding
  collected (:class:`CheckReport`); :func:`check_serve_command`, ``check``'s call of it.
"""

from autoselect.check.findings import SEVERITIES, Finding, flag_advice
from autoselect.check.serve_line import CheckReport, LineContext, check_serve_command, judge_line
from autoselect.workload import ROLES, UnknownRole

__all__ = ["ROLES", "SEVERITIES", "CheckReport", "Finding", "LineContext", "UnknownRole", "check_serve_command",
           "flag_advice", "judge_line"]
