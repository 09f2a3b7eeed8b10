"""The goals a perf script states, printed beside what it measured, and its exit status.

Every CPU-runnable script under ``perf/`` has a ``--quick`` mode (small sizes, few repeats: the
test suite runs it, ``tests/test_perf_scripts.py``) and ends with :meth:`Goals.finish`. The rule:

* a **timing** goal (wall time, throughput, CPU time, ratios of times) depends on the machine and
  its load: it is printed beside its value in every mode, and judged (a miss makes the exit status
  1) in the full mode only; quick mode prints it as ``not judged (quick)``;
* an **exact** goal (errors, identical answers, a module that must not load, a regret over data
  the quick run reads whole) does not depend on the machine: judged in both modes;
* a **dataset** goal is exact too but is a statistic over the whole of a fixed data set (a regret
  percentile over every published reference case): a quick run that reads part of the data computes
  another number, so quick mode prints it as ``not judged (quick)`` and the full mode judges it;
* a goal the script **proves infeasible** on its data (no policy of the kind judged could meet it,
  with the proof printed: :meth:`Goals.infeasible`) is printed with its value and the proof, and
  not judged; the same goal is judged as soon as the data make it feasible.

The last line is always ``goals: N met, N missed`` (in a reduced run ``, N not judged (quick)``) (or ``goals: none
stated``), followed by ``, N infeasible`` when a goal was proved infeasible: the suite checks
that it is there, so a script that stops early or prints nothing fails.
"""

from __future__ import annotations

import argparse

TIMING, EXACT, DATASET = "timing", "exact", "dataset"


def add_quick(parser: argparse.ArgumentParser, what: str) -> None:
    """The ``--quick`` flag; ``what`` says what it shrinks (shown in ``--help``)."""
    parser.add_argument("--quick", action="store_true",
                        help=f"a quick run for the test suite: {what}; timing and dataset goals are printed, "
                        "not judged")


class Goals:
    """Collects the goals of one run; :meth:`finish` prints the summary and returns the exit status."""

    def __init__(self, quick: bool, why: str = "quick"):
        """``quick``: timing and dataset goals are printed, not judged; ``why`` says so in each line
        (another reduced problem than ``--quick`` may give its own reason)."""
        self.quick = quick
        self.why = why
        self.met = self.missed = self.unjudged = self.impossible = 0

    def check(self, name: str, value: str, goal: str, met: bool, kind: str = TIMING) -> bool:
        """Print ``goal <name>: <value> (goal <goal>): met | MISSED | ... not judged (<why>)``; returns ``met``."""
        if kind not in (TIMING, EXACT, DATASET):
            raise ValueError(f"goal kind {kind!r}: use {TIMING!r}, {EXACT!r} or {DATASET!r}")
        if kind in (TIMING, DATASET) and self.quick:
            verdict = f"{'met' if met else 'not met'}, not judged ({self.why})"
            self.unjudged += 1
        elif met:
            verdict, self.met = "met", self.met + 1
        else:
            verdict, self.missed = "MISSED", self.missed + 1
        print(f"goal {name}: {value} (goal {goal}): {verdict}", flush=True)
        return met

    def infeasible(self, name: str, value: str, goal: str, proof: str) -> None:
        """Print ``goal <name>: <value> (goal <goal>): infeasible, not judged: <proof>``: a goal the
        script's data prove no policy can meet (``proof`` says why, with the counts)."""
        self.impossible += 1
        print(f"goal {name}: {value} (goal {goal}): infeasible, not judged: {proof}", flush=True)

    def finish(self) -> int:
        """Print the summary line; 1 if any judged goal was missed, else 0."""
        if self.met + self.missed + self.unjudged + self.impossible == 0:
            print("goals: none stated", flush=True)
        else:
            tail = f", {self.impossible} infeasible" if self.impossible else ""
            judged = f", {self.unjudged} not judged ({self.why})" if self.quick else ""  # a full run judges all
            print(f"goals: {self.met} met, {self.missed} missed{judged}{tail}", flush=True)
        return 1 if self.missed else 0
