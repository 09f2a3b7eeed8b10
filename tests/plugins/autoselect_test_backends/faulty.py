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
