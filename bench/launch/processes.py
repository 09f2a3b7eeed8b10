"""Worker processes: their environment, spawning, killing, watching, and the signals that end them.

A group's ranks run ``python -m bench.launch DIR RANK`` in one process group of their own,
so that one ``killpg`` removes them and anything they started (a JIT compiler ...). They die
with the parent (``PR_SET_PDEATHSIG`` on Linux, and EOF on their stdin); the parent kills
its groups on return, on exceptions, on Ctrl-C and on SIGTERM/SIGHUP (:func:`signals_raise`).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

#: Exit status of a worker that reported its own exception (an ``error`` event) first.
ERROR_EXIT = 3


def under_torchrun() -> bool:
    """Whether this process was started by torchrun (``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK`` set)."""
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))


def torchrun_rank() -> int:
    """This process's rank under torchrun, 0 otherwise."""
    return int(os.environ.get("RANK", "0")) if under_torchrun() else 0


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies (no orphans)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def worker_env(extra: dict[str, str] | None) -> dict[str, str]:
    """The workers' environment: ours, the repository root on PYTHONPATH, one CPU thread, then ``extra``."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent.parent)
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in parts:
        parts.append(root)
    env["PYTHONPATH"] = os.pathsep.join(parts)
    env.setdefault("OMP_NUM_THREADS", "1")
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    env.update({str(k): str(v) for k, v in (extra or {}).items()})
    return env


def spawn(directory: Path, world_size: int, env: dict) -> list[subprocess.Popen]:
    """Start ``world_size`` ranks of ``python -m bench.launch DIRECTORY RANK``, stdin a pipe (their job channel)."""
    procs: list[subprocess.Popen] = []
    try:
        for rank in range(world_size):
            stderr = open(directory / f"rank{rank}.stderr", "w")
            # one process group for all ranks (Python >= 3.11); on 3.10 one session per rank
            group = ({"process_group": procs[0].pid if procs else 0} if sys.version_info >= (3, 11)
                     else {"start_new_session": True})
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "bench.launch", str(directory), str(rank)],
                env=env, stdin=subprocess.PIPE, stdout=stderr, stderr=stderr, text=True, **group,
            ))
            stderr.close()
    except BaseException:
        kill(procs)
        raise
    return procs


def send(procs, message: dict) -> None:
    """Write one JSON line to every rank's stdin; a rank that is gone is noticed by the watcher."""
    line = json.dumps(message) + "\n"
    for p in procs:
        with contextlib.suppress(BrokenPipeError, OSError, ValueError, AttributeError):  # AttributeError: no channel
            p.stdin.write(line)
            p.stdin.flush()


def kill(procs) -> None:
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
        with contextlib.suppress(Exception):
            p.stdin.close()


def stderr_tail(path: Path, lines: int = 3) -> str:
    """The last ``lines`` lines of a worker's stderr, joined with `` | ``."""
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except FileNotFoundError:
        return ""
    return " | ".join(text[-lines:])


def died(procs, directory: Path) -> str | None:
    """"rank N died (...)" for the first worker that exited abnormally (not via its own error report)."""
    for rank, p in enumerate(procs):
        code = p.poll()
        if code is not None and code not in (0, ERROR_EXIT):
            tail = stderr_tail(directory / f"rank{rank}.stderr")
            why = f"signal {-code}" if code < 0 else f"exit status {code}"
            return f"rank {rank} died ({why})" + (f": {tail}" if tail else "")
    return None


class EventReader:
    """Reads complete new JSON lines from the workers' event files (``rank<N>.jsonl``), kept open."""

    def __init__(self, directory: Path, world_size: int):
        self.paths = [directory / f"rank{r}.jsonl" for r in range(world_size)]
        self.files: list = [None] * world_size
        self.partial = [""] * world_size

    def read(self) -> list[dict]:
        """New events from every rank, rank 0 first."""
        out = []
        for r, path in enumerate(self.paths):
            if self.files[r] is None:
                try:
                    self.files[r] = open(path)
                except FileNotFoundError:
                    continue
            text = self.partial[r] + self.files[r].read()
            lines = text.split("\n")
            self.partial[r] = lines.pop()
            out.extend(json.loads(line) for line in lines if line.strip())
        return out

    def close(self) -> None:
        """Close the files."""
        for f in self.files:
            if f is not None:
                f.close()
        self.files = [None] * len(self.paths)


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
