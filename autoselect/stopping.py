"""The stopping rule of one measured point: when sampling stops (nvbench's ``stdrel`` criterion).

Every number of the rule is here: the four a user sets (``--max-noise``, ``--min-samples``,
``--min-time``, ``--timeout`` of bench, tune's stages, a fleet spec) with their defaults
(:data:`STOPPING`), and the fixed ones (:attr:`StoppingRule.STABLE_WINDOW`,
:attr:`StoppingRule.STABLE_REL_STD`, :attr:`StoppingRule.MAX_SAMPLES`).
:class:`bench.measure.sampling.Sampling` applies it to one point's samples as they arrive.
Stdlib only: the CLI reads the defaults for its options on every command's fast path.
"""

from __future__ import annotations

from typing import NamedTuple

from autoselect.errors import UserError
from autoselect.options import MAX_DURATION_S, MAX_INT


class BadStoppingRule(UserError):
    "A stopping-rule option (--max-noise, --min-samples, --min-time, --timeout) out of range."


class StoppingRule(NamedTuple):
    """When the sampling of one point stops (nvbench's ``stdrel`` criterion and its defaults).

    Sampling stops when (a) at least ``min_samples`` samples and ``min_time_s`` seconds of
    accumulated sample time were taken and the noise (the relative standard error of the median)
    is at most ``max_noise``, or the last :attr:`STABLE_WINDOW` noise estimates vary by less than
    :attr:`STABLE_REL_STD` (the noise has stopped shrinking); or (b) ``timeout_s`` seconds of wall
    time passed since sampling began (the noise target is then recorded as not met); or (c)
    :attr:`MAX_SAMPLES` samples were taken.
    """

    max_noise: float = 0.005  # stop once the relative standard error of the median is below 0.5 %
    min_samples: int = 10  # at least this many samples
    min_time_s: float = 0.5  # at least this much accumulated sample time
    timeout_s: float = 15.0  # wall-clock limit per point: stop, noise_target_met = False
    #: Noise estimates compared for the "noise is stable" stop ...
    STABLE_WINDOW = 8
    #: ... which stops when they vary by less than this (relative standard deviation).
    STABLE_REL_STD = 0.05
    #: The most samples one point keeps (a memory bound).
    MAX_SAMPLES = 200_000

    def validate(self) -> None:
        """Refuse a rule that cannot stop sensibly.

        :raises BadStoppingRule: naming the option and the value.
        """
        if not (0 < self.max_noise < 1):
            raise BadStoppingRule(f"--max-noise must be a fraction in (0, 1), got {self.max_noise}")
        if isinstance(self.min_samples, bool) or not isinstance(self.min_samples, int) \
                or not 1 <= self.min_samples <= MAX_INT:
            raise BadStoppingRule(f"--min-samples must be a whole number of at least 1, got {self.min_samples}")
        if not (0 <= self.min_time_s <= MAX_DURATION_S):
            raise BadStoppingRule(f"--min-time must be 0 or more seconds, got {self.min_time_s}")
        if not (0 < self.timeout_s <= MAX_DURATION_S):
            raise BadStoppingRule(f"--timeout must be a positive number of seconds, got {self.timeout_s}")

    def to_dict(self) -> dict:
        """``{"max_noise", "min_samples", "min_time_s", "timeout_s"}``."""
        return self._asdict()


#: The stopping rule of ``bench`` and ``fleet`` (and their --max-noise/--min-samples/--min-time/
#: --timeout defaults): 10 samples, 0.5 s, 0.5 % noise, 15 s per point.
STOPPING = StoppingRule()
