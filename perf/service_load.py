"""Load ``autoselect serve`` with concurrent clients over loopback; print p50/p99 latency and errors.

Goal: p99 < 50 ms at 50 concurrent clients, zero errors.

The server runs as its own process (``autoselect serve`` on 127.0.0.1, a free port) over a
database holding the shipped example measurements (``tests/fixtures/results/*.jsonl``, 8-GPU
H200 and B200 classes). The clients are ``--clients`` asyncio tasks, each with its own
connection, sending requests back to back until ``--requests`` in total are done or
``--seconds`` have passed (bounded either way). The request mix cycles through
``/v1/recommend`` (four models x workloads x host classes), ``/v1/hosts``, ``/v1/drift`` and
``/healthz``, over ``--clients`` keep-alive HTTP/1.1 connections driven by a minimal asyncio
client (httpx's async pool costs more CPU than the server). It also measures each distinct request once before the load (the first answer
is computed, later ones come from the service's cache until the database changes) and prints
both, side by side.

Run: ``python perf/service_load.py [--clients 50] [--requests 3000] [--seconds 60]``
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
GOAL_P99_MS = 50.0


def build_db(path: Path) -> None:
    """A store with the shipped example measurements (H200 and B200 classes)."""
    from db.importing import import_records
    from db.jsonl import read_file
    from db.store import Store

    with Store(path) as store:
        for name in ("h200.jsonl", "b200.jsonl"):
            import_records(store, read_file(FIXTURES / "results" / name))


def host_classes(path: Path) -> list[str]:
    from db.queries import connect_readonly, host_classes as classes

    conn = connect_readonly(path)
    try:
        return [h["host_class"] for h in classes(conn)]
    finally:
        conn.close()


def request_mix(classes: list[str]) -> list[tuple[str, dict]]:
    """The distinct requests the clients cycle through."""
    # names under the server's --model-root (serve never takes a path)
    models = ["deepseek-v3", "deepseek-r1-nvfp4", "qwen3-30b-a3b", "qwen3-235b-a22b-fp8"]
    mix: list[tuple[str, dict]] = []
    for m in models:
        for hc in classes:
            for workload in ("decode", "prefill", "mixed"):
                mix.append(("/v1/recommend", {"model": m, "host_class": hc, "workload": workload}))
    mix += [("/v1/hosts", {}), ("/v1/drift", {}), ("/healthz", {})]
    return mix


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(db: Path, port: int) -> subprocess.Popen:
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    proc = subprocess.Popen([sys.executable, "-m", "autoselect", "serve", "--db", str(db), "--port", str(port),
                             "--model-root", str(FIXTURES / "models")],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    import httpx

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited: {proc.stderr.read()}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("server did not start within 60 s")


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


async def first_answers(base: str, mix) -> list[float]:
    import httpx

    out = []
    async with httpx.AsyncClient(base_url=base, timeout=30) as client:
        for path, params in mix:
            t = time.perf_counter()
            r = await client.get(path, params=params)
            out.append((time.perf_counter() - t) * 1e3)
            if r.status_code != 200:
                raise SystemExit(f"{path} {params} -> {r.status_code} {r.text}")
    return out


async def _get(reader, writer, target: str) -> tuple[int, bytes]:
    """One HTTP/1.1 keep-alive GET on an open connection: (status, body)."""
    writer.write(f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    length = 0
    for line in lines[1:]:
        if line.lower().startswith("content-length:"):
            length = int(line.split(":", 1)[1])
    body = await reader.readexactly(length)
    return status, body


async def load(port: int, mix, clients: int, total: int, seconds: float):
    """``clients`` keep-alive connections sending requests back to back (a minimal wrk: the
    client must cost far less CPU than the server on a 2-core machine, which httpx's async
    pool does not)."""
    from urllib.parse import urlencode

    targets = [f"{path}?{urlencode(params)}" if params else path for path, params in mix]
    latencies: list[float] = []
    errors: list[str] = []
    counter = {"next": 0}
    deadline = time.monotonic() + seconds

    async def worker():
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while time.monotonic() < deadline:
                i = counter["next"]
                if i >= total:
                    return
                counter["next"] = i + 1
                target = targets[i % len(targets)]
                t = time.perf_counter()
                try:
                    status, _ = await _get(reader, writer, target)
                except (OSError, asyncio.IncompleteReadError) as e:
                    errors.append(f"{target}: {type(e).__name__}")
                    writer.close()
                    reader, writer = await asyncio.open_connection("127.0.0.1", port)
                    continue
                if status == 200:
                    latencies.append((time.perf_counter() - t) * 1e3)
                else:
                    errors.append(f"{target}: HTTP {status}")
        finally:
            writer.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(clients)))
    return latencies, errors, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--seconds", type=float, default=60.0)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "results.db"
        build_db(db)
        mix = request_mix(host_classes(db))
        port = free_port()
        server = start_server(db, port)
        base = f"http://127.0.0.1:{port}"
        try:
            first = asyncio.run(first_answers(base, mix))
            cpu0 = process_cpu_s(server.pid)
            latencies, errors, wall = asyncio.run(load(port, mix, args.clients, args.requests, args.seconds))
            server_cpu = process_cpu_s(server.pid) - cpu0
        finally:
            server.terminate()
            server.wait(timeout=30)

    done = len(latencies) + len(errors)
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} (other processes compete "
          f"for the same cores); server CPU {server_cpu / max(done, 1) * 1e3:.2f} ms per request, "
          f"{server_cpu / wall:.0%} of one core while loaded")
    print(f"service load: {len(mix)} distinct requests, {args.clients} concurrent clients, "
          f"{len(latencies) + len(errors)} requests in {wall:.2f} s ({(len(latencies) + len(errors)) / wall:.0f} req/s)")
    print(f"  first answer (computed), one at a time: p50 {statistics.median(first):7.2f} ms   "
          f"p99 {pct(first, 0.99):7.2f} ms   max {max(first):7.2f} ms")
    if latencies:
        p50, p99 = statistics.median(latencies), pct(latencies, 0.99)
        print(f"  under load ({args.clients} clients):         p50 {p50:7.2f} ms   p99 {p99:7.2f} ms   "
              f"max {max(latencies):7.2f} ms")
        print(f"  p99 / goal ({GOAL_P99_MS:.0f} ms): {p99 / GOAL_P99_MS:.2f}   errors: {len(errors)}"
              + (f" (first: {errors[0]})" if errors else ""))
        verdict = p99 < GOAL_P99_MS and not errors
    else:
        print(f"  no successful request; errors: {len(errors)} (first: {errors[0] if errors else '-'})")
        verdict = False
    print("  goal met" if verdict else "  GOAL NOT MET")


if __name__ == "__main__":
    main()
