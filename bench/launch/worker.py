"""One rank of a worker group: joined once, the backend loaded once, then job after job from stdin.

``python -m bench.launch DIR RANK`` reads the group's :class:`GroupConfig` from
``DIR/group.json``, joins the torch.distributed group (gloo on CPU, NCCL on CUDA, rendezvous
through a file store in ``DIR``), loads the adapter, agrees with its peers on whether the
backend can run here, reports ``ready`` and then runs each job line its stdin brings, until
``close`` or EOF. Under torchrun the same :class:`WorkerSession` runs in the calling process.

Per point: the harness builds the point (payloads, routing: :meth:`WorkerSession.prepare`;
a failure there is a harness failure, agreed over the ranks, and the group goes on), asks the
adapter whether it can set the point up in this process (``needs_fresh_process``), sets it up,
gates and times it (:func:`bench.measure.run_point`, which re-gates every point of every
job) and tears it down. An exception anywhere else ends the worker (its peers may be blocked
in a collective): the parent kills the group and restarts it for the points left.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import re
import sys
import time
import traceback
from collections import OrderedDict
from pathlib import Path

from bench import backends
from bench.events import PointPhase
from bench.launch.processes import ERROR_EXIT, die_with_parent
from bench.launch.protocol import HARNESS_ERROR, GroupConfig, Job, PointDone
from bench.measure import agree, first_line, run_point
from bench.synthetic import BenchPoint

#: Messages of RuntimeErrors that mean an allocation failed or an integer overflowed (torch's wording).
_HARNESS_MESSAGES = re.compile(r"can't allocate memory|out of memory|Overflow when unpacking|"
                               r"value cannot be converted to type .* without overflow|numel: integer multiplication overflow",
                               re.IGNORECASE)


#: How many recent points a worker keeps with their harness tables (see :meth:`WorkerSession.prepare`).
POINT_CACHE = 8


def harness_failure(error: BaseException) -> bool:
    """Whether ``error`` is the harness's (memory, overflow), not a verdict on the backend."""
    if isinstance(error, (MemoryError, OverflowError)):
        return True
    oom = getattr(sys.modules.get("torch"), "OutOfMemoryError", None)
    if oom is not None and isinstance(error, oom):
        return True
    return isinstance(error, (RuntimeError, ValueError)) and bool(_HARNESS_MESSAGES.search(str(error)))


def harness_message(error: BaseException, where: str) -> str:
    """The error text of a harness failure: what failed, where, and that the backend is not blamed."""
    return (f"harness failure {where}: {first_line(error)}; this point does not fit this host "
            "(lower --tokens or --hidden); not counted against the backend")


class WorkerSession:
    """One rank's side of a worker group (or, under torchrun, of the calling processes)."""

    def __init__(self, config: GroupConfig, rank: int, world_size: int, emit, *, init_method: str | None = None):
        self.config, self.rank, self.world_size = config, rank, world_size
        self.emit = emit
        self.say = emit if rank == 0 else (lambda event: None)  # rank 0 reports progress
        self.init_method = init_method
        self.own_group = False
        self.ctx = self.adapter = None
        self.adapter_may_need_fresh = True
        self.stage = "the start-up"  # where an exception came from, for its message
        self._points: OrderedDict = OrderedDict()  # recent BenchPoints, their tables generated once

    def open(self) -> str | None:
        """Join the process group and load the backend; returns why it cannot run here (agreed), or None."""
        import torch
        import torch.distributed as dist

        cfg = self.config
        local_rank = int(os.environ.get("LOCAL_RANK", self.rank))
        if cfg.device == "cuda":
            torch.cuda.set_device(local_rank)
            torch_device = torch.device("cuda", local_rank)
        else:
            torch_device = torch.device("cpu")
            if "OMP_NUM_THREADS" not in cfg.env_dict:
                torch.set_num_threads(1)
        self.own_group = not dist.is_initialized()
        if self.own_group:
            dist.init_process_group(
                "nccl" if cfg.device == "cuda" else "gloo", init_method=self.init_method or "env://",
                rank=self.rank, world_size=self.world_size,
                timeout=datetime.timedelta(seconds=max(60.0, cfg.setup_timeout_s)))
        group = dist.group.WORLD
        cpu_group = dist.new_group(backend="gloo") if cfg.device == "cuda" else group
        self.ctx = backends.BenchContext(rank=self.rank, world_size=self.world_size, device=cfg.device,
                                         torch_device=torch_device, group=group, cpu_group=cpu_group,
                                         local_rank=local_rank, nvlinks_all_up=cfg.nvlinks_all_up,
                                         vllm_version=cfg.vllm_version, gpu_arch=cfg.gpu_arch,
                                         dp_sizes=cfg.dp_sizes)
        self.adapter = backends.load(cfg.backend, cfg.via)
        # every rank loads the same class: one that keeps the base hook never asks (no collective)
        self.adapter_may_need_fresh = type(self.adapter).needs_fresh_process is not backends.Backend.needs_fresh_process
        return agree(self.ctx, self.adapter.unavailable_reason(self.ctx))

    def prepare(self, job: Job, tokens: int):
        """The harness's part of a point: ``(point, batch, problem)``; problem (agreed) is a harness failure.

        The :class:`BenchPoint` of a point measured again (a refine round, a repeated job) is the
        same object: its payload table, routing and expected combine, deterministic from the
        seed and never handed to the adapter, are generated once per group (the last
        :data:`POINT_CACHE` points with a small table). The batch is a new tensor every time.
        """
        point = batch = problem = None
        key = (tokens, job.hidden, job.top_k, job.experts, job.wire_dtype, job.routing, job.seed)
        try:
            point = self._points.pop(key, None) or BenchPoint(
                tokens, job.hidden, job.top_k, job.experts, self.world_size, job.wire_dtype,
                routing=job.routing, seed=job.seed)
            batch = point.batch(self.rank, self.ctx.torch_device)
            point.destinations(self.ctx.torch_device)  # the routing tables the gate reads
            if point.payload_table(self.ctx.torch_device) is not None:
                self._points[key] = point
                while len(self._points) > POINT_CACHE:
                    self._points.popitem(last=False)
        except Exception as e:  # noqa: BLE001 - whatever it is, the adapter was not involved
            problem = harness_message(e, "building the point")
        return point, batch, agree(self.ctx, problem)

    def run_job(self, job_id: int, job: Job) -> bool:
        """Run every point of ``job``; False when the adapter asked for a fresh process (the rest is not run)."""
        import torch
        import torch.distributed as dist

        started = time.monotonic()
        for tokens in job.tokens:
            t0 = time.monotonic()
            self.say({"event": "phase", "job": job_id, "tokens": tokens, "phase": "setup"})
            point, batch, problem = self.prepare(job, tokens)
            if problem:
                self.say({"event": "result", "job": job_id, "tokens": tokens, "status": HARNESS_ERROR,
                          "error": problem, "fields": {}, "timing": None, "timing_note": None,
                          "seconds": time.monotonic() - t0})
                continue
            fresh = self.adapter_may_need_fresh and agree(self.ctx, self.adapter.needs_fresh_process(self.ctx, point))
            if fresh:
                self.say({"event": "fresh", "job": job_id, "tokens": tokens, "reason": fresh})
                return False
            self.stage = f"the backend's setup at {tokens} tokens/rank"
            self.adapter.setup(self.ctx, point)
            self.stage = f"the round trips at {tokens} tokens/rank"
            try:
                outcome = run_point(self.adapter, self.ctx, point, batch=batch, **job.rule,
                                    on_phase=lambda p, t=tokens: self.say(
                                        {"event": "phase", "job": job_id, "tokens": t, "phase": p}))
                fields = dict(outcome.fields or {})
                path = self.adapter.code_path()
                if path:  # merged into the result's versions by the sweep's recorder
                    fields["code_path"] = path
                if outcome.status == "ok":  # calls, DP sizes, via: result fields, set by the recorder
                    fields.update(self.adapter.footing())
            finally:
                self.adapter.teardown()
            if self.config.device == "cuda":
                torch.cuda.synchronize()
            self.say({"event": "result", "job": job_id, "tokens": tokens, "status": outcome.status,
                      "error": outcome.error, "fields": fields, "timing": outcome.timing,
                      "timing_note": outcome.timing_note, "seconds": time.monotonic() - t0})
            self.stage = "between points"
            if self.world_size > 1:
                dist.barrier(group=self.ctx.cpu_group)
        self.say({"event": "job_done", "job": job_id, "seconds": time.monotonic() - started})
        return True

    def close(self) -> None:
        """Leave the process group (if this session joined it)."""
        import torch.distributed as dist

        if self.own_group and dist.is_initialized():
            with contextlib.suppress(Exception):
                dist.destroy_process_group()


def read_config(directory: Path) -> GroupConfig:
    """The :class:`GroupConfig` the parent wrote to ``DIR/group.json``."""
    d = json.loads((directory / "group.json").read_text())
    return GroupConfig(**{**d, "env": tuple(tuple(p) for p in d["env"])})


def main(argv: list[str], channel=None) -> int:
    """``python -m bench.launch DIR RANK``: one rank of one backend's worker group.

    ``channel``: the file the job lines arrive on (default stdin; a forked worker's FIFO).
    """
    die_with_parent()
    channel = channel or sys.stdin
    directory, rank = Path(argv[0]), int(argv[1])
    config = read_config(directory)
    events = open(directory / f"rank{rank}.jsonl", "a", buffering=1)

    def emit(event):
        events.write(json.dumps(event) + "\n")
        events.flush()

    session = WorkerSession(config, rank, config.world_size, emit,
                            init_method=f"file://{directory / 'rendezvous'}")
    job_id = None
    try:
        reason = session.open()
        emit({"event": "ready", "rank": rank, "pid": os.getpid(), "unavailable": reason})
        for line in iter(channel.readline, ""):
            message = json.loads(line)
            if message.get("op") == "close":
                break
            job_id = message["id"]
            session.run_job(job_id, Job.from_dict(message["job"]))
        session.close()
    except BaseException as e:  # report, then die: peers blocked in a collective get killed
        harness = harness_failure(e)
        message = harness_message(e, f"in {session.stage}") if harness else f"{type(e).__name__}: {e}".strip()
        emit({"event": "error", "rank": rank, "job": job_id, "message": message, "harness": harness})
        traceback.print_exc()
        events.close()
        os._exit(ERROR_EXIT)
    events.close()
    return 0


def serve_in_process(config: GroupConfig, job: Job, on_event) -> None:
    """torchrun mode: this process is one rank of the group (no isolation: torchrun owns the processes).

    ``on_event`` gets what :meth:`bench.launch.WorkerGroup.run` passes (phases and rank 0's
    :class:`PointDone`); a point that needs a fresh process is an ``error`` here.
    """
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    for key, value in config.env:
        os.environ[key] = value

    def translate(ev):
        if ev["event"] == "phase":
            on_event(PointPhase(config.backend, ev["tokens"], ev["phase"]))
        elif ev["event"] == "result":
            on_event(PointDone(config.backend, ev["tokens"], ev["status"], ev.get("error"), ev.get("fields") or {},
                               ev.get("timing"), ev.get("timing_note"), ev.get("seconds")))
        elif ev["event"] == "fresh":
            at = list(job.tokens).index(ev["tokens"])
            for t in job.tokens[at:]:
                on_event(PointDone(config.backend, t, "error", f"needs a fresh process ({ev['reason']}); "
                                   "under torchrun the processes are torchrun's: run it without torchrun"))

    session = WorkerSession(config, rank, world, translate)
    try:
        reason = session.open()
        if reason:
            for t in job.tokens:
                translate({"event": "result", "tokens": t, "status": "unavailable", "error": reason})
            return
        session.run_job(1, job)
    finally:
        session.close()
