"""Runs: beginning one, finishing it whatever happens, what it learned beside results, dropping one."""

from __future__ import annotations

import json
import os
import socket
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from autoselect import __version__
from db.errors import UnknownRun
from db.records import RUN_STATUSES
from db.rows import dumps, now_iso
from db.store.base import StoreBase


@dataclass
class RunHandle:
    """The run :meth:`Store.run` began: its id, and the status and meta it will be finished with."""

    id: int
    status: str = "complete"  # what a block that returns normally ends the run with
    meta: dict = field(default_factory=dict)  # merged into the run's meta at the end


class RunWrites(StoreBase):
    """The runs of a :class:`db.store.Store`: begin, finish, append to their meta, drop."""

    def begin_run(self, host, *, trigger: str = "manual", command: str | None = None, meta: dict | None = None) -> int:
        """Record the start of a run on ``host`` (a HostFingerprint) by this process; returns its id."""
        h = host.to_dict() if hasattr(host, "to_dict") else dict(host)
        now = now_iso()
        with self._write():
            self._upsert_host(h, now, now)
            return self.db["runs"].insert(
                {
                    "uid": uuid.uuid4().hex,
                    "machine_id": h["machine_id"],
                    "host_class": h["host_class"],
                    "started_at": now,
                    "updated_at": now,
                    "finished_at": None,
                    "status": "running",
                    "trigger": trigger,
                    "command": command,
                    "hostname": socket.gethostname(),
                    "pid": os.getpid(),
                    "autoselect_version": __version__,
                    "meta": dumps(meta or {}),
                }
            ).last_pk

    @contextmanager
    def run(self, host, *, trigger: str = "manual", command: str | None = None,
            meta: dict | None = None) -> Iterator["RunHandle"]:
        """Begin a run, yield a :class:`RunHandle`, and always finish the run on the way out.

        The final status is ``interrupted`` when the block raises ``KeyboardInterrupt``
        (``launch.signals_raise`` turns SIGTERM/SIGHUP into one), ``failed`` when it raises
        anything else (the exception propagates either way), and otherwise ``handle.status``
        (``complete`` unless the block set ``failed`` or ``interrupted``). Keys the block puts
        in ``handle.meta`` are merged into the run's meta when it is finished::

            with store.run(host, trigger="bench", command="autoselect bench") as run:
                store.add_result(run.id, result)
                run.meta["seconds"] = 12.5

        :param host: the :class:`autoselect.hardware.HostFingerprint` the run measures.
        :param trigger, command, meta: as for :meth:`begin_run`.
        """
        handle = RunHandle(self.begin_run(host, trigger=trigger, command=command, meta=meta))
        status = None
        try:
            yield handle
        except KeyboardInterrupt:
            status = "interrupted"
            raise
        except BaseException:
            status = "failed"
            raise
        finally:
            self.finish_run(handle.id, status or handle.status, meta=handle.meta or None)

    def finish_run(self, run_id: int, status: str = "complete", *, meta: dict | None = None) -> None:
        """Close a run with a final status (``complete``, ``failed`` or ``interrupted``).

        :param meta: keys merged into the run's meta (e.g. why a fleet node's run failed).
        """
        if status not in RUN_STATUSES or status == "running":
            raise ValueError(f"finish_run status must be one of {RUN_STATUSES[1:]}, not {status!r}")
        now = now_iso()
        with self._write():
            self._run(run_id)
            self.conn.execute(
                "UPDATE runs SET status = ?, finished_at = ?, updated_at = ? WHERE id = ?",
                (status, now, now, run_id),
            )
            if meta:
                old = self.conn.execute("SELECT meta FROM runs WHERE id = ?", (run_id,)).fetchone()[0]
                merged = {**(json.loads(old) if old else {}), **meta}
                self.conn.execute("UPDATE runs SET meta = ? WHERE id = ?", (dumps(merged), run_id))

    def append_run_meta(self, run_id: int, key: str, items: list) -> None:
        """Append ``items`` to the list at ``meta[key]`` of a run (created when absent), in one write.

        What a run learned that is not a result row: e.g. the points the benchmark harness
        itself could not build or run (``harness_failures``), which must never look like a
        backend's failure.
        """
        with self._write():
            self._run(run_id)
            old = self.conn.execute("SELECT meta FROM runs WHERE id = ?", (run_id,)).fetchone()[0]
            meta = json.loads(old) if old else {}
            meta[key] = list(meta.get(key) or []) + list(items)
            self.conn.execute("UPDATE runs SET meta = ?, updated_at = ? WHERE id = ?",
                              (dumps(meta), now_iso(), run_id))

    def drop_run(self, run: str | int) -> dict:
        """Delete one run: its results (with their raw samples), its tuned configurations and the
        run itself, in one transaction; the machine's fingerprint stays. ``run`` is the run's id
        (as ``db info`` and the errors show it) or its uid. Returns what was removed:
        ``{"id", "uid", "results", "tuned_configs"}``.

        :raises UnknownRun: no such run.
        """
        with self._write():
            found = self._find_run(run)
            if found is None:
                raise UnknownRun(f"no run {run} in {self.path}; `autoselect db info` shows the newest run, "
                                 "`autoselect db check` names the runs of bad rows")
            run_id, uid = found
            results = self.conn.execute("SELECT COUNT(*) FROM results WHERE run_id = ?", (run_id,)).fetchone()[0]
            self.conn.execute("DELETE FROM samples WHERE result_id IN (SELECT id FROM results WHERE run_id = ?)",
                              (run_id,))
            self.conn.execute("DELETE FROM results WHERE run_id = ?", (run_id,))
            tuned = 0
            if self.schema_version >= 2:
                tuned = self.conn.execute("DELETE FROM tuned_configs WHERE run_id = ?", (run_id,)).rowcount
            self.conn.execute("DELETE FROM runs WHERE id = ?", (run_id,))
        return {"id": run_id, "uid": uid, "results": results, "tuned_configs": tuned}

    def run_summary(self, run: str | int) -> dict | None:
        """What :meth:`drop_run` would remove (``{"id", "uid", "results", "tuned_configs",
        "started_at", "status", "trigger", "command"}``), None when there is no such run."""
        found = self._find_run(run)
        if found is None:
            return None
        run_id, uid = found
        started, status, trigger, command = self.conn.execute(
            "SELECT started_at, status, \"trigger\", command FROM runs WHERE id = ?", (run_id,)).fetchone()
        tuned = self.conn.execute("SELECT COUNT(*) FROM tuned_configs WHERE run_id = ?", (run_id,)).fetchone()[0] \
            if self.schema_version >= 2 else 0
        return {"id": run_id, "uid": uid,
                "results": self.conn.execute("SELECT COUNT(*) FROM results WHERE run_id = ?", (run_id,)).fetchone()[0],
                "tuned_configs": tuned, "started_at": started, "status": status, "trigger": trigger,
                "command": command}

    def _find_run(self, run: str | int) -> tuple[int, str] | None:
        """(id, uid) of a run named by its id or its uid."""
        text = str(run).strip()
        if text.isdigit() and text.isascii() and len(text) <= 18:
            row = self.conn.execute("SELECT id, uid FROM runs WHERE id = ?", (int(text),)).fetchone()
            if row is not None:
                return row
        return self.conn.execute("SELECT id, uid FROM runs WHERE uid = ?", (text,)).fetchone()
