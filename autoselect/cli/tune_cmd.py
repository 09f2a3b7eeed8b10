"""``autoselect tune``: parse, call :func:`autoselect.tune.run_tune`, print."""

from __future__ import annotations

import json
import shlex
import sys

import click

from autoselect.cli import db_option, format_option, warn_newer_vllm
from autoselect.errors import MissingShape
from autoselect.options import parse_name_list
from autoselect.tune.events import BackendPruned, KnobsNote, Measuring, TrialAdded, TuneFinished, TuneStarted

#: Version of the JSON ``tune --format json`` prints.
SCHEMA_VERSION = 1


class _LiveView:
    """A live stderr panel: trials, best so far, the last measurement, what was pruned and why."""

    def __init__(self, console):
        from rich.live import Live

        self.console = console
        self.trials = 0
        self.best = None
        self.last = ""
        self.phase = ""
        self.pruned: list[tuple[str, str]] = []
        self.live = Live(self._render(), console=console, refresh_per_second=4, transient=False)

    def _render(self):
        from rich.table import Table

        t = Table.grid(padding=(0, 1))
        t.add_row("[bold]trials[/bold]", str(self.trials))
        t.add_row("[bold]best so far[/bold]", self.best or "-")
        t.add_row("[bold]measuring[/bold]", self.phase or "-")
        t.add_row("[bold]last[/bold]", self.last or "-")
        for b, why in self.pruned:
            t.add_row("[bold]pruned[/bold]", f"{b}: {why}")
        return t

    def __call__(self, event) -> None:
        if isinstance(event, TuneStarted):
            self.trials = event.reused
            if event.reused:
                self.last = f"resumed study with {event.reused} completed trials"
        elif isinstance(event, Measuring):
            self.phase = (f"{event.stage}: {', '.join(event.backends)} at "
                          f"{', '.join(map(str, event.tokens))} tokens/rank ({event.setting})")
        elif isinstance(event, TrialAdded):
            m = event.measurement
            self.trials, self.best = event.trials, event.best
            lat = f"{m.latency_us:.1f} µs" if m.latency_us is not None else m.status
            self.last = f"{m.backend} @ {m.tokens} tokens ({m.stage}): {lat}"
        elif isinstance(event, BackendPruned):
            self.pruned.append((event.backend, event.reason))
        elif isinstance(event, KnobsNote):
            self.last = f"knobs for {event.backend}: {event.message}"
        elif isinstance(event, TuneFinished):
            self.phase = event.outcome.stop_reason
        self.live.update(self._render())


def _print_text(outcome: dict, excluded: dict[str, str], db_path: str) -> None:
    click.echo(f"study: {outcome['study']}")
    click.echo(f"stop: {outcome['stop_reason']}")
    click.echo(f"trials: {outcome['trials_new']} new, {outcome['trials_reused']} reused; "
               f"sweep time {outcome['sweep_s']:.1f} s, in timed loops {outcome['measure_s']:.1f} s")
    ups = outcome.get("startups") or {}
    if ups:
        each = ", ".join(f"{b} {len(v)}" for b, v in ups.items())
        seconds = sum(u["seconds"] for v in ups.values() for u in v)
        click.echo(f"worker start-ups: {outcome['startup_count']} ({each}; {seconds:.1f} s in all)")
        for b, v in ups.items():
            for u in v[1:]:
                click.echo(f"  restarted {b}: {u['reason']}")
    click.echo("")
    click.echo(f"{'backend':<32} {'weighted latency (us)':>22}  state")
    for b, s in sorted(outcome["scores"].items(), key=lambda kv: kv[1]["latency_us"]):
        state = "alive" if b in outcome["alive"] else "pruned"
        mark = " <- best" if b == outcome["winner"] else ""
        click.echo(f"{b:<32} {s['latency_us']:>14.1f} ± {s['halfwidth_us']:<6.1f}  {state}{mark}"
                   + (_too_noisy(s['latency_us'], s['halfwidth_us'])))
    for b, why in outcome["pruned"].items():
        click.echo(f"pruned {b}: {why}")
    for b, why in excluded.items():
        click.echo(f"not measured {b}: {why}")
    k = outcome.get("knobs")
    if k:
        click.echo("")
        for e in k.get("screened", []):
            lat = (f"{e['latency_us']:.1f} ± {e['halfwidth_us']:.1f} µs{_too_noisy(e['latency_us'], e['halfwidth_us'])}"
                   if e["latency_us"] else e["failure"])
            click.echo(f"  screened {' '.join(f'{n}={v}' for n, v in e['setting'].items())}: {lat}")
        if k["status"] == "gain":
            click.echo(f"knobs for {k['backend']}: "
                       + " ".join(f"{n}={v}" for n, v in k["setting"].items())
                       + f"  ({k['gain']:.1%} faster than untuned, ± {k['gain_halfwidth']:.1%})")
        elif k["status"] == "no_gain":
            click.echo(f"knobs for {k['backend']}: {_no_gain(k, outcome['scores'].get(k['backend']))}")
        else:
            click.echo(f"knobs for {k['backend']}: {k['status'].replace('_', ' ')}")
        for e in k.get("excluded", []):
            click.echo(f"  not searched {e['knob']}: {e['reason']}")
    if outcome["stop"] == "budget":
        click.echo("")
        click.echo("rerun the same command to continue this study (completed trials are reused)")
    click.echo(f"results: {db_path}")


def _too_noisy(latency_us: float | None, halfwidth_us: float | None) -> str:
    """A note for a band wider than the value itself (CPU timings): the value separates nothing."""
    if latency_us and halfwidth_us is not None and halfwidth_us >= latency_us:
        return f"  (noise ±{halfwidth_us / latency_us:.0%} of the value: separates nothing)"
    return ""


def _no_gain(knobs: dict, untuned: dict | None) -> str:
    """Why no knob setting was kept: none was faster, or the fastest was within the noise (then how much)."""
    screened = [e for e in knobs.get("screened", []) if e["latency_us"]]
    best = min(screened, key=lambda e: e["latency_us"], default=None)
    if best is None or not untuned or best["latency_us"] >= untuned["latency_us"]:
        return "no gain: no setting screened faster than untuned"
    lower = 1 - best["latency_us"] / untuned["latency_us"]
    band = (best["halfwidth_us"] or 0.0) + (untuned["halfwidth_us"] or 0.0)
    setting = " ".join(f"{n}={v}" for n, v in best["setting"].items())
    return (f"no gain beyond the noise: the fastest screen ({setting}) was {lower:.0%} lower than untuned, "
            f"within the bands (±{band / untuned['latency_us']:.0%} of untuned together); kept untuned")


def _list_knobs() -> None:
    from autoselect import knobs

    for k in knobs.KNOBS:
        click.echo(f"{k.name}  [{k.kind}]  backends: {', '.join(k.backends)}")
        click.echo(f"    values: {', '.join(k.values)} (unset: {k.default}); legal when: {', '.join(k.legal_when)}")
        click.echo(f"    {k.effect}")
        click.echo(f"    source: {k.source}")
    click.echo("")
    click.echo("researched, not searched:")
    for name, why in knobs.NOT_SEARCHED:
        click.echo(f"  {name}: {why}")


@click.command("tune")
@click.option("--model", default=None, metavar="DIR|HF_ID|SHAPE",
              help="Checkpoint dir, Hugging Face id, or shape:HIDDENxEXPERTSxTOPK:DTYPE.")
@click.option("--budget", default="10m", show_default=True, metavar="DURATION",
              help="Time budget of this invocation (90s, 10m, 1h30m, 7d).")
@click.option("--workload", type=click.Choice(["decode", "prefill", "mixed"]), default=None,
              show_default="mixed", help="Which token buckets to compare on (as recommend weighs them).")
@click.option("--tokens", default=None, metavar="LIST",
              help="Explicit tokens per rank, e.g. 8,64 or 8:0.7,64:0.3 (overrides --workload).")
@click.option("--device", type=click.Choice(["cuda", "cpu"]), default=None,
              help="Where to measure (default: cuda when this host has GPUs, else cpu/gloo).")
@click.option("--world-size", type=int, default=None, metavar="N",
              help="EP ranks (default: every local GPU; 2 on CPU).")
@click.option("--gpu-arch", default=None, metavar="ARCH",
              help="Activation dtype as on this arch (needed on CPU for some models).")
@click.option("--backends", default=None, metavar="LIST", help="Comma-separated backends to race (default: every legal one).")
@click.option("--include-reference", is_flag=True, help="Also race the reference_* baselines (never recommended).")
@click.option("--no-knobs", is_flag=True, help="Race backends only; skip the knob search.")
@click.option("--enable-dbo", is_flag=True, help="Tune for vllm serve --enable-dbo (makes DBO-only knobs legal).")
@click.option("--list-knobs", is_flag=True, help="Print the knob table with sources and exit.")
@db_option
@format_option("text", "json")
def tune_cmd(model, budget, workload, tokens, device, world_size, gpu_arch, backends, include_reference,
             no_knobs, enable_dbo, list_knobs, db_path, fmt):
    """Race the legal backends adaptively, then search the winner's knobs.

    Measures every candidate quickly, drops the clearly dominated ones (with the numbers),
    re-measures the close ones where the decision is made, stops when it is settled beyond
    the noise or the budget runs out, then searches the winner's real knobs (NCCL env vars,
    FlashInfer block sizes, DeepEP SMs with DBO; --list-knobs shows them with their sources
    and what is not searched). Every measurement is an Optuna
    trial in RESULTS.optuna.log beside the results database: rerun the same command to
    resume. `recommend` then prints the knobs and their measured gain.

    \b
    Examples:
      autoselect tune --model deepseek-ai/DeepSeek-R1 --budget 10m
      autoselect tune --model shape:2048x32x4:bf16 --device cpu --tokens 8,64 --budget 90s
      autoselect tune --list-knobs
    """
    if list_knobs:
        _list_knobs()
        return
    if not model:
        raise MissingShape("--model is required; pass a checkpoint, a hub id or shape:HxEXPERTSxTOPK:DTYPE")

    from db import default_path

    from autoselect.tune import prepare, run_tune

    db = db_path or str(default_path())
    names = parse_name_list(backends, what="--backends") if backends is not None else None
    spec, excluded = prepare(model, db_path=db, workload=workload, tokens=tokens, device=device,
                             world_size=world_size, budget=budget, gpu_arch=gpu_arch, backends=names,
                             include_reference=include_reference, search_knobs=not no_knobs,
                             enable_dbo=enable_dbo)
    from autoselect import rules

    newer = rules.newer_than_known(spec.vllm_version)
    warn_newer_vllm(newer)
    from rich.console import Console

    console = Console(stderr=True)
    view = _LiveView(console)
    with view.live:
        outcome = run_tune(spec, progress=view, command=shlex.join(["autoselect", "tune", *sys.argv[2:]]))
    console.print()
    d = outcome.to_dict()
    if fmt == "json":
        click.echo(json.dumps({"schema_version": SCHEMA_VERSION, **d, "vllm_version": spec.vllm_version,
                               "vllm_version_warning": newer, "not_measured": excluded}, indent=2))
    else:
        _print_text(d, excluded, db)
