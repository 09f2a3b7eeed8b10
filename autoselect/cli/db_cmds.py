"""``autoselect db ...`` and ``autoselect hosts``: the results store and this machine's fingerprint.

Parsing and printing only; the work is in ``db/`` and ``autoselect/hardware.py``. ``db info``,
``db check`` and ``db export`` only read (stdlib sqlite3, no sqlite-utils); ``import``,
``merge`` and ``upgrade`` write.
"""

from __future__ import annotations

import json
import os
import sys

import click

from autoselect.cli import db_option, format_option


@click.group("db")
def db_group():
    """Inspect, check, export, import and merge the results database.

    Every measurement autoselect takes lands in one SQLite file ($AUTOSELECT_DB, else the
    platform's user data dir; --db PATH on every command). The tables are plain and
    browsable with sqlite3 or datasette; docs/database.md documents them and the JSONL format.

    \b
    Examples:
      autoselect db info
      autoselect db export --format jsonl > results.jsonl
      autoselect db import results.jsonl --db merged.db
      autoselect db merge node7.db
      autoselect db check
      autoselect db drop-run 12 --yes
    """


@db_group.command("info")
@db_option
@format_option("text", "json")
def info_cmd(db_path, fmt):
    """Show the database's path, schema, counts per host and backend, and newest run.

    Read-only: runs a dead writer left 'running' are listed as stale (the next write
    command marks them interrupted).

    \b
    Example:
      autoselect db info --db fleet.db --format json
    """
    from db.info import info_at

    data = info_at(db_path)
    if fmt == "json":
        click.echo(json.dumps(data, indent=2))
        return
    click.echo(_info_text(data))


def _info_text(d: dict) -> str:
    c = d["counts"]
    lines = [
        f"database   {d['path']}  ({d['size_bytes'] / 1e6:.1f} MB, schema {d['schema_version']}, {d['journal_mode']})",
        f"contents   {c['hosts']} hosts, {c['runs']} runs, {c['results']} results, {c['samples']} samples, "
        f"{c['tuned_configs']} tuned configurations",
        "",
        f"{'hostname':<20} {'host class':<34} {'GPUs':<18} {'runs':>5} {'results':>8}  last seen",
    ]
    for h in d["hosts"]:
        gpus = f"{h['gpu_count']}x {h['gpu_name']}" if h["gpu_count"] else "cpu"
        lines.append(
            f"{h['hostname']:<20} {h['host_class']:<34} {gpus[:18]:<18} {h['runs']:>5} {h['results']:>8}  {h['last_seen'][:19]}"
        )
    lines += ["", f"{'backend':<32} {'results':>8} {'ok':>8} {'incorrect':>10} {'other':>6}"]
    for b in d["backends"]:
        lines.append(f"{b['backend']:<32} {b['results']:>8} {b['ok']:>8} {b['incorrect']:>10} {b['other']:>6}")
    lines.append("")
    r = d["newest_run"]
    if r:
        lines.append(
            f"newest run #{r['id']}  {r['started_at'][:19]}  {r['status']}  on {r['hostname']}  "
            f"({r['results']} results, trigger {r['trigger']})" + (f"  {r['command']}" if r["command"] else "")
        )
    else:
        lines.append("newest run  none")
    gone = d["interrupted_runs"]
    lines.append(f"interrupted runs  {', '.join('#' + str(x['id']) for x in gone) if gone else 'none'}")
    for s in d["stale_running_runs"]:
        lines.append(f"stale run #{s['id']}  still 'running' but {s['reason']}; the next write marks it interrupted")
    return "\n".join(lines)


@db_group.command("check")
@db_option
@format_option("text", "json")
def check_cmd(db_path, fmt):
    """Verify the database: integrity, foreign keys, whole rows, schema rules and version.

    The schema rules are the ones `db import` applies to every field (types and ranges); rows
    that break them (imported by an older autoselect) are listed, and skipped by every reader.

    Read-only. Exit status 0 when everything is ok, 1 when a check failed.

    \b
    Example:
      autoselect db check --db results.db
    """
    from db.info import check_at

    data = check_at(db_path)
    if fmt == "json":
        click.echo(json.dumps(data, indent=2))
    else:
        def mark(count, what):
            if count is None:
                return "FAILED (could not run)"
            return f"{'ok' if count == 0 else 'FAILED'} ({count} {what})"

        integrity = "; ".join(data["integrity_check"][:5]) + (
            f"; ... {len(data['integrity_check']) - 5} more" if len(data["integrity_check"]) > 5 else "")
        lines = [
            f"database          {data['path']}",
            f"schema version    {data['schema_version']} (this autoselect writes {data['latest_schema_version']})",
            f"journal mode      {data['journal_mode']}",
            f"integrity_check   {integrity}",
            f"foreign keys      {mark(data['foreign_key_violations'], 'violations')}",
            f"whole rows        {mark(data['results_with_missing_samples'], 'results with missing samples')}",
            f"schema rules      {mark(data['schema_violations'], 'rows break them')}",
        ]
        for example in data["schema_violation_examples"][:5]:
            lines.append(f"  {example}")
        if (data["schema_violations"] or 0) > 5:
            lines.append(f"  ... {data['schema_violations'] - 5} more (--format json lists 20)")
        for s in data["stale_running_runs"]:
            lines.append(f"stale run #{s['id']}   {s['reason']}; the next write marks it interrupted")
        lines.append(f"verdict           {'ok' if data['ok'] else 'FAILED'}")
        click.echo("\n".join(lines))
    if not data["ok"]:
        sys.exit(1)


@db_group.command("export")
@db_option
@click.option("--format", "fmt", type=click.Choice(["jsonl", "csv"]), default="jsonl", show_default=True,
              help="jsonl: one versioned record per result (with host, run and raw samples) and per tuned "
                   "configuration (re-importable); csv: one flat row per result, without raw samples or "
                   "tuned configurations.")
@click.option("--output", "-o", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="Write here instead of stdout.")
def export_cmd(db_path, fmt, output):
    """Write every result and tuned configuration as JSON Lines (re-importable), or results as CSV.

    \b
    Examples:
      autoselect db export > results.jsonl
      autoselect db export --format csv -o results.csv
    """
    from db.errors import OutputNotWritable
    from db.jsonl import export_to

    try:
        counts = export_to(db_path, fmt, out=sys.stdout, output=output)
        if output is None:
            sys.stdout.flush()
    except OSError as e:  # standard output itself: a full device, a closed pipe
        sys.stdout = open(os.devnull, "w")  # nothing more can reach the old one, not even at exit
        raise OutputNotWritable(f"cannot write to standard output ({e.strerror or e}); pass --output FILE") from None
    if output is not None:
        tuned = f" and {counts['tuned_configs']} tuned configurations" if counts["tuned_configs"] else ""
        click.echo(f"exported {counts['results']} results{tuned} to {output}", err=True)


@db_group.command("import")
@click.argument("file", type=click.Path(dir_okay=False))
@db_option
@format_option("text", "json")
def import_cmd(file, db_path, fmt):
    """Add the results and tuned configurations of a JSONL export; those already present are skipped.

    The whole file is validated before the database is opened: a bad line changes nothing.
    Importing the same file twice adds nothing the second time.

    \b
    Example:
      autoselect db import node7.jsonl --db fleet.db
    """
    from db.importing import import_file

    with _progress("importing") as progress:
        summary = import_file(db_path, file, progress=progress)
    _print_summary(summary, fmt)


@db_group.command("merge")
@click.argument("other", type=click.Path(dir_okay=False))
@db_option
@format_option("text", "json")
def merge_cmd(other, db_path, fmt):
    """Add every run, result and tuned configuration of another results database (idempotent).

    Use it to gather fleet nodes' databases into one; merging the same file again adds nothing.

    \b
    Example:
      for f in nodes/*.db; do autoselect db merge "$f" --db fleet.db; done
    """
    from db.importing import merge_into

    with _progress("merging") as progress:
        summary = merge_into(db_path, other, progress=progress)
    _print_summary(summary, fmt)


@db_group.command("drop-run")
@click.argument("run")
@db_option
@click.option("--yes", is_flag=True, help="Drop it without asking (needed when stdin is not a terminal).")
@format_option("text", "json")
def drop_run_cmd(run, db_path, yes, fmt):
    """Delete one run: its results, their raw samples and its tuned configurations.

    RUN is the run's id (as `db info`, `db check` and recommend's reasons show it) or its uid.
    Use it when a run measured something by mistake (a typo in bench's arguments, a broken
    machine): its rows stop counting as evidence. The host's fingerprint stays. There is no
    undo; `db export` first if in doubt.

    \b
    Example:
      autoselect db drop-run 12 --yes --db results.db
    """
    from autoselect.options import parse_run_ref
    from db.errors import DropNotConfirmed
    from db.store import Store

    run = parse_run_ref(run).text  # the one grammar of a run reference, before the database is opened
    with Store(db_path, create=False) as store:
        found = store.run_summary(run)
        if found is None:
            store.drop_run(run)  # raises UnknownRun with the message
        what = (f"run {found['id']} ({found['status']}, {found['trigger']}, started {found['started_at'][:19]}): "
                f"{found['results']} results, {found['tuned_configs']} tuned configurations")
        if not yes:
            if not sys.stdin.isatty():
                raise DropNotConfirmed(f"db drop-run deletes {what}; pass --yes to confirm")
            if not click.confirm(f"delete {what}?", err=True):
                raise DropNotConfirmed("nothing deleted")
        dropped = store.drop_run(run)  # the reference as typed: it resolved to this run just now
    if fmt == "json":
        click.echo(json.dumps(dropped, indent=2))
    else:
        click.echo(f"dropped run {dropped['id']} ({dropped['uid']}): {dropped['results']} results, "
                   f"{dropped['tuned_configs']} tuned configurations")


@db_group.command("upgrade")
@db_option
def upgrade_cmd(db_path):
    """Apply pending schema migrations (forward only; every row is kept).

    \b
    Example:
      autoselect db upgrade --db old.db
    """
    from db.store import upgrade

    old, new = upgrade(db_path)
    click.echo(f"schema {old} -> {new}" if new != old else f"schema {new}: up to date")


def _print_summary(summary, fmt: str) -> None:
    d = summary.to_dict()
    if fmt == "json":
        click.echo(json.dumps(d, indent=2))
    else:
        tuned = (f", {d['tuned_added']} tuned configurations ({d['tuned_present']} already present)"
                 if d["tuned_added"] or d["tuned_present"] else "")
        click.echo(
            f"added {d['results_added']} results ({d['results_present']} already present), "
            f"{d['runs_added']} runs, {d['hosts_added']} hosts{tuned}"
        )


class _progress:
    """A rich progress bar on stderr while records are written (silent when stderr is no terminal)."""

    def __init__(self, what: str):
        self.what = what
        self.bar = None

    def __enter__(self):
        if not sys.stderr.isatty():
            return None
        from rich.console import Console
        from rich.progress import Progress

        self.bar = Progress(console=Console(stderr=True), transient=True)
        self.bar.start()
        task = self.bar.add_task(self.what, total=None)

        def update(done, total):
            self.bar.update(task, completed=done, total=total)

        return update

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.stop()


@click.command("hosts")
@format_option("text", "json")
def hosts_cmd(fmt):
    """Show this machine's fingerprint (GPUs, NVLink topology, host class, versions) and the reference classes.

    Read from NVML (nvidia-ml-py) and installed package metadata; on a machine without
    GPUs it shows the CPU fingerprint. The host class is what results are grouped by:
    same GPU model, count and topology -> same class. Then the reference host classes
    (NVIDIA's published measurements, which --host-class ref-... answers from with no
    database), and the one this machine is, if any. JSON: the fingerprint, with
    "reference_classes" beside it.

    \b
    Example:
      autoselect hosts --format json
    """
    from autoselect.hardware import fingerprint

    from autoselect.reference.systems import CLASSES, match_host

    fp = fingerprint()
    match = match_host(fp)
    if fmt == "json":
        click.echo(json.dumps({**fp.to_dict(), "reference_class": match.ref_class.name if match else None,
                               "reference_classes": [c.to_dict() for c in CLASSES.values()]}, indent=2))
        return
    click.echo(_host_text(fp))
    click.echo(f"reference     {match.ref_class.name if match else 'none: no published system is this machine'}")
    click.echo("\nreference host classes (NVIDIA's published measurements; --host-class NAME, no database needed):")
    width = max(len(name) for name in CLASSES)
    for name, ref in CLASSES.items():
        click.echo(f"  {name:<{width}}  {ref.describe()}")


def _host_text(fp) -> str:
    lines = [
        f"hostname      {fp.hostname}",
        f"machine id    {fp.machine_id}",
        f"host class    {fp.host_class}",
    ]
    if fp.device == "cpu":
        lines.append(f"device        cpu ({fp.cpu_model}); no GPU visible to NVML")
    else:
        mem = fp.gpus[0].memory_total_mib if fp.gpus else 0
        lines.append(f"GPUs          {fp.gpu_count}x {fp.gpu_name} ({fp.gpu_arch}, {mem} MiB)")
        ups = sorted({(g.nvlinks_up, g.nvlinks_total) for g in fp.gpus})
        if any(t for _, t in ups):
            links = ", ".join(f"{u}/{t}" for u, t in ups)
            peak = f", peak {fp.nvlink_peak_gbps:g} GB/s per GPU per direction" if fp.nvlink_peak_gbps else ""
            lines.append(f"NVLink        {links} links up{peak}{'' if fp.all_nvlinks_up else ' (NOT all up)'}")
        else:
            lines.append("NVLink        not supported (NVML reports no NVLink): the FlashInfer NVLink backends cannot run")
        if fp.gpu_count > 1:
            lines.append("link matrix   " + "\n              ".join(
                " ".join(f"{'X' if i == j else v:>3}" for j, v in enumerate(row)) for i, row in enumerate(fp.nvlink_matrix)
            ))
        lines.append(f"fabric        {fp.fabric or 'none reported'}")
        lines.append(f"driver        {fp.driver_version}, CUDA {fp.cuda_version}")
    lines.append("versions      " + ", ".join(f"{k} {v}" for k, v in sorted(fp.versions.items())))
    return "\n".join(lines)
