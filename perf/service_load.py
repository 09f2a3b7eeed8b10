"""Load ``autoselect serve`` with concurrent clients over loopback: latency, throughput, server CPU.

Goals (this 2-core machine, cached answers, measured side by side in one run):

* p99 <= 10 ms at 50 concurrent clients, >= 5,000 requests/s, server CPU <= 0.2 ms per request
  (the server process's user + system time over the load, divided by the requests: steadier than
  wall time on a shared machine);
* the first (computed) answer of each distinct request, one at a time: p50 <= 15 ms;
* exact: zero errors, every answer under load byte-identical to the first (computed) one, and
  every request under load answered from the kept answers (the front: FastAPI never sees it).

The server runs as its own process (``autoselect serve`` on 127.0.0.1, a free port) over a
database holding the shipped example measurements (``tests/fixtures/results/*.jsonl``, 8-GPU
H200 and B200 classes). The request mix cycles through ``/v1/recommend`` (four models x
workloads x host classes), ``/v1/hosts``, ``/v1/drift`` and ``/healthz``. Each distinct request
is first sent once, one at a time (computed: the first answer); then ``--clients`` keep-alive
HTTP/1.1 connections, driven by a minimal asyncio client (httpx's async pool costs more CPU than
the server), send requests back to back until ``--requests`` are done or ``--seconds`` have
passed.

What decides the numbers is printed with them, because each changes them several-fold:

* the interpreter (version, build: a distribution's Python is built with PGO/LTO, pyenv's by
  default is not) and whether it is a virtual environment;
* the server's HTTP parser and event loop, as uvicorn picks them in the server's interpreter
  (httptools and uvloop, the ``serve`` extra, else h11 and asyncio: about 3x the CPU per request);
* whether the load was answered by the front (the server's own count, from its log as it
  stops): a request that reaches FastAPI costs about 6x the CPU;
* what one system call costs (a ``stat``: a sandboxed or virtualised kernel makes it several
  times dearer, and every request makes several);
* how much of one core the server and the load generator each used: the two processes share
  the 2 cores with everything else on the machine, so when neither is near 100 % the requests/s
  and the latencies measure the machine's load (printed before and after), and the CPU per
  request is the number that compares across runs.

Run: ``python perf/service_load.py [--clients 50] [--requests 20000] [--seconds 60] [--quick]``
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from goals import EXACT, Goals, add_quick

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
#: the goals (cached answers at GOAL_CLIENTS concurrent clients; the first answer one at a time)
GOAL_CLIENTS = 50
GOAL_P99_MS = 10.0
GOAL_RPS = 5000.0
GOAL_CPU_MS = 0.2
GOAL_FIRST_P50_MS = 15.0


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


def start_server(db: Path, port: int, log: Path) -> tuple[subprocess.Popen, int]:
    """``autoselect serve`` in this interpreter, its log (stderr) into ``log``; and how many
    requests waiting for it to answer took (each that got an answer reached the server)."""
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    with open(log, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "autoselect", "serve", "--db", str(db), "--port", str(port),
                                 "--model-root", str(FIXTURES / "models")],
                                env=env, stdout=subprocess.DEVNULL, stderr=err, text=True)
    import httpx

    deadline = time.monotonic() + 60
    answered = 0
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited: {log.read_text()}")
        try:
            status = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code
            answered += 1
            if status == 200:
                return proc, answered
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


async def first_answers(base: str, mix) -> tuple[list[float], dict[str, bytes]]:
    """Each distinct request once, one at a time: (milliseconds, the body per target)."""
    import httpx

    out, bodies = [], {}
    async with httpx.AsyncClient(base_url=base, timeout=30) as client:
        for target in targets(mix):
            t = time.perf_counter()
            r = await client.get(target)
            out.append((time.perf_counter() - t) * 1e3)
            if r.status_code != 200:
                raise SystemExit(f"{target} -> {r.status_code} {r.text}")
            bodies[target] = r.content
    return out, bodies


def targets(mix) -> list[str]:
    """The request targets (path and query string) of ``mix``."""
    from urllib.parse import urlencode

    return [f"{path}?{urlencode(params)}" if params else path for path, params in mix]


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


async def load(port: int, bodies: dict[str, bytes], clients: int, total: int, seconds: float):
    """``clients`` keep-alive connections sending requests back to back (a minimal wrk: the
    client must cost far less CPU than the server on a 2-core machine, which httpx's async
    pool does not): (latencies of the 200 answers, errors, answers that differ from the first
    answer, wall seconds)."""
    order = list(bodies)
    latencies: list[float] = []
    errors: list[str] = []
    differ: list[str] = []
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
                target = order[i % len(order)]
                t = time.perf_counter()
                try:
                    status, body = await _get(reader, writer, target)
                except (OSError, asyncio.IncompleteReadError) as e:
                    errors.append(f"{target}: {type(e).__name__}")
                    writer.close()
                    reader, writer = await asyncio.open_connection("127.0.0.1", port)
                    continue
                if status == 200:
                    latencies.append((time.perf_counter() - t) * 1e3)
                    if body != bodies[target]:
                        differ.append(target)
                else:
                    errors.append(f"{target}: HTTP {status}")
        finally:
            writer.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(clients)))
    return latencies, errors, differ, time.perf_counter() - t0


#: what uvicorn's defaults run in an interpreter: its HTTP protocol class and event loop (serve's
#: protocol subclasses uvicorn's auto choice)
_STACK = ("from autoselect.fleet.service.connections import GuardedProtocol as P\n"
          "try:\n    import uvloop  # noqa: F401\n    loop = 'uvloop'\nexcept ImportError:\n    loop = 'asyncio'\n"
          "print(P.__mro__[1].__name__, loop)")


def server_stack() -> str:
    """The HTTP parser and event loop the server runs with, asked of the server's interpreter."""
    out = subprocess.run([sys.executable, "-c", _STACK], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        return f"unknown ({out.stderr.strip().splitlines()[-1:]})"
    protocol, loop = out.stdout.split()
    parser = {"HttpToolsProtocol": "httptools", "H11Protocol": "h11 (pure Python; the serve extra installs "
              "httptools)"}.get(protocol, protocol)
    return f"HTTP parser {parser}, event loop {loop}" + ("" if loop == "uvloop" else
                                                         " (the serve extra installs uvloop)")


def interpreter() -> str:
    """This interpreter: version, build flags that change its speed, virtual environment or not."""
    flags = sysconfig.get_config_var("CONFIG_ARGS") or ""
    build = [name for name, flag in (("PGO", "--enable-optimizations"), ("LTO", "--with-lto")) if flag in flags]
    venv = "a virtual environment" if sys.prefix != sys.base_prefix else "no virtual environment"
    return (f"Python {sys.version.split()[0]} ({sys.implementation.name}, built "
            f"{'with ' + ' and '.join(build) if build else 'without PGO or LTO'}), {venv}")


def stat_us(path: Path, n: int = 2000) -> float:
    """The median time of one ``os.stat`` of ``path`` (µs): what a system call costs here (a
    sandboxed or virtualised kernel makes each several times dearer), and each cached answer makes
    a few (the database's state, its model's files) besides the socket's own."""
    name = os.fspath(path)
    times = []
    for _ in range(n):
        t = time.perf_counter()
        os.stat(name)
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


def kept_answers(log: Path) -> tuple[int, int] | None:
    """(requests, answered from the kept answers) of the server's last line as it stopped."""
    for line in reversed(log.read_text().splitlines()):
        if line.startswith("serve: stopped after "):
            words = line.split()
            return int(words[3]), int(words[5])
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=None, help=f"concurrent clients (default {GOAL_CLIENTS})")
    ap.add_argument("--requests", type=int, default=None, help="requests under load (default 20000)")
    ap.add_argument("--seconds", type=float, default=60.0, help="bound on the load's duration")
    add_quick(ap, "10 clients, 500 requests")
    args = ap.parse_args()
    clients = args.clients or (10 if args.quick else GOAL_CLIENTS)
    total = args.requests or (500 if args.quick else 20000)
    goals = Goals(args.quick)

    stack = server_stack()
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "results.db"
        build_db(db)
        mix = request_mix(host_classes(db))
        port = free_port()
        log = Path(tmp) / "serve.log"
        server, probes = start_server(db, port, log)
        base = f"http://127.0.0.1:{port}"
        try:
            first, bodies = asyncio.run(first_answers(base, mix))
            stat_cost = stat_us(db)
            load0 = os.getloadavg()[0]
            cpu0, client0 = process_cpu_s(server.pid), time.process_time()
            latencies, errors, differ, wall = asyncio.run(load(port, bodies, clients, total, args.seconds))
            server_cpu, client_cpu = process_cpu_s(server.pid) - cpu0, time.process_time() - client0
        finally:
            server.terminate()
            server.wait(timeout=30)
        counted = kept_answers(log)

    done = len(latencies) + len(errors)
    rps = done / wall
    cpu_ms = server_cpu / max(done, 1) * 1e3
    # the requests that reached the app: at most the start-up probes and the first answers, if the
    # front answered the whole load from the kept answers
    reached = counted[0] - counted[1] if counted else None
    before = probes + len(mix)
    print(f"machine: {os.cpu_count()} CPUs, load average {load0:.1f} before the load, {os.getloadavg()[0]:.1f} after "
          f"(other processes compete for the same cores)")
    print(f"interpreter: {interpreter()}; server: {stack}; load generator: asyncio streams in this process; "
          f"one stat() {stat_cost:.1f} µs")
    print(f"service load: {len(mix)} distinct requests, {clients} concurrent clients, {done} requests in "
          f"{wall:.2f} s; the server used {server_cpu / wall:.0%} of one core ({cpu_ms:.3f} ms per request), the "
          f"load generator {client_cpu / wall:.0%} ({client_cpu / max(done, 1) * 1e3:.3f} ms per request)")
    if max(server_cpu, client_cpu) / wall < 0.8:
        print("  neither process kept a core busy: the rest of the time both waited for a CPU, so requests/s and the "
              "latencies here measure the machine's load more than the server; CPU per request compares across runs")
    print(f"  first answer (computed), one at a time: p50 {statistics.median(first):7.2f} ms   "
          f"p99 {pct(first, 0.99):7.2f} ms   max {max(first):7.2f} ms")
    if latencies:
        print(f"  cached, under load ({clients} clients):     p50 {statistics.median(latencies):7.2f} ms   "
              f"p99 {pct(latencies, 0.99):7.2f} ms   max {max(latencies):7.2f} ms")
    p99 = pct(latencies, 0.99) if latencies else float("inf")
    at = f"{clients} clients" + ("" if clients == GOAL_CLIENTS else f"; the goal is at {GOAL_CLIENTS}")
    goals.check(f"cached p99 ({at})", f"{p99:.2f} ms", f"<= {GOAL_P99_MS:g} ms", p99 <= GOAL_P99_MS)
    goals.check("cached throughput", f"{rps:,.0f} requests/s", f">= {GOAL_RPS:,.0f}", rps >= GOAL_RPS)
    goals.check("server CPU per cached request", f"{cpu_ms:.3f} ms", f"<= {GOAL_CPU_MS:g} ms", cpu_ms <= GOAL_CPU_MS)
    first_p50 = statistics.median(first)
    goals.check("first (computed) answer p50", f"{first_p50:.2f} ms", f"<= {GOAL_FIRST_P50_MS:g} ms",
                first_p50 <= GOAL_FIRST_P50_MS)
    goals.check("errors", f"{len(errors)}" + (f" (first: {errors[0]})" if errors else ""), "0", not errors, EXACT)
    goals.check("answers under load that differ from the first answer",
                f"{len(differ)}" + (f" (first: {differ[0]})" if differ else ""), "0", not differ, EXACT)
    goals.check("requests that reached the app, not the kept answers (the server's count as it stopped)",
                f"{reached} of {counted[0]}" if counted else "unknown (the server said nothing as it stopped)",
                f"<= {before} (the start-up probes and the first answers; none of the load)",
                reached is not None and reached <= before, EXACT)
    return goals.finish()


if __name__ == "__main__":
    raise SystemExit(main())
