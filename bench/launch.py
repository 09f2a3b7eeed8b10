"""Process launch: one process per rank, each backend in fresh workers, wall-clock limits.

The parent (:func:`run_backend`) starts ``world_size`` workers (``python -m bench.launch
JOB RANK``) in a process group of their own, so that one ``killpg`` removes them and
anything they started (a JIT compiler ...). Workers join a torch.distributed group (gloo on
CPU, NCCL on CUDA, rendezvous through a file store in the job's temporary directory), run
every point of one backend, and append JSON events to ``rank<N>.jsonl`` there. The parent
watches those files and the processes:

- a worker that exits non-zero (a crash, a CUDA error, ``os._exit``) marks the current
  point ``error`` with the tail of its stderr;
- a point that overruns its wall-clock limit (setup: ``setup_timeout_s``, measuring:
  ``2 · timeout_s + 10 s``) is ``timeout``;
- either way the group is killed and the remaining points run in fresh workers.

Workers die with the parent (``PR_SET_PDEATHSIG`` on Linux); the parent kills its groups
on return, on exceptions, on Ctrl-C and on SIGTERM/SIGHUP (see :func:`signals_raise`).

Under ``torchrun`` (``RANK``/``WORLD_SIZE`` set) the sweep runs in the calling processes
instead (:func:`serve_job` directly): torchrun owns the processes.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

#: Extra wall-clock seconds a measuring point gets beyond twice its stopping-rule timeout.
MEASURE_GRACE_S = 10.0
#: How often the parent polls the workers' event files.
POLL_S = 0.02
#: Exit status of a worker that reported its own exception (an ``error`` event) first.
ERROR_EXIT = 3
#: How long an ``error`` event waits for a peer's abnormal exit, which is then named instead.
DEATH_WAIT_S = 2.0


def under_torchrun() -> bool:
    """Whether this process was started by torchrun (``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK`` set)."""
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))


def torchrun_rank() -> int:
    """This process's rank under torchrun, 0 otherwise."""
    return int(os.environ.get("RANK", "0")) if under_torchrun() else 0


def measure_limit_s(timeout_s: float) -> float:
    """Wall-clock limit of one point's gate + timing: ``2 · timeout_s + MEASURE_GRACE_S``."""
    return 2 * timeout_s + MEASURE_GRACE_S


# --------------------------------------------------------------------------------------
# Worker side.


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies (no orphans)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def serve_job(job: dict, rank: int, world_size: int, emit, *, init_method: str | None = None) -> None:
    """Run every point of ``job`` (one backend) on this rank; report through ``emit(event)``.

    Events: ``ready``; ``phase`` (tokens, phase: setup|gate|measure); ``unavailable``
    (reason, rank 0); ``result`` (tokens, status, error, fields, timing, timing_note; rank 0,
    which also appends the timing to :data:`TIMING_LOG_ENV`'s file); ``done``.
    Exceptions propagate: the caller reports them and exits.
    """
    import datetime

    import torch
    import torch.distributed as dist

    from bench import backends
    from bench.measure import run_point
    from bench.workload import BenchPoint

    device = job["device"]
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    if device == "cuda":
        torch.cuda.set_device(local_rank)
        torch_device = torch.device("cuda", local_rank)
    else:
        torch_device = torch.device("cpu")
        if "OMP_NUM_THREADS" not in job.get("env", {}):
            torch.set_num_threads(1)
    own_group = not dist.is_initialized()
    if own_group:
        dist.init_process_group(
            "nccl" if device == "cuda" else "gloo",
            init_method=init_method or "env://",
            rank=rank,
            world_size=world_size,
            timeout=datetime.timedelta(seconds=max(60.0, job["setup_timeout_s"])),
        )
    group = dist.group.WORLD
    cpu_group = dist.new_group(backend="gloo") if device == "cuda" else group
    ctx = backends.BenchContext(rank=rank, world_size=world_size, device=device,
                                torch_device=torch_device, group=group, cpu_group=cpu_group,
                                local_rank=local_rank, nvlinks_all_up=job.get("nvlinks_all_up"))
    emit({"event": "ready", "rank": rank, "pid": os.getpid()})
    try:
        adapter = backends.load(job["backend"])
        reason = adapter.unavailable_reason(ctx)
        reasons = [None] * world_size
        if world_size > 1:
            dist.all_gather_object(reasons, reason, group=cpu_group)
        else:
            reasons = [reason]
        first = next((r for r in reasons if r), None)
        if first:
            if rank == 0:
                emit({"event": "unavailable", "reason": first})
            return
        say = emit if rank == 0 else (lambda event: None)  # rank 0 reports progress
        for tokens in job["points"]:
            say({"event": "phase", "tokens": tokens, "phase": "setup"})
            point = BenchPoint(tokens, job["hidden"], job["top_k"], job["experts"], world_size,
                                job["dtype"], routing=job["routing"], seed=job["seed"])
            adapter.setup(ctx, point)
            try:
                outcome = run_point(
                    adapter, ctx, point, max_noise=job["max_noise"],
                    min_samples=job["min_samples"], min_time_s=job["min_time_s"],
                    timeout_s=job["timeout_s"],
                    on_phase=lambda p, t=tokens: say({"event": "phase", "tokens": t, "phase": p}),
                )
            finally:
                adapter.teardown()
            if device == "cuda":
                torch.cuda.synchronize()
            if rank == 0:
                emit({"event": "result", "tokens": tokens, "status": outcome.status,
                      "error": outcome.error, "fields": outcome.fields,
                      "timing": outcome.timing, "timing_note": outcome.timing_note})
                log_timing(job["backend"], tokens, outcome, dtype=job["dtype"])
            if world_size > 1:
                dist.barrier(group=cpu_group)
    finally:
        if own_group and dist.is_initialized():
            with contextlib.suppress(Exception):
                dist.destroy_process_group()
    emit({"event": "done"})


#: Environment variable naming a file to which rank 0 appends one JSON line per point: how
#: it was timed (``graph``, ``eager`` with the reason, ``cpu``). The store has no column for
#: it; ``perf/gpu_check.sh`` reads it to fail when a row it expects replayed was eager.
TIMING_LOG_ENV = "AUTOSELECT_BENCH_TIMING_LOG"


def log_timing(backend: str, tokens: int, outcome, *, dtype: str | None = None) -> None:
    """Append ``outcome``'s timing mode to the file named by ``$AUTOSELECT_BENCH_TIMING_LOG`` (if set)."""
    path = os.environ.get(TIMING_LOG_ENV)
    if not path:
        return
    line = {"backend": backend, "dtype": dtype, "tokens": tokens, "status": outcome.status,
            "timing": outcome.timing, "timing_note": outcome.timing_note}
    with open(path, "a") as f:
        f.write(json.dumps(line) + "\n")


def _worker_main(argv: list[str]) -> int:
    """``python -m bench.launch JOB RANK``: one rank of one backend's job."""
    _die_with_parent()
    job_path, rank = Path(argv[0]), int(argv[1])
    job = json.loads(job_path.read_text())
    events = open(job_path.parent / f"rank{rank}.jsonl", "a", buffering=1)

    def emit(event):
        events.write(json.dumps(event) + "\n")
        events.flush()

    try:
        serve_job(job, rank, job["world_size"], emit,
                  init_method=f"file://{job_path.parent / 'rendezvous'}")
    except BaseException as e:  # report, then die: peers blocked in a collective get killed
        import traceback

        emit({"event": "error", "rank": rank, "message": f"{type(e).__name__}: {e}".strip()})
        traceback.print_exc()
        events.close()
        os._exit(ERROR_EXIT)
    events.close()
    return 0


# --------------------------------------------------------------------------------------
# Parent side.


class _EventReader:
    """Reads complete new JSON lines from the workers' event files."""

    def __init__(self, directory: Path, world_size: int):
        self.paths = [directory / f"rank{r}.jsonl" for r in range(world_size)]
        self.offsets = [0] * world_size
        self.partial = [""] * world_size

    def read(self) -> list[dict]:
        """New events from every rank, rank 0 first."""
        out = []
        for r, path in enumerate(self.paths):
            try:
                with open(path) as f:
                    f.seek(self.offsets[r])
                    chunk = f.read()
                    self.offsets[r] = f.tell()
            except FileNotFoundError:
                continue
            text = self.partial[r] + chunk
            lines = text.split("\n")
            self.partial[r] = lines.pop()
            out.extend(json.loads(line) for line in lines if line.strip())
        return out


def _stderr_tail(path: Path, lines: int = 3) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except FileNotFoundError:
        return ""
    return " | ".join(text[-lines:])


def _died(procs, directory: Path) -> str | None:
    """"rank N died (...)" for the first worker that exited abnormally (not via its own error report)."""
    for rank, p in enumerate(procs):
        code = p.poll()
        if code is not None and code not in (0, ERROR_EXIT):
            tail = _stderr_tail(directory / f"rank{rank}.stderr")
            why = f"signal {-code}" if code < 0 else f"exit status {code}"
            return f"rank {rank} died ({why})" + (f": {tail}" if tail else "")
    return None


def _kill_group(procs) -> None:
    """SIGKILL the workers' process group(s) and reap them."""
    if not procs:
        return
    groups = {procs[0].pid} if sys.version_info >= (3, 11) else {p.pid for p in procs}
    for pgid in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
    for p in procs:
        with contextlib.suppress(ProcessLookupError):
            p.kill()
        with contextlib.suppress(Exception):
            p.wait(timeout=10)


def _spawn(job: dict, directory: Path, env: dict) -> list[subprocess.Popen]:
    job_path = directory / "job.json"
    job_path.write_text(json.dumps(job))
    procs: list[subprocess.Popen] = []
    try:
        for rank in range(job["world_size"]):
            stderr = open(directory / f"rank{rank}.stderr", "w")
            # one process group for all ranks (Python >= 3.11); on 3.10 one session per rank
            group = ({"process_group": procs[0].pid if procs else 0} if sys.version_info >= (3, 11)
                     else {"start_new_session": True})
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "bench.launch", str(job_path), str(rank)],
                env=env, stdin=subprocess.DEVNULL, stdout=stderr, stderr=stderr, **group,
            ))
            stderr.close()
    except BaseException:
        _kill_group(procs)
        raise
    return procs


def worker_env(extra: dict[str, str]) -> dict[str, str]:
    """The workers' environment: ours, the repository root on PYTHONPATH, one CPU thread, then ``extra``."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in parts:
        parts.append(root)
    env["PYTHONPATH"] = os.pathsep.join(parts)
    env.setdefault("OMP_NUM_THREADS", "1")
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    env.update({str(k): str(v) for k, v in (extra or {}).items()})
    return env


def run_backend(job: dict, on_event) -> None:
    """Run one backend's points in fresh worker processes; every point ends in exactly one outcome.

    ``on_event`` receives the workers' ``phase``/``unavailable``/``result`` events, plus
    ``{"event": "result", "tokens": T, "status": "error"|"timeout", "error": ...}`` made
    here for points whose workers crashed or overran.
    """
    remaining = list(job["points"])
    env = worker_env(job.get("env", {}))
    while remaining:
        with tempfile.TemporaryDirectory(prefix="autoselect-bench-") as tmp:
            directory = Path(tmp)
            sub = dict(job, points=remaining)
            procs = _spawn(sub, directory, env)
            try:
                remaining = _watch(sub, directory, procs, on_event)
            finally:
                _kill_group(procs)


def _without_first(points: list, done: list) -> list:
    """``points`` less the first copy of each of ``done``: a job may repeat a point (several
    independent runs of it in one start-up), and the workers run the points in order, so
    one result settles one copy."""
    out = list(points)
    for t in done:
        if t in out:
            out.remove(t)
    return out


def _watch(job, directory: Path, procs, on_event) -> list:
    """Follow one set of workers until their job ends; returns the points still to run."""
    remaining = list(job["points"])
    reader = _EventReader(directory, job["world_size"])
    setup_limit, measure_limit = job["setup_timeout_s"], measure_limit_s(job["timeout_s"])
    deadline = time.monotonic() + setup_limit
    current = remaining[0]
    finished = False

    started = False  # a point began in these workers (before that, a failure hits every point)

    def blame(ev):
        """A peer's death shows up as a communication error elsewhere: name the dead rank if any."""
        dead, until = None, time.monotonic() + DEATH_WAIT_S
        while dead is None and time.monotonic() < until:
            dead = _died(procs, directory)
            if dead is None and all(p.poll() is not None for p in procs):
                break
            time.sleep(POLL_S)
        return dead or f"rank {ev.get('rank')}: {ev.get('message')}"

    def fail(status, message):
        hit = [current] if started else list(remaining)
        for tokens in hit:
            on_event({"event": "result", "tokens": tokens, "status": status, "error": message})
        return _without_first(remaining, hit) if started else []

    while True:
        for ev in reader.read():
            kind = ev.get("event")
            if kind == "phase":
                current, started = ev["tokens"], True
                if ev["phase"] == "setup":
                    deadline = time.monotonic() + setup_limit
                elif ev["phase"] == "gate":  # the gate and the timing share one limit
                    deadline = time.monotonic() + measure_limit
                on_event(ev)
            elif kind == "result":
                on_event(ev)
                remaining = _without_first(remaining, [ev["tokens"]])
                if not remaining:  # every point reported: no need to wait for a tidy exit
                    return []
                current = remaining[0]
                deadline = time.monotonic() + setup_limit
            elif kind == "unavailable":
                for t in remaining:
                    on_event({"event": "result", "tokens": t, "status": "unavailable", "error": ev["reason"]})
                return []
            elif kind == "error":
                if current is None:
                    return []
                return fail("error", blame(ev))
            elif kind == "done":
                finished = True
        if finished and all(p.poll() is not None for p in procs):
            return remaining
        for rank, p in enumerate(procs):
            code = p.poll()
            if code is not None and code != 0:
                # give the worker's own error event a moment to land
                time.sleep(0.1)
                for ev in reader.read():
                    kind = ev.get("event")
                    if kind == "error":
                        return fail("error", blame(ev))
                    if kind == "phase":
                        current, started = ev["tokens"], True
                        on_event(ev)
                    elif kind == "result":
                        on_event(ev)
                        remaining = _without_first(remaining, [ev["tokens"]])
                        current = remaining[0] if remaining else None
                if current is None or current not in remaining:
                    return remaining
                return fail("error", _died(procs, directory) or f"rank {rank} exited with status {code}")
        if time.monotonic() > deadline:
            if current is None:  # every point reported; the workers hang on the way out
                return remaining
            return fail("timeout", f"no progress within the wall-clock limit "
                                   f"({setup_limit:g} s setup, {measure_limit:g} s measuring); workers killed")
        if current is None and all(p.poll() is not None for p in procs):
            return remaining
        time.sleep(POLL_S)


@contextlib.contextmanager
def signals_raise():
    """Within the block, SIGTERM and SIGHUP raise KeyboardInterrupt (so cleanup runs); main thread only."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    previous = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        with contextlib.suppress(ValueError, OSError):
            previous[sig] = signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            with contextlib.suppress(ValueError, OSError):
                signal.signal(sig, old)


if __name__ == "__main__":
    sys.exit(_worker_main(sys.argv[1:]))
