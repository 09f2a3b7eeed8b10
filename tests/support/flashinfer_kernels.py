"""FlashInfer's NVLink all-to-all kernels as their CUDA sources say they behave, on one CPU rank.

FlashInfer's Python API imports on a CPU machine but its kernels need a GPU. These stand-ins
replace only what needs CUDA — the compiled ops and the symmetric memory — so the real
Python classes (``MoeAlltoAll``, ``NVLinkOneSidedAlltoAll``) run unchanged over them; the
two-sided ``MnnvlMoe`` hard-codes ``device="cuda"`` in its Python, so its static methods are
replaced as a whole. Every behaviour cites the source line it follows (flashinfer-python
0.7.2.post1 unless noted; 0.6.18.post1 behaves the same in everything used here).

One process is one rank; several ranks are processes on a gloo group (:func:`run_ranks`). For
the one-sided kernels the workspace is then one file every rank maps (``torch.from_file``), a
rank writes into its peers' rows as the kernel writes over NVLink, and the kernels' flag
handshakes are gloo barriers; the two-sided FIFO transfers are gloo all-gathers. Rows land in a
shuffled slot order because the kernels pick slots with ``atomicAdd`` (one-sided
``moeA2ADispatchKernel``, ``moeAlltoAllKernels.cu:523-528``; two-sided
``computeCountAndSend``, ``csrc/trtllm_alltoall_prepare.cu:178-182``).
"""

from __future__ import annotations

import inspect
from types import SimpleNamespace

import torch

# csrc/nv_internal/tensorrt_llm/thop/moeAlltoAllMeta.h: MoeA2AMetaInfoIndex
META_NAMES = ["FLAG_VAL", "LOCAL_TOKEN_COUNTER", "SEND_COUNTERS", "RECV_COUNTERS",
              "DISPATCH_COMPLETION_FLAGS", "COMBINE_COMPLETION_FLAGS", "TOPK_TARGET_RANKS",
              "TOPK_SEND_INDICES", "EPLB_GATHERED_STATS", "PAYLOAD_DATA"]
K_MAX_TOP_K, K_MAX_PAYLOADS = 22, 6  # moeAlltoAllKernels.h:24-25
#: One-sided top_k instantiations: SWITCH_TOP_K, moeAlltoAllKernels.cu:104-163.
ONE_SIDED_TOP_K = (22, 18, 16, 14, 12, 10, 8, 6, 4, 2, 1)


def _align128(n: int) -> int:
    return (n + 127) & ~127


def _slot_order(n: int, seed: int = 7):
    """The order ``atomicAdd`` handed out slots in (any order is legal; shuffled here)."""
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed + n))


class Bound:
    """Records calls after binding them to ``real``'s signature (a wrong keyword, a missing or extra argument fails)."""

    def __init__(self, real, answer, *, has_self=False):
        self.sig = inspect.signature(real)
        self.answer, self.has_self, self.calls = answer, has_self, []

    def __call__(self, *args, **kwargs):
        if self.has_self:
            args = (None, *args)
        bound = self.sig.bind(*args, **kwargs)
        bound.apply_defaults()
        self.calls.append(bound)
        return self.answer(bound.arguments)


class OneSidedOps:
    """The ops of FlashInfer's one-sided JIT module (``csrc/trtllm_moe_alltoall.cu``) on one CPU rank."""

    def __init__(self):
        self.dispatches, self.combines = [], []
        #: False: dispatch does its bookkeeping but writes no payload row (a broken kernel)
        self.deliver = True

    # calculateOffsets, csrc/trtllm_moe_alltoall.cu:106-146
    @staticmethod
    def offsets(ep_size: int, max_tokens: int, eplb: int = 0) -> list[int]:
        o, off = [0] * 10, 0
        o[0] = off
        off += 4
        o[1] = off
        off += 4
        o[2] = off
        off += ep_size * 4
        o[3] = off
        off += ep_size * 4
        for i, size in ((4, ep_size * 4), (5, ep_size * 4), (6, max_tokens * K_MAX_TOP_K * 4),
                        (7, max_tokens * K_MAX_TOP_K * 4), (8, ep_size * eplb * 4)):
            off = _align128(off)
            o[i] = off
            off += size
        o[9] = _align128(off)
        return o

    def moe_a2a_get_aux_data_size(self, ep_size, max_num_tokens, eplb_stats_num_experts=0):
        return self.offsets(ep_size, max_num_tokens, eplb_stats_num_experts)[9]

    def moe_a2a_get_metainfo_index_pairs(self):
        names = [f"MOE_A2A_{n}_OFFSET_INDEX" for n in META_NAMES] + ["MOE_A2A_NUM_METAINFO_FIELDS"]
        return names, list(range(len(names)))

    def moe_a2a_initialize(self, workspace, ep_rank, ep_size, max_num_tokens, eplb_stats_num_experts=0):
        # moeA2AInitializeOp: memset this rank's slice, metainfo = the offsets (cu:154-178).
        # Higher ranks are made slow, so a peer that dispatches without waiting for every
        # rank's memset (no barrier after it, as in 0.6.18's get_workspace) loses its writes.
        if ep_size > 1:
            import time

            time.sleep(0.3 * ep_rank)
        workspace[ep_rank].zero_()
        return torch.tensor(self.offsets(ep_size, max_num_tokens, eplb_stats_num_experts), dtype=torch.int64)

    @staticmethod
    def _int32(workspace, rank, offset, count):
        return workspace[rank, offset : offset + 4 * count].view(torch.int32)

    def moe_a2a_dispatch(self, token_selected_experts, input_payloads, workspace, metainfo,
                         runtime_max_tokens_per_rank, ep_rank, ep_size, top_k, num_experts, enable_pdl,
                         eplb_local_stats=None, enable_rank_mask=False, active_rank_mask=None):
        # moeA2ADispatchOp, cu:182-367
        ids = token_selected_experts
        assert ids.dtype == torch.int32 and ids.dim() == 2 and ids.shape[1] == top_k
        assert 0 < len(input_payloads) <= K_MAX_PAYLOADS and num_experts >= ep_size
        n, t = ids.shape[0], runtime_max_tokens_per_rank
        assert n <= t
        sizes, total = [], 0
        for i, p in enumerate(input_payloads):
            assert p.dim() == 2 and p.shape[0] == n and p.is_contiguous(), f"payload {i}"
            b = ep_size * t * p.shape[1] * p.element_size()
            sizes.append(b)
            total += b
            if total % p.element_size():  # cu:269-271
                raise RuntimeError(f"Misaligned payload buffer {i} with element size {p.element_size()}")
        assert top_k in ONE_SIDED_TOP_K, "Unsupported top_k"
        o = [int(v) for v in metainfo.tolist()]
        if workspace.shape[1] < o[9] + total:  # cu:280-282
            raise RuntimeError(f"workspace size per rank insufficient, need {o[9] + total} bytes "
                               f"but has {workspace.shape[1]}")
        # moeA2ADispatchKernel, cu:444-640: target rank by contiguous ceil/floor partition
        # (compute_target_rank_id, cu:274-287); the first top-k lane per target rank sends
        # (__match_any_sync), the slot is atomicAdd(&send_counters[target]) (cu:498-534);
        # duplicates get target -1 / send index -1, which combine skips.
        base, rem = divmod(num_experts, ep_size)
        e = ids.long()
        target = torch.where(e < rem * (base + 1), e // (base + 1), rem + (e - rem * (base + 1)) // max(base, 1))
        first = torch.ones_like(target, dtype=torch.bool)
        for k in range(1, top_k):
            first[:, k] = ~(target[:, :k] == target[:, k : k + 1]).any(dim=1)
        send_idx = torch.full((n, top_k), -1, dtype=torch.int32)
        counters = [0] * ep_size
        for i in _slot_order(n, seed=17 * ep_rank).tolist():
            for k in range(top_k):
                if first[i, k]:
                    d = int(target[i, k])
                    send_idx[i, k] = counters[d]
                    counters[d] += 1
        target_ranks = torch.where(first, target, -1).to(torch.int32)
        self._int32(workspace, ep_rank, o[6], n * top_k).copy_(target_ranks.reshape(-1))
        self._int32(workspace, ep_rank, o[7], n * top_k).copy_(send_idx.reshape(-1))
        offset = o[9]
        for p, b in zip(input_payloads, sizes):
            row = p.shape[1] * p.element_size()
            rows = p.contiguous().view(torch.uint8).view(n, row)
            for d in range(ep_size if self.deliver else 0):
                sel = first & (target == d)
                tokens, lanes = sel.nonzero(as_tuple=True)
                plane = workspace[d, offset : offset + b].view(ep_size * t, row)
                plane[ep_rank * t + send_idx[tokens, lanes].long()] = rows[tokens]
            offset += b
        for d in range(ep_size):  # the last CTA stores send_counters into peers' recv_counters
            self._int32(workspace, d, o[3], ep_size)[ep_rank] = counters[d]
        _barrier(ep_size)  # completion flags: every peer's writes are visible after this
        self.dispatches.append(SimpleNamespace(payloads=[(tuple(p.shape), p.dtype) for p in input_payloads],
                                               runtime=t, sizes=sizes, counts=counters))
        recv_offsets = [ep_rank * workspace.stride(0) + o[9] + sum(sizes[:i]) for i in range(len(sizes))]
        return recv_offsets, sizes, _align128(o[9] + total), -1, 0

    def moe_a2a_sanitize_expert_ids(self, expert_ids, workspace, metainfo, ep_rank, invalid_expert_id, enable_pdl):
        # moeA2ASanitizeExpertIdsKernel, moeAlltoAllKernels.cu:1650-1672: rows at or past a
        # source rank's recv count get every id set to invalid; received rows keep theirs.
        o = [int(v) for v in metainfo.tolist()]
        ep, t, _ = expert_ids.shape
        counts = self._int32(workspace, ep_rank, o[3], ep)
        for src in range(ep):
            expert_ids[src, int(counts[src]):] = invalid_expert_id

    def moe_a2a_combine(self, payload, local_num_tokens, workspace, metainfo, runtime_max_tokens_per_rank,
                        ep_rank, ep_size, top_k, combine_payload_offset, payload_in_workspace=False,
                        output_dtype=None, output_scales=None, output_scalar_scale=1.0, sf_layout=None,
                        use_low_precision=False, enable_pdl=True, enable_rank_mask=False, active_rank_mask=None):
        # moeA2ACombineIntoOp, cu:387-579
        assert payload.dim() == 3 and payload.shape[0] == ep_size and payload.shape[1] == runtime_max_tokens_per_rank
        assert payload.dtype in (torch.bfloat16, torch.float16, torch.float32), "Unsupported dtype for MoE combine"
        assert output_dtype is None and output_scales is None and not use_low_precision
        nbytes = payload.numel() * payload.element_size()
        if not (combine_payload_offset >= 0 and combine_payload_offset + nbytes <= workspace.shape[1]):
            raise RuntimeError("workspace insufficient for combine payload region")  # cu:429-430
        o = [int(v) for v in metainfo.tolist()]
        t, row = runtime_max_tokens_per_rank, payload.shape[2] * payload.element_size()

        def region(rank):
            return workspace[rank, combine_payload_offset : combine_payload_offset + nbytes].view(ep_size * t, row)

        counts = self._int32(workspace, ep_rank, o[3], ep_size)
        staged = payload.reshape(ep_size * t, -1).contiguous().view(torch.uint8)
        for src in range(ep_size):  # moeA2APrepareCombineKernel copies only received rows (cu:1357-1408)
            c = int(counts[src])
            region(ep_rank)[src * t : src * t + c] = staged[src * t : src * t + c]
        _barrier(ep_size)  # combine readiness flags (cu:1432-1490)
        # moeA2ACombineKernel + vectorized_combine_impl (cu:1415-1512, 941-1060): per local
        # token, fp32 sum over k with send index >= 0 of row rank_id·T + send index of the
        # combine region of rank target[k], stored as the payload dtype.
        target = self._int32(workspace, ep_rank, o[6], local_num_tokens * top_k).view(local_num_tokens, top_k)
        send_idx = self._int32(workspace, ep_rank, o[7], local_num_tokens * top_k).view(local_num_tokens, top_k)
        out = torch.zeros(local_num_tokens, payload.shape[2], dtype=torch.float32)
        for d in range(ep_size):
            rows = region(d).view(payload.dtype).view(ep_size * t, -1).to(torch.float32)
            for k in range(top_k):
                take = (send_idx[:, k] >= 0) & (target[:, k] == d)
                out[take] += rows[ep_rank * t + send_idx[take, k].long()]
        _barrier(ep_size)  # no rank restages its region while a peer still reads it
        self.combines.append(SimpleNamespace(shape=tuple(payload.shape), dtype=payload.dtype))
        return out.to(payload.dtype)


def _barrier(ep_size: int) -> None:
    """The kernels' completion-flag handshake between ranks: a gloo barrier (nothing at ep 1)."""
    if ep_size > 1:
        import torch.distributed as dist

        dist.barrier()


class CpuSymmetricMemory:
    """What ``MnnvlMemory`` gives the one-sided kernels: an ``[ep, size]`` uint8 workspace whose row r is rank r's.

    At ep 1 a private tensor; with several ranks (processes) one file mapped shared by all
    (``torch.from_file``), so a rank's writes into a peer's row are what the peer reads, as over
    NVLink. ``directory`` (class attribute) holds the files.
    """

    allocated_map: dict = {}
    comm = None
    directory = None
    _count = 0

    def __init__(self, mapping, size: int):
        ep = mapping.moe_ep_size
        self.size = size
        if ep == 1:
            self.tensor = torch.full((1, size), 0xA5, dtype=torch.uint8)  # never-written bytes
        else:
            CpuSymmetricMemory._count += 1  # allocations are collective: same sequence on every rank
            path = f"{CpuSymmetricMemory.directory}/symmetric-{CpuSymmetricMemory._count}-{size}.bin"
            _barrier(ep)
            self.tensor = torch.from_file(path, shared=True, size=ep * size, dtype=torch.uint8).view(ep, size)
            _barrier(ep)
        self.ptr = self.tensor.data_ptr()
        self.mapped = True
        CpuSymmetricMemory.allocated_map[self.ptr] = SimpleNamespace(
            comm=SimpleNamespace(barrier=lambda: _barrier(ep)), mapped=True)

    @staticmethod
    def initialize():
        """No CUDA context or NVML to set up on the CPU."""

    @staticmethod
    def set_comm_from_config(mapping, config=None):
        CpuSymmetricMemory.comm = config.comm_backend

    def as_torch_strided_tensor(self, dtype):
        return self.tensor.view(dtype)


def install_one_sided(monkeypatch, directory=None):
    """Run FlashInfer's real one-sided Python over :class:`OneSidedOps` and :class:`CpuSymmetricMemory`; returns the ops.

    ``directory``: where several ranks' shared workspace files go.
    """
    from flashinfer.comm import trtllm_moe_alltoall as t

    ops = OneSidedOps()
    monkeypatch.setattr(CpuSymmetricMemory, "directory", directory)
    monkeypatch.setattr(t, "get_moe_alltoall_module", lambda *a, **k: ops)
    monkeypatch.setattr(t, "MnnvlMemory", CpuSymmetricMemory)
    monkeypatch.setattr(t.MoeAlltoAll, "_WORKSPACE_CACHE", {})
    monkeypatch.setattr(t.MoeAlltoAll, "_METAINFO_INDEX", None)
    return ops


def _all_gather(obj, ep_size: int) -> list:
    """Every rank's ``obj`` (the FIFO transfers between ranks, here over gloo); ``[obj]`` at ep 1."""
    if ep_size == 1:
        return [obj]
    import torch.distributed as dist

    out = [None] * ep_size
    dist.all_gather_object(out, obj)
    return out


class TwoSidedKernels:
    """``MnnvlMoe``'s static methods, answered as its kernels do (CPU; ranks exchange over gloo)."""

    def __init__(self, monkeypatch):
        from flashinfer.comm.trtllm_alltoall import MnnvlMoe, MoEAlltoallInfo

        self.info_cls = MoEAlltoallInfo
        self.workspaces = 0
        self.routes = {}  # id(info) -> per-source send lists, for moe_comm

        def patch(name, answer):
            rec = Bound(getattr(MnnvlMoe, name), answer)
            monkeypatch.setattr(MnnvlMoe, name, staticmethod(rec))
            return rec

        self.get_ws = patch("get_moe_workspaces", self._workspace)
        self.get_prep_ws = patch("get_moe_prepare_workspace", self._workspace)
        self.prepare = patch("mnnvl_moe_alltoallv_prepare_without_allgather", self._prepare)
        self.alltoallv = patch("mnnvl_moe_alltoallv", self._alltoallv)
        self.combine = patch("mnnvl_moe_alltoallv_combine", self._combine)

    def _workspace(self, a):
        # get_moe_workspaces sizes by mapping.tp_size and returns a uint64 [ep, size/8] tensor
        self.workspaces += 1
        return torch.zeros((a["mapping"].tp_size, 8), dtype=torch.uint64)

    @staticmethod
    def _sends(ids, ep: int, experts: int, source: int):
        """``computeCountAndSend`` (prepare.cu:150-196) of one source rank: per target, the tokens
        routed there in atomicAdd_block order, and each one's first matching top-k lane."""
        per_rank = experts // ep  # compute_target_rank_id: experts % ep == 0 asserted
        target = ids.long() // per_rank
        sends = []
        for d in range(ep):
            hit = target == d
            tokens = hit.any(dim=1).nonzero().reshape(-1)
            order = tokens[_slot_order(len(tokens), seed=31 * source + d)]
            lanes = hit[order].int().argmax(dim=1)
            sends.append((order, lanes))
        return sends

    def _prepare(self, a):
        ids, scales, t, ep, k = a["expert_ids"], a["scales"], a["max_token_count_per_rank"], a["ep_size"], a["top_k"]
        rank, experts, slot_count = a["ep_rank"], a["expert_count"], a["slot_count"]
        assert ids.dtype == torch.int32 and 1 <= k <= 32  # trtllm_alltoall_prepare.cu:540
        assert experts % ep == 0 and experts % 4 == 0 and slot_count % 4 == 0
        everyone = _all_gather((ids, scales), ep)
        sends = [self._sends(everyone[s][0], ep, experts, s) for s in range(ep)]
        mine = sends[rank]
        # gatherSendIndice / gatherBackwardIndice: this rank's sends, target by target (moveIndiceDevice)
        send = torch.cat([order for order, _ in mine]).to(torch.int32)
        backward = torch.cat([order * k + lanes for order, lanes in mine]).to(torch.int32)
        send_cumsum = torch.tensor([len(o) for o, _ in mine], dtype=torch.int32).cumsum(0).to(torch.int32)
        # what this rank receives, source by source: counts, and recvIndice[i] = i (prepare.cu:272-278)
        received = [(s, sends[s][rank][0]) for s in range(ep)]
        recv_cumsum = torch.tensor([len(o) for _, o in received], dtype=torch.int32).cumsum(0).to(torch.int32)
        n = int(recv_cumsum[-1])
        recv = torch.arange(n, dtype=torch.int32)
        alloc = t * ep
        # allToAllMetadataDevice (prepare.cu:394-516): the sent tokens' ids, other ranks' experts
        # replaced by slot_count, and their weights; memsetExpertIdsDevice (prepare.cu:518-527):
        # ids of rows past the total = slot_count. Rows past it in the weights stay torch.empty.
        out_ids = torch.full((alloc, k), slot_count, dtype=torch.int32)
        out_scales = torch.full((alloc, k), float("nan"), dtype=torch.float32)
        got_ids = torch.cat([everyone[s][0][o.long()] for s, o in received])
        per_rank = experts // ep
        out_ids[:n] = torch.where(got_ids.long() // per_rank == rank, got_ids, slot_count)
        out_scales[:n] = torch.cat([everyone[s][1][o.long()] for s, o in received])
        info = self.info_cls(None, send_cumsum, send, recv_cumsum, recv, backward, alloc)
        self.routes[id(info)] = (ep, rank, received, sends)
        return info, out_ids, out_scales, None

    def _alltoallv(self, a):
        x, info = a["x"], a["alltoall_info"]
        assert x.dim() == 2, "only 2D tensor supported, please reshape."
        assert (x.shape[1] * x.element_size()) % 16 == 0, "input.size(1) must be aligned to 16 bytes"
        ep, rank, received, _ = self.routes[id(info)]
        everyone = _all_gather(x, ep)
        # moe_comm: the i-th received row goes to output[recvIndices[i]] (the first total rows);
        # the rest of the torch.empty output is garbage
        out = torch.empty((info.local_token_allocation_count, x.shape[1]), dtype=x.dtype)
        out.view(torch.uint8).fill_(0x5A)
        rows = torch.cat([everyone[s][o.long()] for s, o in received])
        out[info.recv_rank_local_indices[: rows.shape[0]].long()] = rows
        return out

    def _combine(self, a):
        x, info, k, t = a["x"], a["alltoall_info"], a["top_k"], a["token_count"]
        assert x.dim() == 2
        ep, rank, _, sends = self.routes[id(info)]
        everyone = _all_gather(x, ep)
        # moe_comm backwards: peer d returns, in its receive order, the rows of the tokens this
        # rank sent it; each lands at slot token * top_k + first lane of a zeros buffer, which is
        # then summed over top_k (trtllm_alltoall.py mnnvl_moe_alltoallv_combine)
        out = torch.zeros((t * k, x.shape[1]), dtype=x.dtype)
        for d in range(ep):
            start = sum(len(sends[s][d][0]) for s in range(rank))  # rows from lower ranks come first on d
            order, lanes = sends[rank][d]
            out[(order * k + lanes).long()] = everyone[d][start : start + len(order)]
        return torch.sum(out.reshape(t, k, x.shape[1]), dim=1)


def install_moe_ep_platform(monkeypatch):
    """Pass moe_ep's NVLink platform check (NVML: every NVLink up), the one GPU query on its one- and
    two-sided paths, and skip ``MnnvlMemory.initialize`` (a CUDA driver call) that the two-sided
    constructor makes (0.7.2 ``nvlink_two_sided/communication.py:53``)."""
    from flashinfer.comm import mnnvl
    from flashinfer.moe_ep.backends.split.comm import nvlink_common
    from flashinfer.moe_ep.backends.split.comm.nvlink_one_sided import communication as one_sided
    from flashinfer.moe_ep.backends.split.comm.nvlink_two_sided import communication as two_sided

    for module in (nvlink_common, one_sided, two_sided):
        monkeypatch.setattr(module, "nvlink_platform_supported", lambda: True)
    monkeypatch.setattr(mnnvl.MnnvlMemory, "initialize", staticmethod(lambda: None))


def _rank_main(rank, world_size, directory, backend, dtype, tokens, top_k, api):
    """One rank: a FlashInfer adapter through the gate and a short timing on a gloo group."""
    import json
    import os

    import pytest
    import torch.distributed as dist

    from bench import backends
    from bench.backends import BenchContext
    from bench.backends import _flashinfer as fi
    from bench.measure import run_point
    from bench.synthetic import BenchPoint

    dist.init_process_group("gloo", init_method=f"file://{directory}/store", rank=rank, world_size=world_size)
    group = dist.group.WORLD
    # the two-sided API follows the target release: MnnvlMoe up to vLLM 0.33, flashinfer.moe_ep from 0.34
    ctx = BenchContext(rank=rank, world_size=world_size, device="cpu", torch_device=torch.device("cpu"),
                       group=group, cpu_group=group, local_rank=rank,
                       vllm_version="0.34.0" if api == "moe_ep" else "0.33.0")
    with pytest.MonkeyPatch.context() as m:
        if backend == "flashinfer_nvlink_one_sided":
            ops = install_one_sided(m, directory)
            if api == "moe_ep":
                install_moe_ep_platform(m)
            else:
                m.setattr(fi, "has_moe_ep", lambda: False)  # as on FlashInfer 0.6
        else:
            TwoSidedKernels(m)
            if api == "moe_ep":
                install_moe_ep_platform(m)
        w = BenchPoint(tokens, 512, top_k, 32, world_size, dtype)
        adapter = backends.load(backend)
        adapter.setup(ctx, w)
        used = "moe_ep" if getattr(adapter, "use_moe_ep", False) else "legacy"
        received = adapter.dispatch(w.batch(rank, ctx.torch_device))
        valid_rows = int(received.valid.sum())
        adapter.combine(torch.zeros(received.x.shape[0], 512, dtype=torch.bfloat16))
        outcome = run_point(adapter, ctx, w, min_samples=3, min_time_s=0.0, timeout_s=0.5)
        adapter.teardown()
        sent = ops.dispatches[0].counts if backend == "flashinfer_nvlink_one_sided" else None
    dist.barrier()
    dist.destroy_process_group()
    with open(f"{directory}/rank{rank}.json", "w") as f:
        json.dump({"status": outcome.status, "error": outcome.error, "api": used, "rows": int(received.x.shape[0]),
                   "valid_rows": valid_rows, "expected_rows": int(w.destinations()[:, rank].sum()),
                   "sent": sent}, f)
    # The report is written: leave without the interpreter's teardown, which now and then aborts in a
    # C++ destructor after the group is gone ("terminate called without an active exception", SIGABRT).
    os._exit(0)


def run_ranks(directory, world_size, backend, dtype, tokens, top_k, api="legacy"):
    """Run :func:`_rank_main` on ``world_size`` spawned processes; returns each rank's report."""
    import json

    import torch.multiprocessing as mp

    mp.start_processes(_rank_main, args=(world_size, str(directory), backend, dtype, tokens, top_k, api),
                       nprocs=world_size, join=True, start_method="spawn")
    return [json.load(open(f"{directory}/rank{r}.json")) for r in range(world_size)]
