"""Sampling one point under the stopping rule: its samples, and whether to take another.

:class:`Sampling` applies the rule of :mod:`autoselect.stopping` (every number of it, the
defaults included, is defined there) to the samples of one point as they arrive. No torch: it
sees plain floats (microseconds); numpy, imported lazily, computes the noise estimate
(:func:`bench.measure.stats.relative_standard_error`).
"""

from __future__ import annotations

import math
import time

from autoselect.stopping import STOPPING, StoppingRule
from bench.measure.stats import relative_standard_error

#: Round trips run before timing starts (JIT, caches, lazy allocations).
WARMUP_ITERATIONS = 3


class Sampling:
    """One point's samples under the stopping rule: ``add(sample)`` each sample, ask ``done()``.

    Done as :class:`autoselect.stopping.StoppingRule` says; settings left None take
    :data:`autoselect.stopping.STOPPING`'s. The wall time counts from :meth:`start`, else from
    the first sample.
    """

    def __init__(self, *, max_noise=None, min_samples=None, min_time_s=None, timeout_s=None,
                 clock=time.monotonic):
        d = STOPPING
        self.max_noise = d.max_noise if max_noise is None else max_noise
        self.min_samples = d.min_samples if min_samples is None else min_samples
        self.min_time_s = d.min_time_s if min_time_s is None else min_time_s
        self.timeout_s = d.timeout_s if timeout_s is None else timeout_s
        self.clock = clock
        self.samples: list[float] = []
        self._array = None  # (values, scratch, count): float64 buffers for done(), see _as_arrays
        self.accumulated_s = 0.0
        self.started: float | None = None
        self.noise_history: list[float] = []
        self.noise: float | None = None
        self.noise_target_met = False
        self.timed_out = False

    def start(self) -> None:
        """Sampling begins now: the timeout counts from here (the first batch's time included)."""
        if self.started is None:
            self.started = self.clock()

    def add(self, sample_us: float) -> None:
        """Record one sample (microseconds)."""
        if self.started is None:
            self.started = self.clock()
        self.samples.append(float(sample_us))
        self.accumulated_s += sample_us * 1e-6

    def done(self) -> bool:
        """Whether to stop now (updates ``noise`` and ``noise_target_met``)."""
        n = len(self.samples)
        if n >= 2:
            values, scratch = self._as_arrays()
            self.noise = relative_standard_error(values, scratch=scratch)
        else:
            self.noise = None
        if self.noise is not None:
            self.noise_history.append(self.noise)
        self.noise_target_met = self.noise is not None and self.noise <= self.max_noise
        if n >= StoppingRule.MAX_SAMPLES:
            return True
        if self.started is not None and self.clock() - self.started >= self.timeout_s:
            self.timed_out = True
            return True
        if n < self.min_samples or self.accumulated_s < self.min_time_s:
            return False
        return self.noise_target_met or self.noise_is_stable()

    def _as_arrays(self):
        """``samples`` as a float64 array plus a scratch array of the same length, kept between calls.

        ``done()`` runs once per batch: converting the whole list and copying it for two
        medians each time cost more than the medians. The values array holds the samples in
        some order (the medians partition it in place, which a median does not notice); only
        samples added since the last call are copied in. Both buffers double when full.
        """
        import numpy as np

        n = len(self.samples)
        if self._array is None:
            self._array = (np.empty(max(64, n), np.float64), np.empty(max(64, n), np.float64), 0)
        values, scratch, have = self._array
        if n > len(values):
            size = max(n, 2 * len(values))
            grown = np.empty(size, np.float64)
            grown[:have] = values[:have]
            values, scratch = grown, np.empty(size, np.float64)
        if n > have:
            values[have:n] = self.samples[have:n]
        self._array = (values, scratch, n)
        return values[:n], scratch[:n]

    def noise_is_stable(self) -> bool:
        """The last ``STABLE_WINDOW`` noise estimates vary by less than ``STABLE_REL_STD``."""
        window = self.noise_history[-StoppingRule.STABLE_WINDOW:]
        if len(window) < StoppingRule.STABLE_WINDOW:
            return False
        mean = sum(window) / len(window)
        if mean == 0:
            return True
        var = sum((x - mean) ** 2 for x in window) / (len(window) - 1)
        return math.sqrt(var) / mean < StoppingRule.STABLE_REL_STD

