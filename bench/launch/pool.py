"""The worker groups of one caller: one :class:`WorkerGroup` per backend, closed together at the end.

A sweep opens its own (one start-up per backend however few points it measures); ``tune``
keeps one for its whole race (screen, refine rounds, knob search, final check) and closes a
backend's group the moment the race prunes it; a fleet node's task keeps one for all its
workloads.
"""

from __future__ import annotations

from bench.launch.group import StartFailed, WorkerGroup
from bench.launch.processes import worker_env
from bench.launch.protocol import GroupConfig
from bench.launch.zygote import Zygote


class WorkerGroups:
    """Context manager: ``with WorkerGroups() as groups: groups.get(config).run(job, on_event)``.

    Leaving the block closes every group (kills them when an exception, Ctrl-C included,
    is on its way out). ``keep``: whether a sweep leaves a backend's group running after its
    job (a tune race, a fleet node's task: the next job reuses it) or closes it at once (one
    sweep, one job per backend: only one backend's processes and device memory at a time).
    """

    def __init__(self, *, on_event=None, keep: bool = True, fork: bool = True):
        self.on_event = on_event  # GroupStarted of groups started outside a job (start())
        self.keep = keep
        self.fork = fork  # start the ranks as forks of one zygote (bench/launch/zygote.py)
        self.groups: dict[str, WorkerGroup] = {}
        self._zygote: Zygote | None = None

    def warm(self) -> "WorkerGroups":
        """Start the fork server now (its torch import then overlaps the caller's own set-up)."""
        self.zygote()
        return self

    def zygote(self) -> Zygote | None:
        """The caller's fork server, started on first use (None when forking is off)."""
        if self.fork and self._zygote is None:
            self._zygote = Zygote(worker_env({}))
        return self._zygote

    def get(self, config: GroupConfig) -> WorkerGroup:
        """The group of ``config.backend``, created on first use, reconfigured (restarted when needed) after."""
        group = self.groups.get(config.backend)
        if group is None:
            group = self.groups[config.backend] = WorkerGroup(config, on_event=self.on_event, zygote=self.zygote)
        else:
            group.reconfigure(config)
        return group

    def start(self, configs: list[GroupConfig]) -> None:
        """Start the groups of ``configs`` side by side (spawn all, then wait for each); a failed one
        stays down and fails its points when it is first run."""
        pending = []
        for config in configs:
            group = self.get(config)
            if not group.running and group.unavailable is None:
                group.spawn()
                pending.append(group)
        for group in pending:
            try:
                group.wait_ready()
            except StartFailed:
                pass  # run() starts it again and reports the failure on its points

    def close(self, backend: str, reason: str = "closed") -> None:
        """End ``backend``'s group now (its memory freed); a later :meth:`get` starts a fresh one."""
        group = self.groups.get(backend)
        if group is not None:
            group.close(reason)

    def close_all(self, reason: str = "closed") -> None:
        """End every group, then the zygote."""
        for group in self.groups.values():
            group.close(reason)
        self._close_zygote()

    def kill_all(self, reason: str) -> None:
        """Kill every group at once, then the zygote."""
        for group in self.groups.values():
            group.kill(reason)
        self._close_zygote()

    def _close_zygote(self) -> None:
        if self._zygote is not None:
            self._zygote.close()
            self._zygote = None

    def startups(self) -> dict[str, list[dict]]:
        """Every start-up paid so far, per backend: ``[{"seconds", "reason"}]``, JSON-ready."""
        return {b: [{"seconds": round(s.seconds, 4), "reason": s.reason} for s in g.startups]
                for b, g in self.groups.items()}

    def summary(self) -> list[dict]:
        """Per backend: its start-ups (:meth:`startups`) and jobs (points, seconds), JSON-ready."""
        startups = self.startups()
        return [{"backend": b, "startups": startups[b],
                 "jobs": [{"points": j.points, "seconds": round(j.seconds, 4), "startups": len(j.startups)}
                          for j in g.jobs]}
                for b, g in self.groups.items()]

    def __enter__(self) -> "WorkerGroups":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is None:
            self.close_all()
        else:
            self.kill_all(f"interrupted: {exc_type.__name__}")
        return False
