"""perf/launch_latency.py --quick: the script the launcher's cost is proven with runs, and states its goals.

The goals are judged by the script's own exit status on a quiet machine (the lead's numbers);
on this shared machine the side-by-side ratio moves with the load, so a missed ratio is a warning
here, while the bound the launcher promises (at most 1 s added to a start) must hold.
"""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest

from support.paths import REPO


@pytest.mark.slow
def test_the_launch_latency_script_runs_and_launch_adds_under_a_second():
    out = subprocess.run([sys.executable, str(REPO / "perf" / "launch_latency.py"), "--quick"], capture_output=True,
                         text=True, timeout=600)
    assert out.returncode in (0, 1), out.stderr
    lines = out.stdout.splitlines()
    for row in ("python -c pass", "python -c 'import click'", "launch cpu", "launch keep", "launch refuse",
                "launch reference", "launch measured"):
        assert any(line.startswith(row) for line in lines), row
    [cold] = [line for line in lines if line.startswith("goal 1,")]
    [added] = [line for line in lines if line.startswith("goal 2,")]
    assert added.endswith(": OK"), added
    assert out.returncode == (0 if cold.endswith(": OK") else 1)
    if not cold.endswith(": OK"):
        warnings.warn(f"perf/launch_latency.py --quick on a loaded machine: {cold}")
