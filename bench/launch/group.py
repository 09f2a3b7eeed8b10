"""A worker group per backend: started once, fed job after job, restarted only when it must be.

:class:`WorkerGroup` starts ``world_size`` workers (:mod:`bench.launch.worker`) for one
backend and keeps them joined to their process group with the backend loaded; :meth:`run`
feeds them a :class:`Job` over their stdin and follows their event files until every point
of the job has exactly one outcome:

- a worker that exits non-zero (a crash, a CUDA error, ``os._exit``) marks the current point
  ``error`` (``harness_error`` when it ran out of memory or overflowed) with the tail of its
  stderr; a point that overruns its wall-clock limit (setup: ``setup_timeout_s``, measuring:
  ``2 · timeout_s + 10 s``) is ``timeout``. Either way only this group is killed; the rest of
  the job, and every later job, runs in a fresh group (a new start-up, with the reason);
- an adapter that cannot set a point up in its processes (``needs_fresh_process``) gets a
  fresh group for it; a change of a start-up setting (:class:`GroupConfig`: environment
  knobs such as ``NCCL_PROTO``) restarts the group before the next job.

Every start-up (spawn to ready), point and job is timed; the timing log
(:mod:`bench.launch.timing_log`) says why each group started and ended.
:class:`WorkerGroups` holds one group per backend for a caller (a sweep, a tune race, a fleet
node's task) and closes them all when it ends.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from bench.events import GroupStarted, PointPhase
from bench.launch import processes, timing_log
from bench.launch.protocol import HARNESS_ERROR, GroupConfig, Job, JobReport, PointDone, StartUp

#: Extra wall-clock seconds a measuring point gets beyond twice its stopping-rule timeout.
MEASURE_GRACE_S = 10.0
#: How often the parent polls the workers' event files (kept open: a poll is two reads).
POLL_S = 0.01
#: How long an ``error`` event waits for a peer's abnormal exit, which is then named instead.
DEATH_WAIT_S = 2.0
#: How long a closed group may take to leave its process group and exit before it is killed.
CLOSE_GRACE_S = 10.0
#: How long an exited worker's last events get to land before its exit is judged.
EXIT_SETTLE_S = 0.1


def measure_limit_s(timeout_s: float) -> float:
    """Wall-clock limit of one point's gate + timing: ``2 · timeout_s + MEASURE_GRACE_S``."""
    return 2 * timeout_s + MEASURE_GRACE_S


def without_first(points: list, done: list) -> list:
    """``points`` less the first copy of each of ``done``: a job may repeat a point, and the
    workers run the points in order, so one outcome settles one copy."""
    out = list(points)
    for t in done:
        if t in out:
            out.remove(t)
    return out


class StartFailed(Exception):
    """A group that did not become ready: ``status`` (error, timeout, harness_error) and why."""

    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status, self.message = status, message


class WorkerGroup:
    """One backend's worker processes, kept between jobs; see the module docstring."""

    def __init__(self, config: GroupConfig, *, on_event=None, zygote=None):
        self.config = config
        self.on_event = on_event or (lambda event: None)  # GroupStarted, for callers that show it
        self.zygote = zygote  # () -> Zygote | None: the caller's fork server (bench/launch/zygote.py)
        self.procs: list = []
        self.unavailable: str | None = None  # known once a group of this config started
        self.startups: list[StartUp] = []
        self.jobs: list[JobReport] = []
        self._reason = "first use"
        self._tmp: tempfile.TemporaryDirectory | None = None
        self._reader: processes.EventReader | None = None
        self._spawned_at = 0.0
        self._job_ids = 0

    @property
    def directory(self) -> Path:
        """The group's directory: its config, event files, stderr files and rendezvous store."""
        return Path(self._tmp.name)

    @property
    def running(self) -> bool:
        """Whether the group's processes are up (started and not yet ended)."""
        return bool(self.procs)

    # ---- start, reconfigure, end ----------------------------------------------------

    def spawn(self) -> None:
        """Start the processes (without waiting for them: :meth:`wait_ready`)."""
        self._tmp = tempfile.TemporaryDirectory(prefix="autoselect-group-")
        (self.directory / "group.json").write_text(json.dumps(asdict(self.config)))
        self._reader = processes.EventReader(self.directory, self.config.world_size)
        self._spawned_at = time.monotonic()
        self.procs = self._fork() or processes.spawn(self.directory, self.config.world_size,
                                                     processes.worker_env(self.config.env_dict))

    def _fork(self) -> list:
        """The ranks forked from the caller's zygote, or [] (no zygote, start-up env vars, zygote gone)."""
        zygote = self.zygote() if self.zygote and not self.config.env else None
        procs: list = []
        for rank in range(self.config.world_size if zygote else 0):
            proc = zygote.fork(self.directory, rank, procs[0].pid if procs else 0)
            if proc is None:
                processes.kill(procs)
                return []
            procs.append(proc)
        deadline = time.monotonic() + self.config.setup_timeout_s
        for proc in procs:
            proc.open_channel(deadline)
        return procs

    def wait_ready(self, on_event=None) -> StartUp:
        """Wait until every rank is ready; raises :class:`StartFailed` (the group is then gone).

        A :class:`bench.events.GroupStarted` goes to ``on_event`` (default: the group's own).
        """
        ready, limit = set(), self.config.setup_timeout_s
        try:
            while len(ready) < self.config.world_size:
                for ev in self._reader.read():
                    if ev.get("event") == "ready":
                        ready.add(ev["rank"])
                        if ev["rank"] == 0:
                            self.unavailable = ev.get("unavailable")
                    elif ev.get("event") == "error":
                        raise StartFailed(HARNESS_ERROR if ev.get("harness") else "error", self._blame(ev))
                dead = processes.died(self.procs, self.directory)
                if dead or all(p.poll() is not None for p in self.procs):
                    raise StartFailed("error", dead or "the workers exited before they were ready")
                if time.monotonic() - self._spawned_at > limit:
                    raise StartFailed("timeout", f"the worker group did not start within {limit:g} s (spawn, "
                                                 "torch import, process group, backend load); workers killed")
                time.sleep(POLL_S)
        except StartFailed as failed:
            self._end(f"start-up failed: {failed.message}", kill=True)
            self._reason = f"the previous start failed ({failed.status})"
            raise
        startup = StartUp(time.monotonic() - self._spawned_at, self._reason)
        self.startups.append(startup)
        timing_log.log("start-up", backend=self.config.backend, seconds=round(startup.seconds, 4),
                       reason=startup.reason, startup=len(self.startups))
        (on_event or self.on_event)(GroupStarted(self.config.backend, startup.seconds, startup.reason))
        self._reason = "the previous group ended"
        return startup

    def start(self, on_event=None) -> StartUp:
        """Spawn and wait until ready (:meth:`spawn`, :meth:`wait_ready`)."""
        self.spawn()
        return self.wait_ready(on_event)

    def reconfigure(self, config: GroupConfig) -> None:
        """Use ``config`` from the next job on; a change of a start-up setting restarts the group then."""
        if config.startup_key() != self.config.startup_key():
            why = self.config.differences(config)
            if self.running:
                self.close(f"restart: {why}")
            self._reason = why
            self.unavailable = None
        self.config = config

    def close(self, reason: str = "closed") -> None:
        """End the group: ask the workers to leave their process group and exit, kill them after a grace."""
        if not self.running:
            return
        processes.send(self.procs, {"op": "close"})
        for p in self.procs:
            with contextlib.suppress(Exception):
                p.stdin.close()
        until = time.monotonic() + CLOSE_GRACE_S
        while time.monotonic() < until and any(p.poll() is None for p in self.procs):
            time.sleep(POLL_S)
        self._end(reason, kill=True)

    def kill(self, reason: str) -> None:
        """End the group at once (SIGKILL)."""
        if self.running:
            self._end(reason, kill=True)

    def _end(self, reason: str, *, kill: bool) -> None:
        if kill:
            processes.kill(self.procs)
        self.procs = []
        if self._reader is not None:
            self._reader.close()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
        timing_log.log("close", backend=self.config.backend, reason=reason)

    # ---- jobs -----------------------------------------------------------------------

    def run(self, job: Job, on_event) -> JobReport:
        """Run every point of ``job``, each ending in exactly one :class:`PointDone` passed to ``on_event``.

        ``on_event`` also receives :class:`bench.events.PointPhase` as points move through
        setup, gate and measure, and :class:`bench.events.GroupStarted` when the group is
        started (or restarted) for the job.
        """
        started, before = time.monotonic(), len(self.startups)
        remaining = list(job.tokens)
        while remaining:
            if not self.running and self.unavailable is None:
                try:
                    self.start(on_event)
                except StartFailed as failed:
                    for t in remaining:
                        self._report(PointDone(self.config.backend, t, failed.status, failed.message),
                                     job, None, on_event)
                    break
            if self.unavailable is not None:
                for t in remaining:
                    self._report(PointDone(self.config.backend, t, "unavailable", self.unavailable),
                                 job, None, on_event)
                self.close(f"unavailable: {self.unavailable}")
                break
            remaining = self._feed(job.with_tokens(remaining), on_event)
        report = JobReport(self.config.backend, len(job.tokens), time.monotonic() - started,
                           self.startups[before:])
        self.jobs.append(report)
        timing_log.log("job", backend=self.config.backend, job=self._job_ids, points=report.points,
                       seconds=round(report.seconds, 4), startups=len(report.startups))
        return report

    def _report(self, done: PointDone, job: Job, job_id: int | None, on_event) -> None:
        timing_log.log_point(done, dtype=job.wire_dtype, job=job_id)
        on_event(done)

    def _feed(self, job: Job, on_event) -> list[int]:
        """Send ``job`` to the running group and follow it; returns the points it left unrun."""
        self._job_ids += 1
        watch = _JobWatch(self, job, self._job_ids, on_event)
        processes.send(self.procs, {"op": "job", "id": watch.job_id, "job": job.to_dict()})
        return watch.follow()

    def _blame(self, ev: dict) -> str:
        """A peer's death shows up as a communication error elsewhere: name the dead rank if any."""
        dead, until = None, time.monotonic() + DEATH_WAIT_S
        while dead is None and time.monotonic() < until:
            dead = processes.died(self.procs, self.directory)
            if dead is None and all(p.poll() is not None for p in self.procs):
                break
            time.sleep(POLL_S)
        return dead or f"rank {ev.get('rank')}: {ev.get('message')}"


class _JobWatch:
    """Follows one job in a running group: outcomes, deadlines, deaths."""

    def __init__(self, group: WorkerGroup, job: Job, job_id: int, on_event):
        self.group, self.job, self.job_id, self.on_event = group, job, job_id, on_event
        self.remaining = list(job.tokens)
        self.current: int | None = self.remaining[0]
        self.setup_limit = group.config.setup_timeout_s
        self.measure_limit = measure_limit_s(job.timeout_s)
        self.deadline = time.monotonic() + self.setup_limit
        self.exited_at: float | None = None

    def follow(self) -> list[int]:
        """Poll until the job ends (done, failed or handed to a fresh group); the points left."""
        group = self.group
        while True:
            for ev in group._reader.read():
                if ev.get("job") not in (None, self.job_id):
                    continue  # a late event of an earlier job
                left = self.handle(ev)
                if left is not None:
                    return left
            codes = [p.poll() for p in group.procs]
            if any(c not in (None, 0) for c in codes) or all(c is not None for c in codes):
                if self.exited_at is None:
                    self.exited_at = time.monotonic()  # its own error event may still be landing
                elif time.monotonic() - self.exited_at > EXIT_SETTLE_S:
                    rank, code = next(((r, c) for r, c in enumerate(codes) if c is not None), (0, None))
                    return self.fail("error", processes.died(group.procs, group.directory)
                                     or f"rank {rank} exited with status {code}", "crashed")
            if time.monotonic() > self.deadline:
                return self.fail("timeout", f"no progress within the wall-clock limit ({self.setup_limit:g} s "
                                            f"setup, {self.measure_limit:g} s measuring); workers killed", "hung")
            time.sleep(POLL_S)

    def handle(self, ev: dict) -> list[int] | None:
        """One worker event; the points left when it ends the job, else None."""
        group, kind, now = self.group, ev.get("event"), time.monotonic()
        backend = group.config.backend
        if kind == "phase":
            self.current = ev["tokens"]
            if ev["phase"] == "setup":
                self.deadline = now + self.setup_limit
            elif ev["phase"] == "gate":  # the gate and the timing share one limit
                self.deadline = now + self.measure_limit
            self.on_event(PointPhase(backend, ev["tokens"], ev["phase"]))
        elif kind == "result":
            group._report(PointDone(backend, ev["tokens"], ev["status"], ev.get("error"), ev.get("fields") or {},
                                    ev.get("timing"), ev.get("timing_note"), ev.get("seconds")),
                          self.job, self.job_id, self.on_event)
            self.remaining = without_first(self.remaining, [ev["tokens"]])
            self.current = self.remaining[0] if self.remaining else None
            self.deadline = now + self.setup_limit
        elif kind == "job_done":
            return self.remaining
        elif kind == "fresh":
            group.close(f"restart: {ev['reason']}")
            group._reason = f"the adapter needs a fresh process at {ev['tokens']} tokens/rank: {ev['reason']}"
            return self.remaining
        elif kind == "error":
            status = HARNESS_ERROR if ev.get("harness") else "error"
            return self.fail(status, group._blame(ev), "crashed")
        return None

    def fail(self, status: str, message: str, what: str) -> list[int]:
        """Kill the group; the current point gets ``status``; returns the points left for a fresh group."""
        group, current = self.group, self.current
        group.kill(f"{what}: {message}")
        if current is None:  # every point reported; the workers died or hung on the way out
            return []
        group._reason = f"the previous group {what} ({status} at {current} tokens/rank)"
        group._report(PointDone(group.config.backend, current, status, message), self.job, self.job_id, self.on_event)
        return without_first(self.remaining, [current])
