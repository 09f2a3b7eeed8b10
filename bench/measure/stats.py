"""Statistics of one point's samples: the noise of the median and the Result's latency fields."""

from __future__ import annotations

import math
import statistics


def relative_standard_error(samples, *, scratch=None) -> float:
    """Relative standard error of the median: ``1.2533 · 1.4826 · MAD / sqrt(n) / median``.

    The MAD-based spread ignores outliers (an OS hiccup on a shared CPU); 1.2533 is the
    asymptotic ratio of the median's standard error to the mean's for normal samples.

    :param scratch: a float64 array of ``len(samples)`` values to work in; when given,
        ``samples`` must be a float64 array too and is reordered in place (the medians
        need no copies; the result does not depend on the order).
    """
    import numpy as np

    if scratch is None:
        a = np.asarray(samples, dtype=np.float64)
        med = float(np.median(a))
        if med <= 0:
            return math.inf
        mad = float(np.median(np.abs(a - med)))
        return 1.2533 * 1.4826 * mad / math.sqrt(len(a)) / med
    a = samples
    med = float(np.median(a, overwrite_input=True))
    if med <= 0:
        return math.inf
    dev = np.abs(np.subtract(a, med, out=scratch), out=scratch)
    mad = float(np.median(dev, overwrite_input=True))
    return 1.2533 * 1.4826 * mad / math.sqrt(len(a)) / med


def summarize(samples_us, *, noise=None) -> dict:
    """Latency statistics of a sample list, as Result fields (``latency_us_*``, ``latency_stdrel``, ``noise_stdrel``)."""
    import numpy as np

    a = np.asarray(samples_us, dtype=np.float64)
    mean = float(a.mean())
    std = float(a.std(ddof=1)) if len(a) > 1 else 0.0
    p10, p50, p90, p99 = (float(v) for v in np.percentile(a, [10, 50, 90, 99]))
    return {
        "samples": int(len(a)),
        "latency_us_p50": p50,
        "latency_us_mean": mean,
        "latency_us_min": float(a.min()),
        "latency_us_p10": p10,
        "latency_us_p90": p90,
        "latency_us_p99": p99,
        "latency_stdrel": std / mean if mean > 0 else None,
        "noise_stdrel": relative_standard_error(a) if noise is None else noise,
    }


def split_medians(rows) -> dict:
    """Median dispatch and combine times of ``(dispatch_us, combine_us)`` rows (already max over ranks)."""
    return {"dispatch_us_p50": statistics.median(r[0] for r in rows),
            "combine_us_p50": statistics.median(r[1] for r in rows)}

