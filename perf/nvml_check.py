"""GPU-node check of the host fingerprint: the real NVML path vs a replay of its own recording.

Run on a machine with NVIDIA GPUs (the lead's device check; needs only nvidia-ml-py):

    python3 perf/nvml_check.py [OUT_DIR]

1. records what NVML answers (tests/fixtures/nvml/record_nvml.py) into OUT_DIR/nvml_recording.json;
2. takes the fingerprint through the real pynvml;
3. takes it again through tests/support/nvml.py's ReplayNvml of that recording;
4. prints both summaries and exits 1 unless they are identical.

A match means the replay fixtures exercise exactly the code path real NVML does; copy the
recording to tests/fixtures/nvml/<name>.json to replace a constructed fixture.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "nvml"))


def main() -> int:
    import pynvml

    from autoselect.hardware import fingerprint
    from support.nvml import ReplayNvml
    from record_nvml import record

    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(".")
    out.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    real = fingerprint(pynvml)
    real_ms = (time.perf_counter() - t) * 1e3
    if real.device != "cuda":
        print("NVML found no GPU here: nothing to check (CPU fingerprint: %s)" % real.host_class)
        return 1
    recording = record()
    (out / "nvml_recording.json").write_text(json.dumps(recording, indent=1) + "\n")
    replayed = fingerprint(ReplayNvml(recording))
    print(f"real NVML fingerprint in {real_ms:.1f} ms")
    for name, fp in (("real", real), ("replay", replayed)):
        links = [(g.nvlinks_up, g.nvlinks_total) for g in fp.gpus]
        print(f"{name:7s} {fp.host_class}  {fp.gpu_count}x {fp.gpu_name} {fp.gpu_arch}  links {links}  "
              f"peak {fp.nvlink_peak_gbps}  fabric {fp.fabric}  driver {fp.driver_version} cuda {fp.cuda_version}")
    same = real.to_dict() == replayed.to_dict()
    print("replay matches real NVML:", "yes" if same else "NO")
    (out / "fingerprint.json").write_text(json.dumps(real.to_dict(), indent=1) + "\n")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
