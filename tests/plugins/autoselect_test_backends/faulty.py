"""Adapters that each break one promise; the correctness gate or the launcher must notice."""

from __future__ import annotations

import os
import time

from bench.backends.reference_all_to_all import ReferenceAllToAll


class WrongByte(ReferenceAllToAll):
    """Flips one activation byte of the first received row on rank 1."""

    name = "test_wrong_byte"

    def dispatch(self, batch):
        received = super().dispatch(batch)
        if self.ctx.rank == 1 and received.x.shape[0]:
            received.x[0, 5] ^= 0x01
        return received


class DropsToken(ReferenceAllToAll):
    """Rank 0 never receives the last row sent to it (marked invalid, as padding would be)."""

    name = "test_drops_token"

    def dispatch(self, batch):
        import torch

        received = super().dispatch(batch)
        if self.ctx.rank == 0 and received.x.shape[0]:
            valid = torch.ones(received.x.shape[0], dtype=torch.bool)
            valid[-1] = False
            received.valid = valid
        return received


class DoubleCounts(ReferenceAllToAll):
    """Rank 0's combine adds the first returned row (one ``w_k · expert_k`` term) twice."""

    name = "test_double_counts"

    def combine(self, expert_out):
        back = self.return_rows(expert_out)
        out = self.sum_rows(back)
        if self.ctx.rank == 0 and back.shape[0]:
            t = int(self.send_token[0])
            out[t] = (out[t].float() + back[0].float()).to(out.dtype)
        return out


class RankCrashes(ReferenceAllToAll):
    """Rank 1 dies (exit status 13) in its first dispatch."""

    name = "test_rank_crashes"

    def dispatch(self, batch):
        if self.ctx.rank == 1:
            os._exit(13)
        return super().dispatch(batch)


class RankHangs(ReferenceAllToAll):
    """Rank 1 sleeps forever in its first dispatch (rank 0 then blocks in the collective)."""

    name = "test_rank_hangs"

    def dispatch(self, batch):
        if self.ctx.rank == 1:
            while True:
                time.sleep(1)
        return super().dispatch(batch)


class SetupRaises(ReferenceAllToAll):
    """Raises in setup on every rank (an adapter bug or an unsupported shape)."""

    name = "test_setup_raises"

    def setup(self, ctx, point):
        raise ValueError("this shape is not supported by the test adapter")


class GraphClaimWithHostSync(ReferenceAllToAll):
    """Claims CUDA-graph capture although its dispatch synchronizes (``.tolist()`` of the splits).

    On a GPU the harness's host-sync probe must notice before any capture and time it
    eagerly, with the reason; on CPU it is the reference exchange.
    """

    name = "test_graph_claim_with_host_sync"
    supports_cuda_graph = True


class TwoSidedCaptured:
    """FlashInfer two-sided declared capturable: does its round trip survive CUDA-graph capture?

    The real adapter is timed eagerly (it does not claim capture) while one-sided is
    replayed from a graph; ``perf/gpu_check.sh`` runs this to learn whether the two-sided
    calls would capture, replay and pass the gate (the harness falls back to eager, with the
    reason, if not). Defined lazily so that importing this module never needs FlashInfer.
    """

    name = "test_two_sided_captured"

    def __new__(cls):
        from bench.backends.flashinfer_nvlink_two_sided import FlashinferNvlinkTwoSided

        class _Captured(FlashinferNvlinkTwoSided):
            name = "test_two_sided_captured"
            supports_cuda_graph = True

        return _Captured()


class OneSidedNvfp4Workspace:
    """FlashInfer one-sided with the workspace sized by the old nvfp4 formula (the seed's bug).

    ``H/2 + H/16 + 8·top_k`` dispatch bytes per token, whatever the payload: with a bf16
    payload the dispatch overruns its region. Defined lazily so that importing this module
    never needs FlashInfer.
    """

    name = "test_one_sided_nvfp4_workspace"

    def __new__(cls):
        from bench.backends.flashinfer_nvlink_one_sided import FlashinferNvlinkOneSided

        class _Undersized(FlashinferNvlinkOneSided):
            name = "test_one_sided_nvfp4_workspace"

            def dispatch_row_bytes(self, point):
                h = point.hidden
                return h // 2 + h // 16 + 8 * point.top_k

            def setup(self, ctx, point):
                import bench.backends._flashinfer as fi

                if ctx.world_size > 1 and fi.has_moe_ep():
                    raise ValueError("the undersized-workspace check runs on the legacy API (world size 1)")
                super().setup(ctx, point)

        return _Undersized()


# --------------------------------------------------------------------------------------
# Adapters that keep state between points, as long-lived worker groups let them.

#: The process's buffer of the budgeted adapters below: what it was built for, and in which process.
_BUFFER: dict = {"budget": None, "tensor": None}
#: Per-geometry receive workspaces of StaleWorkspace (FlashInfer caches its workspace so).
_WORKSPACES: dict = {}
#: Points set up in this process so far (the *Later adapters fault after $AUTOSELECT_TEST_FAULT_AFTER).
_SETUPS = [0]


def _note(**fields) -> None:
    """Append one JSON line to $AUTOSELECT_TEST_BUILD_LOG (what the tests read back)."""
    import json

    path = os.environ.get("AUTOSELECT_TEST_BUILD_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"pid": os.getpid(), **fields}) + "\n")


def _budget(point) -> int:
    """Rows per source rank the buffer is sized for: 256, or the tokens per rank when larger (DeepEP LL's rule)."""
    return max(256, point.tokens_per_rank)


class RebuildsInGroup(ReferenceAllToAll):
    """Keeps one receive buffer per process sized for a token budget, like DeepEP low latency's
    ``Buffer``; a point beyond the budget (or below it after a larger one) rebuilds it in place."""

    name = "test_rebuilds_in_group"

    def setup(self, ctx, point):
        import torch

        super().setup(ctx, point)
        need = _budget(point)
        if _BUFFER["budget"] != need:
            _BUFFER.update(budget=None, tensor=None)  # released before the new one, as shared_buffer does
            _BUFFER.update(budget=need, tensor=torch.empty((need * ctx.world_size, self.row), dtype=torch.uint8))
            _note(rank=ctx.rank, built=need)

    def dispatch(self, batch):
        received = super().dispatch(batch)
        rows = received.x.shape[0]
        if rows > _BUFFER["tensor"].shape[0]:
            raise RuntimeError(f"{rows} received rows overflow a buffer built for {_BUFFER['budget']} tokens per rank")
        _BUFFER["tensor"][:rows, : received.x.shape[1]].copy_(received.x)
        return received


class NeedsFreshProcess(RebuildsInGroup):
    """The same buffer, but it can be built only once per process (an NVSHMEM heap that cannot be
    re-initialized): a point that needs a larger one asks for a fresh process."""

    name = "test_needs_fresh_process"

    def needs_fresh_process(self, ctx, point):
        built = _BUFFER["budget"]
        if built is not None and built < _budget(point):
            return f"its buffer holds {built} tokens per rank and cannot be rebuilt in this process"
        return None

    def setup(self, ctx, point):
        if _BUFFER["budget"] is not None and _BUFFER["budget"] < _budget(point):
            raise RuntimeError("the buffer was built already in this process; it cannot be rebuilt")
        ReferenceAllToAll.setup(self, ctx, point)
        if _BUFFER["budget"] is None:
            import torch

            _BUFFER.update(budget=_budget(point),
                           tensor=torch.empty((_budget(point) * ctx.world_size, self.row), dtype=torch.uint8))
            _note(rank=ctx.rank, built=_budget(point))


class StaleWorkspace(ReferenceAllToAll):
    """Caches its receive rows per geometry for the process, like FlashInfer's workspace, and has a
    defect: once its workspace holds rows, dispatch delivers nothing and returns what is there.

    setup poisons the workspace (0xFF bytes, token index -1) unless $AUTOSELECT_TEST_NO_POISON
    is set, so a later job's gate sees the defect; without the poison it would pass on the
    previous job's bytes.
    """

    name = "test_stale_workspace"

    def setup(self, ctx, point):
        super().setup(ctx, point)
        self.key = (point.tokens_per_rank, point.hidden, point.top_k, point.experts, point.dtype, point.seed)
        ws = _WORKSPACES.get(self.key)
        if ws is not None and not os.environ.get("AUTOSELECT_TEST_NO_POISON"):
            x, ids, weights, index = ws["rows"]
            x.fill_(0xFF)
            ids.fill_(-1)
            weights.fill_(float("nan"))
            index.fill_(-1)

    def dispatch(self, batch):
        from bench.backends import Received

        ws = _WORKSPACES.get(self.key)
        if ws is not None:  # the defect: nothing is exchanged
            self.send_splits, self.recv_splits, self.send_token = ws["splits"]
            x, ids, weights, index = ws["rows"]
            return Received(x=x, x_sf=None, topk_ids=ids, topk_weights=weights, token_index=index)
        received = super().dispatch(batch)
        rows = [received.x.clone(), received.topk_ids.clone(), received.topk_weights.clone(),
                received.token_index.clone()]
        _WORKSPACES[self.key] = {"rows": rows, "splits": (self.send_splits, self.recv_splits, self.send_token)}
        return received


def _fault_due() -> bool:
    """Whether this point is past $AUTOSELECT_TEST_FAULT_AFTER points set up in this process (default 2)."""
    return _SETUPS[0] > int(os.environ.get("AUTOSELECT_TEST_FAULT_AFTER", "2"))


class _Later(ReferenceAllToAll):
    def setup(self, ctx, point):
        _SETUPS[0] += 1
        super().setup(ctx, point)


class CrashesLater(_Later):
    """Rank 1 dies (exit status 13) in a dispatch after the first $AUTOSELECT_TEST_FAULT_AFTER points."""

    name = "test_crashes_later"

    def dispatch(self, batch):
        if self.ctx.rank == 1 and _fault_due():
            os._exit(13)
        return super().dispatch(batch)


class HangsLater(_Later):
    """Rank 1 sleeps forever in a dispatch after the first $AUTOSELECT_TEST_FAULT_AFTER points."""

    name = "test_hangs_later"

    def dispatch(self, batch):
        if self.ctx.rank == 1 and _fault_due():
            while True:
                time.sleep(1)
        return super().dispatch(batch)


class WrongByteLater(_Later):
    """Flips one received byte on rank 1 after the first $AUTOSELECT_TEST_FAULT_AFTER points."""

    name = "test_wrong_byte_later"

    def dispatch(self, batch):
        received = super().dispatch(batch)
        if self.ctx.rank == 1 and _fault_due() and received.x.shape[0]:
            received.x[0, 5] ^= 0x01
        return received


class SetupOutOfMemory(ReferenceAllToAll):
    """Its setup's allocation fails (MemoryError) at more than 64 tokens per rank: a harness failure."""

    name = "test_setup_out_of_memory"

    def setup(self, ctx, point):
        if point.tokens_per_rank > 64:
            raise MemoryError(f"cannot allocate the workspace for {point.tokens_per_rank} tokens per rank")
        super().setup(ctx, point)
