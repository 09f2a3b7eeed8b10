"""A benchmark-like writer process for the concurrency and kill tests.

    PYTHONPATH=tests:. python -m support.db_writer DB MACHINE RESULTS SAMPLES [GO_FILE]

Opens the store, begins a run on a fake HGX host named MACHINE, waits until GO_FILE exists
(so several writers start together), adds RESULTS results (RESULTS = 0: forever) of SAMPLES
raw samples each, printing ``committed N`` after each one, then finishes the run.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from support.db import hgx_host, make_result

from db.store import Store


def main(db: str, machine: str, results: int, samples: int, go: str | None = None) -> None:
    store = Store(db)
    run = store.begin_run(hgx_host(machine), trigger="test", command=" ".join(sys.argv))
    print("ready", flush=True)
    while go and not Path(go).exists():
        time.sleep(0.01)
    n = 0
    while results == 0 or n < results:
        raw = [50.0 + (n % 7) + i * 1e-3 for i in range(samples)]
        store.add_result(run, make_result(tokens=n + 1, raw_samples_us=raw, knobs={"writer": machine}))
        n += 1
        print(f"committed {n}", flush=True)
    store.finish_run(run)
    store.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] if len(sys.argv) > 5 else None)
