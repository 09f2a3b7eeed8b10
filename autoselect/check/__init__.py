"""``autoselect check``: what is wrong with an existing `vllm serve` command line.

* :mod:`~autoselect.check.findings` — each rule of a line as a :class:`Finding` with a severity.
* :mod:`~autoselect.check.serve_line` — :func:`check_serve_command`: the line read, the release and the
  backend it runs resolved, every finding collected (:class:`CheckReport`).
"""

from autoselect.check.findings import SEVERITIES, Finding, flag_advice
from autoselect.check.serve_line import CheckReport, check_serve_command
from autoselect.workload import ROLES, UnknownRole

__all__ = ["ROLES", "SEVERITIES", "CheckReport", "Finding", "UnknownRole", "check_serve_command", "flag_advice"]
