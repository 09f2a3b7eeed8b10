"""DeepEP low-latency fp8 dispatch in all three scale formats on this node's GPUs, checked by the real gate.

Run by ``perf/deepep_gpu_check.sh`` (needs deep_ep and 2/4/8 GPUs), one process per GPU:

    python3 -m torch.distributed.run --nproc_per_node 8 perf/deepep_ll_fp8_modes.py

``autoselect bench`` runs the scale format vLLM uses on this GPU (SM90: fp32 scales; SM100:
power-of-two scales packed as UE8M0). This script runs the ``deepep_low_latency`` adapter with
each format in turn -- ``round_scale``/``use_ue8m0`` = (False, False), (True, False), (True, True)
-- so one node checks that DeepEP's in-kernel cast returns the workload's fp8 bytes and scales
bit-exactly in every format, then a control: bf16 rows doubled (block amax 896·2**s) must fail
the gate on the scales. Prints one ``CHECK ...: PASS|FAIL`` line per case (rank 0); exits 1 on
any FAIL.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import sys

MODES = [(False, False), (True, False), (True, True)]  # (round_scale, use_ue8m0)


def main() -> int:
    """Set up the adapter once, run every scale format and the control, report from rank 0."""
    import torch
    import torch.distributed as dist

    from bench.backends import BenchContext
    from bench.backends import deepep_common as common
    from bench.backends.deepep_low_latency import DeepepLowLatency
    from bench.measure import gate_round_trip
    from bench.synthetic import BenchPoint

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=600))
    cpu_group = dist.new_group(backend="gloo")
    ctx = BenchContext(rank=rank, world_size=world, device="cuda", torch_device=torch.device("cuda", local_rank),
                       group=dist.group.WORLD, cpu_group=cpu_group, local_rank=local_rank)
    adapter = DeepepLowLatency()
    reason = adapter.unavailable_reason(ctx)
    if reason:
        if rank == 0:
            print(f"CHECK deepep_low_latency available: FAIL ({reason})")
        return 1
    failed = False
    for hidden, top_k, experts in ((7168, 8, 256), (2880, 4, 128)):
        w = BenchPoint(64, hidden, top_k, experts, world, "fp8_block128", seed=11)
        adapter.setup(ctx, w)
        base = adapter.plan
        batch = w.batch(rank, ctx.torch_device)
        cases = [(f"round_scale={rs} use_ue8m0={ue}", dataclasses.replace(base, round_scale=rs, ue8m0=ue), 1)
                 for rs, ue in MODES]
        cases.append(("control: doubled bf16 rows fail on the scales", base, 2))
        for label, plan, factor in cases:
            adapter.plan, adapter.cache = plan, {}
            if factor != 1:
                x, idx, weights = adapter._inputs(batch)
                adapter.cache["inputs"] = (batch, (x * factor, idx, weights))
            first = gate_round_trip(adapter, ctx, w, batch)[0]  # the first problem over ranks, or None
            good = (first is None) if factor == 1 else (first is not None and "scale byte" in first)
            failed |= not good
            if rank == 0:
                detail = f" ({first})" if first else ""
                print(f"CHECK LL fp8 hidden {hidden} (sent {base.hidden}) {label}: {'PASS' if good else 'FAIL'}{detail}",
                      flush=True)
        adapter.teardown()
    common.release_buffer()
    dist.barrier(group=cpu_group)
    dist.destroy_process_group()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
