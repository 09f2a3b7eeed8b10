"""A fork server for worker groups: torch imported once per caller, each rank a fork of it.

A worker's start-up is mostly ``import torch`` (1.7 s of CPU on the 2-core CI machine, 2-5 s on
a GPU node, for every rank of every group and every restart). :class:`Zygote` is one process,
started once per :class:`bench.launch.WorkerGroups`, that imports torch, torch.distributed,
numpy and the worker's own modules and then forks one child per rank on request; a child is a
fresh worker from that point on (its own process group, joined to its own torch.distributed
group, the backend loaded after the fork, so nothing of a backend is ever shared).

Safe to fork: the zygote never initializes CUDA (CUDA cannot survive a fork; the children
initialize it themselves) and never runs a parallel region (an OpenMP pool does not survive a
fork either). Groups whose start-up settings include environment variables are spawned the
ordinary way instead: a variable read while torch is imported (``OMP_NUM_THREADS``) could not
take effect in a fork.

Protocol: the parent writes ``{"directory", "rank", "leader"}`` lines to the zygote's stdin and
reads ``{"rank", "pid"}`` lines back; the child reads its jobs from the FIFO ``rank<N>.in`` in the
group's directory (the parent holds the write end: EOF when it goes). The zygote reaps its
children and writes each exit status to ``rank<N>.exit``, which :class:`ForkedProcess` polls.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from autoselect.atomic import replacing
from bench.launch import worker
from bench.launch.processes import die_with_parent


class ForkedProcess:
    """A rank forked by the zygote, with the part of ``subprocess.Popen`` the group uses."""

    def __init__(self, pid: int, directory: Path, rank: int, zygote: subprocess.Popen):
        self.pid, self.rank = pid, rank
        self.zygote = zygote  # the process that reaps this rank and writes its exit status
        self.exit_file = directory / f"rank{rank}.exit"
        self.fifo = directory / f"rank{rank}.in"
        self.stdin = None
        self.returncode: int | None = None

    def open_channel(self, deadline: float) -> None:
        """Open the write end of the rank's job FIFO (once the child opened its read end)."""
        while self.stdin is None:
            try:
                fd = os.open(self.fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:  # ENXIO: no reader yet
                if time.monotonic() > deadline or self.poll() is not None:
                    return  # the watcher sees the dead (or stuck) rank
                time.sleep(0.005)
                continue
            os.set_blocking(fd, True)
            self.stdin = os.fdopen(fd, "w")

    def poll(self) -> int | None:
        """The exit status once the zygote reaped the rank (negative: the signal), else None.

        Only the zygote reaps its ranks (a zombie still answers ``kill(pid, 0)``), and it writes
        the status just after: a pid that is gone while the file is not there yet is a rank in
        between, its status on the way, as long as the zygote lives. Only a zygote that died
        leaves none (init reaped the rank): that rank is taken as killed. Reading every gone pid
        as killed turned a rank's own error exit into "died (signal 9)".
        """
        if self.returncode is None:
            code = self._written_status()
            if code is None and not self._exists() and self.zygote.poll() is not None:
                code = self._written_status()  # written just before the zygote died
                self.returncode = -signal.SIGKILL if code is None else code
            else:
                self.returncode = code
        return self.returncode

    def _written_status(self) -> int | None:
        """The status the zygote wrote (the file is written whole: present or absent), else None."""
        try:
            return int(self.exit_file.read_text())
        except (FileNotFoundError, ValueError):
            return None

    def _exists(self) -> bool:
        """Whether the pid still answers (running, or a zombie the zygote has not reaped yet)."""
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # the pid was reused by another user's process: not ours, but there
            return True
        return True

    def kill(self) -> None:
        """SIGKILL the rank."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(self.pid, signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait for the exit status (polling)."""
        until = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if until is not None and time.monotonic() > until:
                raise subprocess.TimeoutExpired("forked worker", timeout)
            time.sleep(0.01)
        return self.returncode


class Zygote:
    """The fork server of one caller's worker groups (see the module docstring)."""

    def __init__(self, env: dict[str, str]):
        self.proc = subprocess.Popen([sys.executable, "-m", "bench.launch", "--zygote"], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     start_new_session=True)
        self.lock = threading.Lock()

    def fork(self, directory: Path, rank: int, leader: int) -> ForkedProcess | None:
        """Fork one rank into ``directory`` (process group ``leader``, 0: its own); None if the zygote is gone."""
        os.mkfifo(directory / f"rank{rank}.in")
        with self.lock:
            try:
                self.proc.stdin.write(json.dumps({"directory": str(directory), "rank": rank, "leader": leader}) + "\n")
                self.proc.stdin.flush()
                answer = self.proc.stdout.readline()
            except (BrokenPipeError, OSError, ValueError):
                return None
        if not answer:
            return None
        return ForkedProcess(json.loads(answer)["pid"], directory, rank, self.proc)

    def close(self) -> None:
        """End the zygote at once: it holds nothing to save (its groups were closed first), and a
        clean exit of an interpreter with torch loaded took 1.5 s."""
        with contextlib.suppress(Exception):
            self.proc.stdin.close()
        with contextlib.suppress(Exception):
            self.proc.kill()
            self.proc.wait(timeout=5)


# --------------------------------------------------------------------------------------
# The zygote process itself.


def _reap(children: dict, lock: threading.Lock) -> None:
    """Wait for every child and write its exit status where its group's parent polls for it."""
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:  # none right now
            time.sleep(0.05)
            continue
        code = os.waitstatus_to_exitcode(status)
        with lock:
            exit_file = children.pop(pid, None)
        if exit_file is not None:
            # whole or absent, never half-written: the parent may read it at any moment
            with contextlib.suppress(OSError), replacing(exit_file, durable=False) as f:
                f.write(str(code))


def _child(directory: Path, rank: int, leader: int) -> None:
    """In the fork: become a worker of ``directory`` (never returns)."""
    code = 1
    try:
        with contextlib.suppress(OSError):  # the zygote did it already (see main)
            os.setpgid(0, leader)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        err = os.open(directory / f"rank{rank}.stderr", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)  # the zygote's request pipe is not the child's
        os.dup2(err, 1)
        os.dup2(err, 2)
        for entry in reversed(os.environ.get("PYTHONPATH", "").split(os.pathsep)):
            if entry and entry not in sys.path:
                sys.path.insert(0, entry)
        channel = open(directory / f"rank{rank}.in")  # blocks until the parent opens the write end
        code = worker.main([str(directory), str(rank)], channel=channel)
    except BaseException:  # noqa: BLE001 - report and leave, whatever happened
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def main() -> int:
    """``python -m bench.launch --zygote``: import once, then fork a worker per request line."""
    die_with_parent()
    import numpy  # noqa: F401 - preloaded for the children
    import torch  # noqa: F401
    import torch.distributed  # noqa: F401

    children: dict[int, Path] = {}
    lock = threading.Lock()
    threading.Thread(target=_reap, args=(children, lock), daemon=True).start()
    for line in iter(sys.stdin.readline, ""):
        request = json.loads(line)
        directory, rank = Path(request["directory"]), int(request["rank"])
        leader = int(request["leader"])
        with lock:
            pid = os.fork()
            if pid == 0:
                _child(directory, rank, leader)
            # here too, before the next rank is forked: a child's own setpgid may not have run yet
            # when the next one joins its group (EPERM: no such group yet)
            with contextlib.suppress(OSError):
                os.setpgid(pid, leader or pid)
            children[pid] = directory / f"rank{rank}.exit"
        sys.stdout.write(json.dumps({"rank": rank, "pid": pid}) + "\n")
        sys.stdout.flush()
    return 0
