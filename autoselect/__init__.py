"""autoselect: benchmark vLLM's MoE all2all backends and pick the fastest legal one.

The library API lives in the modules (``autoselect.model``, ``autoselect.rules``,
``autoselect.selector`` ...); nothing heavy is imported here so that the fast commands
(``inspect``, ``check``, ``recommend``, ``db``) stay fast.
"""

__version__ = "0.1.0"
