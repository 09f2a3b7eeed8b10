"""``autoselect confirm``: check the microbenchmark's verdict with vLLM's own forward pass.

For each candidate backend, ``vllm bench forward`` (vLLM >= 0.33, ``vllm/benchmarks/forward/``)
runs the real model forward with dummy weights and balanced MoE routing as one-shot CUDA graphs,
with the flags ``recommend`` would emit. Multi-GPU runs go through ``torchrun
--nproc-per-node=N -m vllm.entrypoints.cli.main bench forward``. Its ``--output-json`` becomes
:class:`db.records.Result` rows of kind ``"e2e"``, stored next to the ``"micro"`` ones;
``recommend`` reads them back and warns when their winners differ
(:func:`autoselect.selector.e2e.e2e_evidence`). The run needs vLLM with CUDA GPUs; without them
:func:`check_runnable` says so before anything is written.

* :mod:`~autoselect.confirm.plan` — the cases, the backends and each backend's command line;
* :mod:`~autoselect.confirm.output` — vLLM's ``--output-json`` read into result rows;
* :mod:`~autoselect.confirm.run` — one subprocess per backend, rows stored as they arrive;
* :mod:`~autoselect.confirm.report` — what ran and was measured, and its text form.
"""

from autoselect.confirm.report import render_text
from autoselect.confirm.run import confirm

__all__ = [
    "confirm", "render_text",
]
