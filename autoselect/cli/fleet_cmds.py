"""``autoselect fleet ...`` (run, schedule, drift, status, deploy) and ``autoselect serve``.

Parsing and printing only: the work is in :mod:`autoselect.fleet` (its ``drift``, ``service`` and
``deploy`` subpackages included). The library is imported inside the callbacks (Ray, FastAPI and
uvicorn further inside it), so ``autoselect fleet --help`` stays fast; the printers read the
library's dataclasses (progress events, reports) by attribute.
"""

from __future__ import annotations

import json
import sys

import click

from autoselect.cli import db_option, format_option, stopping_rule_options
from autoselect.options import FLEET_TOKENS, MIN_SLOWDOWN, NOISE_K, parse_duration, parse_int_list, parse_name_list
from autoselect.workload import Shape


def fleet_run_options(f):
    """The options ``fleet run`` and ``fleet schedule`` share."""
    options = [
        click.option("--address", envvar="RAY_ADDRESS", show_envvar=True, default=None, metavar="ADDR",
                     help="Ray cluster address (host:port of the head's GCS, or 'auto'); default: auto."),
        click.option("--nodes", type=int, default=None, metavar="N", show_default="every eligible node",
                     help="Nodes to benchmark (one placement-group bundle each, STRICT_SPREAD)."),
        click.option("--gpus-per-node", type=int, default=None, metavar="G", show_default="the nodes' GPU count",
                     help="GPUs in each node's bundle: all of a node's GPUs."),
        click.option("--cpus-per-node", type=float, default=1.0, show_default=True, metavar="C",
                     help="CPUs reserved in each bundle."),
        click.option("--world-size", type=int, default=None, metavar="N", show_default="gpus per node",
                     help="Ranks of the all2all on each node."),
        click.option("--model", "models", multiple=True, metavar="DIR|HF_ID",
                     help="Model to measure (repeatable); each node uses the dtype for its GPU arch."),
        click.option("--hidden", type=int, default=None, help="Explicit shape: hidden size."),
        click.option("--top-k", type=int, default=None, help="Explicit shape: experts per token."),
        click.option("--experts", type=int, default=None, help="Explicit shape: routed experts."),
        click.option("--dtype", default=None, metavar="DTYPE", help="Explicit shape: activation dtype (bf16, fp8_block128, nvfp4, ...)."),
        click.option("--tokens", default=",".join(map(str, FLEET_TOKENS)), show_default=True, metavar="LIST",
                     help="Tokens per rank to measure."),
        click.option("--backends", default=None, metavar="LIST",
                     help="Backends to measure, comma-separated (default: every registered backend)."),
        click.option("--budget", default=None, metavar="DURATION",
                     help="Measuring time per node (e.g. 20m): no new backend starts after it."),
        click.option("--retries", type=int, default=1, show_default=True, metavar="N",
                     help="Re-runs of a node whose task failed or whose node disappeared."),
        click.option("--only-idle", is_flag=True, help="Skip nodes whose GPUs are busy (NVML utilisation / memory)."),
        click.option("--busy-utilization", type=float, default=0.10, show_default=True, metavar="FRACTION",
                     help="--only-idle: a GPU above this utilisation is busy."),
        click.option("--busy-memory", type=float, default=0.10, show_default=True, metavar="FRACTION",
                     help="--only-idle: a GPU with more of its memory in use is busy."),
        click.option("--device", type=click.Choice(["cuda", "cpu"]), default="cuda", show_default=True,
                     help="cpu runs the gloo harness (test clusters without GPUs)."),
        stopping_rule_options,
        click.option("--reschedule-wait", type=float, default=10.0, show_default=True, metavar="S",
                     help="How long a failed node's bundle may take to come back on a live node before it is lost."),
        db_option,
        format_option("text", "json"),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def _spec(kw: dict, trigger: str):
    from autoselect.fleet import FleetSpec, command_line, validate

    shape = Shape.from_options(hidden=kw["hidden"], top_k=kw["top_k"], experts=kw["experts"], dtype=kw["dtype"])
    budget = parse_duration(kw["budget"], what="--budget") if kw["budget"] is not None else None
    spec = FleetSpec(
        address=kw["address"], nodes=kw["nodes"], gpus_per_node=kw["gpus_per_node"],
        cpus_per_node=kw["cpus_per_node"], world_size=kw["world_size"], device=kw["device"],
        models=list(kw["models"]), shapes=[shape] if shape else [],
        tokens=parse_int_list(kw["tokens"], what="--tokens"),
        backends=parse_name_list(kw["backends"], what="--backends") if kw["backends"] is not None else None,
        budget_s=budget, retries=kw["retries"], only_idle=kw["only_idle"],
        busy_utilization=kw["busy_utilization"], busy_memory=kw["busy_memory"], max_noise=kw["max_noise"],
        min_samples=kw["min_samples"], min_time_s=kw["min_time_s"], timeout_s=kw["timeout_s"],
        reschedule_wait_s=kw["reschedule_wait"], trigger=trigger,
        command=command_line(["autoselect", *sys.argv[1:]]) if sys.argv else "autoselect fleet run",
    )
    validate(spec)  # before any progress bar, Ray connection or database
    return spec


class _FleetBar:
    """The progress printer of one fleet run: a rich bar (results so far) and a line per retry,
    failure or skipped node, on stderr; dispatches on the event's type."""

    def __init__(self, bar, task, console):
        from autoselect.fleet import events

        self.bar, self.task, self.console, self.events = bar, task, console, events

    def __call__(self, ev) -> None:
        e = self.events
        if isinstance(ev, e.Placed):
            self.bar.update(self.task, description=f"{ev.nodes} node(s)")
        elif isinstance(ev, e.NodeResult):
            self.bar.advance(self.task)
        elif isinstance(ev, e.NodeStarted) and ev.attempt > 1:
            self.console.print(f"retrying {ev.hostname} (attempt {ev.attempt})")
        elif isinstance(ev, e.NodeFailed):
            self.console.print(f"[red]{ev.hostname or 'bundle %d' % ev.bundle}: {ev.error}[/red]")
        elif isinstance(ev, e.NodeSkipped):
            self.console.print(f"skipped busy {ev.hostname}: {'; '.join(ev.reasons)}")


def _run_with_progress(spec, db_path):
    """Run one fleet run with a rich progress bar (results over expected points) on stderr."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from autoselect.fleet import run_fleet

    console = Console(stderr=True)
    with Progress(TextColumn("[bold]fleet[/bold] {task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, transient=True, disable=not console.is_terminal) as bar:
        return run_fleet(spec, db_path, progress=_FleetBar(bar, bar.add_task("placing", total=None), console))


def _print_report(report, fmt: str) -> None:
    if fmt == "json":
        click.echo(json.dumps(report.to_dict(), indent=2))
        return
    click.echo(f"fleet run {report.fleet_run} ({report.trigger}) -> {report.db_path}, {report.seconds:.1f} s")
    click.echo(f"{'node':<32} {'status':<9} {'results':>7} {'tries':>5}  error")
    for n in report.nodes:
        click.echo(f"{(n.hostname or '?'):<32} {n.status:<9} {n.results:>7} {n.attempts:>5}  {n.error or ''}")


@click.group("fleet")
def fleet_group():
    """Benchmark a Ray cluster's nodes, watch them for drift, and report their health.

    One benchmark task per node (a STRICT_SPREAD placement group holding each node's GPUs);
    the driver writes every result to one database. `drift` and `status` read it.

    \b
    Examples:
      autoselect fleet run --address head:6379 --model deepseek-ai/DeepSeek-V3 --db fleet.db
      autoselect fleet schedule --every 24h --jitter 1h --model deepseek-ai/DeepSeek-V3 --db fleet.db
      autoselect fleet drift --db fleet.db
      autoselect fleet status --db fleet.db --format json
    """


@fleet_group.command("run")
@fleet_run_options
@click.option("--trigger", default="manual", show_default=True, metavar="NAME",
              help="Recorded as the runs' trigger (systemd, cronjob, slurm, ...).")
def fleet_run_cmd(trigger, fmt, db_path, **kw):
    """Benchmark every node of a Ray cluster once and store the results.

    Exit status 1 when a node failed or was lost (its run is recorded with the reason; the
    other nodes' results are stored).

    \b
    Examples:
      autoselect fleet run --address 10.0.0.1:6379 --model deepseek-ai/DeepSeek-V3 --db fleet.db
      autoselect fleet run --nodes 4 --gpus-per-node 8 --hidden 7168 --top-k 8 --experts 256 --dtype fp8_block128
    """
    spec = _spec(kw, trigger)
    report = _run_with_progress(spec, db_path)
    _print_report(report, fmt)
    if not report.ok:
        sys.exit(1)


@fleet_group.command("schedule")
@fleet_run_options
@click.option("--every", default="24h", show_default=True, metavar="DURATION", help="Time between runs.")
@click.option("--jitter", default="0s", show_default=True, metavar="DURATION",
              help="Each wait is --every plus a uniform random offset within +-jitter.")
@click.option("--count", type=int, default=None, metavar="N", show_default="forever", help="Stop after N runs.")
def fleet_schedule_cmd(every, jitter, count, fmt, db_path, **kw):
    """Run the fleet benchmark now and then periodically, in the foreground.

    Each run is recorded with trigger "schedule". A run that fails to reach the cluster is
    reported and the loop goes on. For production, prefer the systemd timer, Kubernetes
    CronJob or Slurm examples (`autoselect fleet deploy`).

    \b
    Example:
      autoselect fleet schedule --every 24h --jitter 1h --model deepseek-ai/DeepSeek-V3 --db fleet.db
    """
    from autoselect.fleet import run_schedule

    every_s = parse_duration(every, what="--every")
    jitter_s = parse_duration(jitter, what="--jitter", allow_zero=True)
    spec = _spec(kw, "schedule")

    def once():
        report = _run_with_progress(spec, db_path)
        _print_report(report, fmt)
        return report

    def waiting(delay):
        click.echo(f"next fleet run in {delay:.0f} s", err=True)

    def failed(error):
        click.echo(f"Error: {error}", err=True)

    run_schedule(once, every_s=every_s, jitter_s=jitter_s, count=count, on_wait=waiting, on_error=failed)


def _print_drift(report) -> None:
    flagged = report.flagged
    click.echo(f"{len(report.nodes)} node(s), {len(flagged)} flagged "
               f"(slow = more than max({report.min_slowdown:.0%}, {report.noise_k:g} x noise) slower)")
    for n in report.nodes:
        verdict = f"SLOW (worst +{n.worst_slowdown:.0%})" if n.flagged else "ok"
        click.echo(f"  {n.hostname:<28} {n.host_class:<24} {verdict}  "
                   f"[{n.compared_history} vs history, {n.compared_class} vs class"
                   + (f", {n.compared_reference} vs {n.reference_class}]" if n.reference_class else "]"))
        for k, (before, now) in n.versions_changed.items():
            click.echo(f"      {k}: {before} -> {now}")
        for s in sorted(n.slow, key=lambda s: -s.slowdown)[:10]:
            click.echo(f"      {s.backend:<30} {s.shape:<36} {s.latency_us:9.1f} us vs {s.reference_us:9.1f} us "
                       f"({s.versus}) +{s.slowdown:.0%}")
        if len(n.slow) > 10:
            click.echo(f"      ... and {len(n.slow) - 10} more slow point(s) (--format json lists all)")
    for r in report.recommendations:
        if not r.changed:
            continue
        click.echo(f"recommendation changed for {r.model} on {r.host_class}: {r.before} -> {r.now} "
                   f"(fleet run {r.before_run} -> {r.now_run})")
        for m in r.moved[:10]:
            click.echo(f"      {m.backend:<30} T{m.tokens_per_rank:<6} {m.before_us:9.1f} us -> {m.now_us:9.1f} us "
                       f"({m.change:+.0%})")


@fleet_group.command("drift")
@click.option("--model", "models", multiple=True, metavar="DIR|HF_ID",
              help="Models whose recommendation to re-check (default: those the fleet runs measured).")
@click.option("--host-class", default=None, metavar="CLASS", help="Only this host class.")
@click.option("--min-slowdown", type=float, default=MIN_SLOWDOWN, show_default=True, metavar="FRACTION",
              help="A point must be at least this much slower to count.")
@click.option("--noise-k", type=float, default=NOISE_K, show_default=True, metavar="K",
              help="... and slower than K combined standard errors.")
@db_option
@format_option("text", "json")
def fleet_drift_cmd(models, host_class, min_slowdown, noise_k, db_path, fmt):
    """Flag nodes slower than their own history or their host class, beyond the noise.

    Also reports when the recommended backend for a known model changed since the previous
    fleet run, and which measurements moved.

    \b
    Examples:
      autoselect fleet drift --db fleet.db
      autoselect fleet drift --db fleet.db --format json | jq .flagged
    """
    from autoselect.fleet.drift import analyze_at

    report = analyze_at(db_path, models=list(models) or None, host_class=host_class,
                        min_slowdown=min_slowdown, noise_k=noise_k)
    if fmt == "json":
        click.echo(json.dumps(report.to_dict(), indent=2))
    else:
        _print_drift(report)


@fleet_group.command("status")
@db_option
@format_option("text", "json")
def fleet_status_cmd(db_path, fmt):
    """List the fleet's nodes with their last run, health and drift flags.

    Health: ok (last run complete), failed (with the reason), interrupted or running.

    \b
    Examples:
      autoselect fleet status --db fleet.db
      autoselect fleet status --db fleet.db --format json
    """
    from autoselect.fleet.drift import status_at

    nodes = status_at(db_path)
    if fmt == "json":
        click.echo(json.dumps({"schema_version": 1, "nodes": [n.to_dict() for n in nodes]}, indent=2))
        return
    click.echo(f"{'node':<32} {'host class':<26} {'last run':<26} {'trigger':<9} {'health':<12} flags")
    for n in nodes:
        flags = f"SLOW +{n.worst_slowdown:.0%}" if n.flagged else ""
        health = n.health + (f": {n.error}" if n.error else "")
        click.echo(f"{n.hostname:<32} {n.host_class:<26} {n.last_run_started_at[:25]:<26} "
                   f"{n.last_trigger:<9} {health:<12} {flags}")


@fleet_group.command("deploy")
@click.option("--kind", type=click.Choice(["systemd", "kubernetes", "slurm"]), required=True,
              help="What to render.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None, metavar="DIR",
              help="Write the files into this existing directory (default: print them).")
@click.option("--args", "fleet_args", default="--model deepseek-ai/DeepSeek-V3", show_default=True,
              metavar="ARGS", help="Arguments for `autoselect fleet run` in the rendered job.")
@click.option("--db", "db_path", default="/var/lib/autoselect/fleet.db", show_default=True, metavar="PATH",
              help="Fleet database path inside the job (absolute).")
@click.option("--address", default="auto", show_default=True, metavar="ADDR", help="Ray address inside the job.")
@click.option("--every", default="24h", show_default=True, metavar="DURATION", help="How often the job runs.")
@click.option("--jitter", default="1h", show_default=True, metavar="DURATION", help="Random delay (systemd).")
@click.option("--image", default="autoselect-vllm:latest", show_default=True, help="Container image (kubernetes).")
def fleet_deploy_cmd(kind, out_dir, fleet_args, db_path, address, every, jitter, image):
    """Render a systemd timer, Kubernetes CronJob or Slurm job that runs `fleet run` periodically.

    \b
    Examples:
      autoselect fleet deploy --kind systemd --out /etc/systemd/system
      autoselect fleet deploy --kind kubernetes --image registry.example/autoselect-vllm:0.1 > cronjob.yaml
    """
    from autoselect.fleet.deploy import render, write_files

    files = render(kind, fleet_args=fleet_args, db_path=db_path, address=address, every=every,
                   jitter=jitter, image=image)
    if out_dir is None:
        for name, text in files.items():
            if len(files) > 1:
                click.echo(f"# --- {name}")
            click.echo(text, nl=False)
        return
    for path in write_files(files, out_dir):
        click.echo(str(path))


@click.command("serve")
@db_option
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind (loopback by default).")
@click.option("--port", type=int, default=8765, show_default=True, help="TCP port.")
@click.option("--workers", type=int, default=1, show_default=True, help="uvicorn worker processes.")
@click.option("--model-root", "model_roots", multiple=True, metavar="DIR",
              help="A directory of checkpoint directories that model= may name by their relative name (repeatable). "
                   "Default: none; model= is a Hugging Face id, read from the local cache only.")
@click.option("--token-file", default=None, metavar="PATH", type=click.Path(dir_okay=False),
              help="A file holding a bearer token (first line) every request but /healthz must carry "
                   "(`Authorization: Bearer ...`, as `autoselect launch --token-file` sends it); TLS stays with a "
                   "reverse proxy in front. Default: no token.")
def serve_cmd(db_path, host, port, workers, model_roots, token_file):
    """Serve recommendations over a small read-only HTTP API.

    GET /v1/recommend?model=...&host_class=...&workload=... returns the same JSON as
    `recommend --format json`; also /v1/hosts, /v1/drift and /healthz. No write endpoints.
    model= is a Hugging Face id found in the local cache (never downloaded) or a name under a
    --model-root; never a path on the server. Binds to 127.0.0.1 unless --host says otherwise
    (with a warning); beyond loopback, --token-file makes every request but /healthz carry a
    bearer token, and a TLS proxy in front keeps it secret.

    \b
    Example:
      autoselect serve --db fleet.db --port 8765 --model-root /models &
      curl 'http://127.0.0.1:8765/v1/recommend?model=deepseek-ai/DeepSeek-V3&workload=decode'
    """
    from autoselect.fleet.service import serve

    serve(db_path, host=host, port=port, workers=workers, model_roots=model_roots, token_file=token_file)
