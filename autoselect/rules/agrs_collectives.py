"""The NCCL calls behind vLLM's default backend (allgather_reducescatter), release by release.

``allgather_reducescatter`` is no kernel of its own: ``AgRsAll2AllManager`` gathers every
rank's tokens to every rank and reduce-scatters the MoE output back, through vLLM's CUDA
communicator and its pynccl wrapper. How many NCCL calls that is, and which, is a per-release
fact: :data:`AGRS_COLLECTIVES` holds one row per release range with the lines it was read from,
and :func:`agrs_calls` lists the calls of one MoE layer's round trip. The reference data prices
them from NVIDIA's NCCL tables (``autoselect.reference.derived``).

What the rows say (vLLM 0.32.0-0.34.0):

* dispatch gathers ``hidden_states`` (the quantized activation), ``topk_weights`` (fp32),
  ``topk_ids`` (int32) and, for a quantized activation with per-token or block scales, the
  scales, as separate tensors in one ``all_gatherv`` call;
* with equal token counts on every rank the CUDA communicator issues **one ncclAllGather per
  tensor inside one ncclGroupStart/End**; with unequal counts pynccl's ``all_gatherv`` issues,
  per tensor, **one ncclBroadcast per rank** (the root), grouped the same way;
* combine is **one ncclReduceScatter** of the ``(ranks x tokens, hidden)`` bf16 output with
  equal counts, **one ncclReduce per rank** with unequal ones;
* counts are equal when vLLM pads the DP ranks to one size: whenever the step runs a CUDA
  graph or micro-batches (``dp_utils.py``: ``should_dp_pad = synced_cudagraph_mode != 0 or
  should_ubatch``); an eager step (a prefill chunk above the captured sizes, or
  ``--enforce-eager``) sends each rank's own count.

A grouped set of calls shares one launch: it costs one NCCL latency floor (perfectly fused) plus
a share of a floor for each tensor beyond the first (``autoselect.reference.derived`` prices it as a
range); until a multi-GPU measurement of vLLM's path calibrates it, that is a range, not a number.
"""

from __future__ import annotations

from typing import NamedTuple

from autoselect.rules.versions import parse_version, version_in

#: The releases whose source the rows were read from.
READ_IN = ("0.32.0", "0.33.0", "0.34.0")

_DC = "vllm/distributed/device_communicators"
_FM = "vllm/model_executor/layers/fused_moe"

# NCCL calls (nccl-tests / NCCL names).
ALL_GATHER, BROADCAST, REDUCE_SCATTER, REDUCE = "all_gather", "broadcast", "reduce_scatter", "reduce"


class AgrsCollectives(NamedTuple):
    """How one release range moves allgather_reducescatter's dispatch and combine.

    ``dispatch_tensors``: the tensors gathered, in vLLM's order (``scales`` only for an activation
    with per-token or block scales: a per-tensor static scale is a 0-dim tensor and stays put);
    ``grouped``: the dispatch's calls run inside one ncclGroupStart/End; ``even_*`` / ``uneven_*``:
    the NCCL call per tensor (dispatch) or of the output (combine) with equal / unequal token
    counts per rank (``*_per_rank``: one such call per rank, each with that rank as root);
    ``not_modelled``: paths the cost model leaves out, each with why.
    """

    since: str
    until: str | None
    dispatch_tensors: tuple[str, ...]
    grouped: bool
    even_dispatch: str
    uneven_dispatch: str
    uneven_dispatch_per_rank: bool
    even_combine: str
    uneven_combine: str
    uneven_combine_per_rank: bool
    padded_when: str
    not_modelled: tuple[str, ...]
    sources: dict  # fact -> "file:line (release), ..." for every release read


AGRS_COLLECTIVES: tuple[AgrsCollectives, ...] = (
    AgrsCollectives(
        "0.32.0", None,
        dispatch_tensors=("hidden_states", "topk_weights", "topk_ids", "scales"),
        grouped=True,
        even_dispatch=ALL_GATHER, uneven_dispatch=BROADCAST, uneven_dispatch_per_rank=True,
        even_combine=REDUCE_SCATTER, uneven_combine=REDUCE, uneven_combine_per_rank=True,
        padded_when=("the step runs a CUDA graph or micro-batches (should_dp_pad = synced_cudagraph_mode != 0 "
                     "or should_ubatch); eager steps (prefill chunks above the captured sizes, --enforce-eager) "
                     "send each rank's own token count"),
        not_modelled=(
            "VLLM_USE_NCCL_SYMM_MEM=1 (default 0): NCCL symmetric-memory (NVLS) collectives, which the "
            "published nccl-tests rows did not time",
            "LoRA: the per-token LoRA mapping is gathered as one more tensor",
            "the monolithic expert path gathers router logits instead of top-k ids and weights",
            "unequal token counts per rank: per-rank ncclBroadcast / ncclReduce calls, which the published "
            "NCCL tables do not time",
        ),
        sources={
            "tensors": (f"{_DC}/all2all.py:144-152 (0.32.0), :132-140 (0.33.0), :134-142 (0.34.0) "
                        "tensors_to_gather = [hidden_states, topk_weights, topk_ids] + extra_tensors; "
                        "dist_group.all_gatherv(tensors_to_gather, dim=0, sizes=sizes)"),
            "scales": (f"{_FM}/prepare_finalize/naive_dp_ep.py:50-51 (0.32.0), :59-60 (0.33.0-0.34.0) "
                       "skip_gather_scales = a1q_scale is None or a1q_scale.ndim == 0; extra_tensors = scales "
                       "(:174-175 / :211-212)"),
            "dtypes": (f"{_FM}/router/fused_topk_router.py:93-102 (0.32.0), :156-165 (0.33.0), :173-182 "
                       "(0.34.0): topk_weights float32, topk_ids int32"),
            "grouped": (f"{_DC}/cuda_communicator.py:947-950 (0.32.0-0.33.0), :1003-1006 (0.34.0) "
                        "pynccl_comm.group_start(); one _all_gather_single per tensor; group_end()"),
            "even": (f"{_DC}/cuda_communicator.py:896 (0.32.0-0.33.0), :952 (0.34.0) equal sizes -> sizes = None; "
                     ":940 / :996 pynccl_comm.all_gather(output_tensor, input_)"),
            "uneven_dispatch": (f"{_DC}/cuda_communicator.py:938 (0.32.0-0.33.0), :994 (0.34.0) "
                                f"pynccl_comm.all_gatherv; {_DC}/pynccl.py:344-357 (0.32.0), :349-362 "
                                "(0.33.0-0.34.0) ncclGroupStart; one ncclBroadcast per root; ncclGroupEnd"),
            "combine": (f"{_DC}/all2all.py:193-208 (0.32.0), :181-196 (0.33.0), :183-198 (0.34.0) "
                        f"combine_into_output -> reduce_scatterv_into_output; {_DC}/cuda_communicator.py:655 "
                        "(0.32.0-0.33.0), :711 (0.34.0) pynccl_comm.reduce_scatter(output, input_tensor)"),
            "uneven_combine": (f"{_DC}/cuda_communicator.py:653 (0.32.0-0.33.0), :709 (0.34.0) "
                               f"pynccl_comm.reduce_scatterv; {_DC}/pynccl.py:408-422 (0.32.0), :413-427 "
                               "(0.33.0-0.34.0) one ncclReduce per root"),
            "padding": "vllm/v1/worker/dp_utils.py:181 (0.32.0-0.34.0) should_dp_pad; "
                       f"{_DC}/all2all.py:94 (0.32.0), :82 (0.33.0), :84 (0.34.0) the sizes are the DP chunk sizes",
            "symm_mem": (f"{_DC}/cuda_communicator.py:918 (0.32.0-0.33.0), :974 (0.34.0) "
                         "if sizes is None and should_nccl_symm_mem_ag_rs(); vllm/envs.py:2099 (0.32.0), "
                         ":2090 (0.33.0), :2207 (0.34.0) VLLM_USE_NCCL_SYMM_MEM default '0'"),
        },
    ),
)


class Call(NamedTuple):
    """One NCCL call of a round trip: the op, the tensor it moves, and how many of it there are."""

    phase: str  # "dispatch" | "combine"
    op: str  # ALL_GATHER | BROADCAST | REDUCE_SCATTER | REDUCE
    tensor: str
    count: int = 1  # per-rank calls: one per root


def collectives_for(vllm_version: str) -> tuple[AgrsCollectives, bool]:
    """The :data:`AGRS_COLLECTIVES` row for ``vllm_version`` and whether it was read for it.

    A release outside every row's range gets the nearest row (``False``: not read for it).
    """
    for row in AGRS_COLLECTIVES:
        if version_in(vllm_version, row.since, row.until):
            return row, True
    older = parse_version(vllm_version)[:4] < parse_version(AGRS_COLLECTIVES[0].since)[:4]
    return (AGRS_COLLECTIVES[0] if older else AGRS_COLLECTIVES[-1]), False


def agrs_calls(row: AgrsCollectives, *, scales: bool, world_size: int, even: bool = True) -> list[Call]:
    """The NCCL calls of one round trip under ``row``: the dispatch's (one per gathered tensor,
    or per tensor and root rank with unequal counts), then the combine's.

    :param scales: the activation has per-token or block scales (they are gathered too).
    """
    tensors = [t for t in row.dispatch_tensors if t != "scales" or scales]
    op = row.even_dispatch if even else row.uneven_dispatch
    per_rank = world_size if not even and row.uneven_dispatch_per_rank else 1
    calls = [Call("dispatch", op, t, per_rank) for t in tensors]
    combine_per_rank = world_size if not even and row.uneven_combine_per_rank else 1
    calls.append(Call("combine", row.even_combine if even else row.uneven_combine, "output", combine_per_rank))
    return calls


def not_read_note(vllm_version: str) -> str:
    """What an answer says when ``vllm_version`` is outside the releases the table was read in."""
    return (f"vLLM's allgather_reducescatter collectives were read in vLLM {', '.join(READ_IN)}; "
            f"vLLM {vllm_version}'s were not, and are priced as those")
