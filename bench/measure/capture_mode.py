"""The footing a CUDA point is timed on: vLLM's, from the rules (``autoselect.rules.cuda_graphs``).

vLLM replays a step from a CUDA graph up to its capture size and runs larger steps, and every
step of some backends, eagerly; it sends unequal DP sizes only in eager steps (under a graph it
pads every DP rank to one size). A point is timed the way vLLM would run it: a point vLLM runs
eagerly is never captured, and its timing note says why.
"""

from __future__ import annotations

from autoselect.rules.cuda_graphs import DP_PADDING_SOURCE, step_footing
from autoselect.rules.versions import NEWEST_VLLM
from db.records import UNEQUAL

#: Why a point on vLLM's unequal-DP-size path is eager.
UNEQUAL_IS_EAGER = ("vLLM sends unequal token counts per DP rank only in eager steps: under a CUDA graph it pads "
                    f"every DP rank to one size ({DP_PADDING_SOURCE})")


def vllm_runs_eagerly(adapter, ctx, point) -> str | None:
    """Why vLLM runs this point's step eagerly (then it is timed eagerly), or None where vLLM replays it
    from a CUDA graph. The DP size of the deployment is the benchmark's world size (EP = DP, TP 1)."""
    if adapter.footing().get("dp_sizes") == UNEQUAL:
        return UNEQUAL_IS_EAGER
    footing = step_footing(adapter.name, point.tokens_per_rank, vllm_version=ctx.vllm_version or NEWEST_VLLM,
                           gpu_arch=ctx.gpu_arch, data_parallel_size=ctx.world_size)
    return None if footing.graph else footing.reason
