"""vLLM's default's adapter on a gloo group of spawned ranks, with every torch.distributed call it makes counted.

:func:`run_ranks` spawns ``world_size`` processes; each joins a gloo group and, per case (a
backend, target vLLM release, DP-size path, dtype and token count), sets the adapter up, counts
the collectives of one gated round trip (:func:`bench.measure.gate_round_trip`: every byte and the
exact combine checked) and writes what it saw to ``rank<N>.json``, one report per case.
"""

from __future__ import annotations

import json
import os
from collections import Counter


def _rank_main(rank, world_size, directory, cases):
    import torch
    import torch.distributed as dist

    import bench.backends.allgather_reducescatter as agrs_module
    import bench.backends.reference_allgather_fused as fused_module
    from bench import backends
    from bench.backends import BenchContext
    from bench.measure import gate_round_trip
    from bench.synthetic import BenchPoint

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{directory}/store", rank=rank, world_size=world_size)
    group = dist.group.WORLD
    calls: Counter = Counter()

    def counted(name, real):
        def call(*args, **kwargs):
            if kwargs.get("group", group) is group:  # the data group (the gate agrees over the same group)
                calls[name] += 1
            return real(*args, **kwargs)
        return call

    for module in (agrs_module, fused_module):
        for name in ("all_gather_single", "reduce_scatter_single"):
            if hasattr(module, name):
                setattr(module, name, counted(name.replace("_single", ""), getattr(module, name)))
    dist.broadcast, dist.reduce = counted("broadcast", dist.broadcast), counted("reduce", dist.reduce)
    reports = []
    for case in cases:
        ctx = BenchContext(rank=rank, world_size=world_size, device="cpu", torch_device=torch.device("cpu"),
                           group=group, cpu_group=group, vllm_version=case["vllm_version"],
                           dp_sizes=case["dp_sizes"])
        adapter = backends.load(case["backend"])
        point = BenchPoint(case["tokens"], 256, 4, 8, world_size, case["dtype"])
        adapter.setup(ctx, point)
        batch = point.batch(rank)
        dist.barrier(group=group)
        calls.clear()
        # the gate's agreement (all_gather_object) is not one of the counted calls
        problem, _, _ = gate_round_trip(adapter, ctx, point, batch)
        reports.append({"problem": problem, "calls": dict(calls), "code_path": adapter.code_path(),
                        "footing": adapter.footing()})
        adapter.teardown()
    dist.barrier(group=group)  # no rank leaves while a peer is still in a collective
    dist.destroy_process_group()
    with open(f"{directory}/rank{rank}.json", "w") as f:
        json.dump(reports, f)
    # The report is written: leave without the interpreter's teardown, which now and then aborts in
    # a C++ destructor ("terminate called without an active exception") after everything above is done.
    os._exit(0)


def case(*, vllm_version="0.34.0", dp_sizes="equal", dtype="fp8_block128", tokens=4,
         backend="allgather_reducescatter") -> dict:
    """One point to run: the backend, the target release, the DP-size path, the dtype and tokens per rank."""
    return {"vllm_version": vllm_version, "dp_sizes": dp_sizes, "dtype": dtype, "tokens": tokens, "backend": backend}


def run_ranks(directory, world_size, cases):
    """Run :func:`_rank_main` on ``world_size`` spawned processes; returns, per rank, one report per case."""
    import torch.multiprocessing as mp

    mp.start_processes(_rank_main, args=(world_size, str(directory), cases), nprocs=world_size, join=True,
                       start_method="spawn")
    return [json.load(open(f"{directory}/rank{r}.json")) for r in range(world_size)]
