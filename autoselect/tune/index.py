"""An index over a race's measurements: each query reads one bucket of it, never every measurement.

:class:`MeasurementIndex` keeps the measurements in arrival order (the log a study replays)
and, as each arrives, files it under its series (backend + knob setting), its point (series +
tokens) and its stage, so the race's questions (a point's runs, a series' first failure, its
run-to-run noise, how many independent runs stand behind it) are dictionary look-ups.
"""

from __future__ import annotations

from collections import Counter

from autoselect.tune.measurement import Measurement, setting_key
from autoselect.tune.stats import Noise, run_to_run_noise


class MeasurementIndex:
    """Measurements by series ``(backend, setting key)``, point ``(series, tokens)`` and stage."""

    def __init__(self):
        self.log: list[Measurement] = []
        self._points: dict[tuple[str, str, int], list[Measurement]] = {}
        self._tokens: dict[tuple[str, str], list[int]] = {}  # series -> its token counts, first seen first
        self._first_failure: dict[tuple[str, str], Measurement] = {}
        self._stages: Counter = Counter()
        self._calls: dict[str, set[int]] = {}  # untuned backend -> calls behind its ok measurements
        self._noise: dict[tuple[str, str], Noise | None] = {}  # cached, dropped when its series grows

    def add(self, m: Measurement) -> None:
        """File one measurement."""
        key = setting_key(m.setting)
        self.log.append(m)
        if (m.backend, key, m.tokens) not in self._points:
            self._tokens.setdefault((m.backend, key), []).append(m.tokens)
        self._points.setdefault((m.backend, key, m.tokens), []).append(m)
        self._stages[(m.backend, key, m.tokens, m.stage)] += 1
        if m.status != "ok":
            self._first_failure.setdefault((m.backend, key), m)
        elif m.latency_us and not m.setting and m.call:
            self._calls.setdefault(m.backend, set()).add(m.call)
        self._noise.pop((m.backend, key), None)

    def point(self, backend: str, setting: dict[str, str] | None, tokens: int) -> list[Measurement]:
        """Every measurement of one point, in arrival order."""
        return self._points.get((backend, setting_key(setting), tokens), [])

    def count(self, backend: str, tokens: int, stage: str, setting: dict[str, str] | None = None) -> int:
        """How many measurements of this stage the point has."""
        return self._stages[(backend, setting_key(setting), tokens, stage)]

    def first_failure(self, backend: str, setting: dict[str, str] | None = None) -> Measurement | None:
        """The first non-ok measurement of a series, or None."""
        return self._first_failure.get((backend, setting_key(setting)))

    def ok_latencies(self, backend: str, setting: dict[str, str] | None = None) -> list[list[float]]:
        """Per token count of the series, the latencies of its ok measurements."""
        key = (backend, setting_key(setting))
        return [[m.latency_us for m in self._points[(*key, t)] if m.status == "ok" and m.latency_us]
                for t in self._tokens.get(key, [])]

    def noise(self, backend: str, setting: dict[str, str] | None = None) -> Noise | None:
        """The series' own run-to-run noise, from its repeated points (None without repeats)."""
        key = (backend, setting_key(setting))
        if key not in self._noise:
            self._noise[key] = run_to_run_noise(self.ok_latencies(backend, setting))
        return self._noise[key]

    def runs(self, backend: str) -> int:
        """Independent runs behind the untuned backend's ok measurements: distinct sweep calls (jobs),
        and never fewer than the most runs of one point (each run of a point is a separate call)."""
        most = max((len(v) for v in self.ok_latencies(backend)), default=0)
        return max(len(self._calls.get(backend, ())), most)
