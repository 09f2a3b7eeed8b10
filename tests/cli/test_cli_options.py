"""One option name, one default and one metavar across every command (or a listed exception, with why).

A user who learns ``--device`` or ``--workload`` on one command should not meet another default
or another spelling of its value on the next one."""

from __future__ import annotations

import importlib
from collections import defaultdict

import click

from autoselect.cli import COMMANDS

#: option -> why commands give it different defaults (each entry must still be needed)
DEFAULT_EXCEPTIONS = {
    "--address": "fleet deploy writes a unit for a cluster node, where `auto` joins the running Ray cluster; "
                 "fleet run and schedule without it take ray.init()'s own default",
    "--budget": "tune is a timed race and needs a budget; fleet run and schedule measure their whole sweep "
                "unless given one",
    "--db": "fleet deploy writes the path into a system unit (a service's state directory), not this user's database",
    "--device": "fleet's tasks run on the cluster's GPU nodes, whose device the driver's own host says nothing "
                "of; bench and tune measure this host and take its device",
    "--format": "each command offers the formats it can print (db export: jsonl or csv; recommend adds args, env)",
    "--jitter": "fleet deploy's units start on many machines at once, so their timers are spread by an hour; "
                "fleet schedule is one loop in one foreground process",
    "--out": "report writes files and needs a directory; fleet deploy prints the units without one",
    "--timeout": "bench and fleet bound one measured point (seconds); confirm bounds one whole vLLM benchmark run",
    "--tokens": "measuring commands measure a grid (bench: the decode grid; fleet run: a 4-point subset on every "
                "node; confirm: 3 whole forward passes), answering commands weigh their workload's buckets",
    "--world-size": "each command's world size is what it answers for: this host's GPUs (bench, tune), each "
                    "node's (fleet), dp x tp (recommend, explain), the largest measured (report)",
    "--workload": "report weighs the token counts it measured (what it draws), launch the workload its line's "
                  "role says; recommend, explain and tune weigh the mixed workload",
}
#: option -> why its value is spelled differently (each entry must still be needed)
METAVAR_EXCEPTIONS = {
    "--format": "each command offers the formats it can print",
    "--model": "tune also takes an explicit shape (shape:HIDDENxEXPERTSxTOPK:DTYPE)",
    "--workload": "report also takes token counts per rank (the others take them as --tokens)",
}


def _commands():
    for name in sorted(COMMANDS):
        module, attr = COMMANDS[name].split(":")
        cmd = getattr(importlib.import_module(module), attr)
        if isinstance(cmd, click.Group):
            yield from ((f"{name} {sub}", c) for sub, c in sorted(cmd.commands.items()))
        else:
            yield name, cmd


def _shown_default(param: click.Option):
    """The default as --help shows it: show_default's text, else the value (None: none shown)."""
    if isinstance(param.show_default, str):
        return param.show_default
    default = param.default
    if default is None or type(default).__name__ == "Sentinel" or param.is_flag:
        return None
    return ",".join(map(str, default)) if isinstance(default, (list, tuple)) else str(default)


def _options():
    """option name -> [(command, shown default, metavar)] for every option of more than one command."""
    seen = defaultdict(list)
    for path, cmd in _commands():
        ctx = click.Context(cmd, info_name=path)
        for p in cmd.params:
            if isinstance(p, click.Option) and not p.is_flag:
                seen[max(p.opts, key=len)].append((path, _shown_default(p), p.make_metavar(ctx)))
    return {name: rows for name, rows in seen.items() if len(rows) > 1}


def test_every_option_name_has_one_default_across_commands_or_a_listed_reason():
    differ = {name: sorted({(d, path) for path, d, _ in rows}, key=str) for name, rows in _options().items()
              if len({d for _, d, _ in rows}) > 1}
    unexplained = {name: rows for name, rows in differ.items() if name not in DEFAULT_EXCEPTIONS}
    assert unexplained == {}, "give these options one default, or list why in DEFAULT_EXCEPTIONS"
    assert sorted(set(DEFAULT_EXCEPTIONS) - set(differ)) == [], "exceptions no longer needed: remove them"


def test_every_option_name_has_one_metavar_across_commands_or_a_listed_reason():
    differ = {name: sorted({(m, path) for path, _, m in rows}) for name, rows in _options().items()
              if len({m for _, _, m in rows}) > 1}
    unexplained = {name: rows for name, rows in differ.items() if name not in METAVAR_EXCEPTIONS}
    assert unexplained == {}, "spell these options' values one way, or list why in METAVAR_EXCEPTIONS"
    assert sorted(set(METAVAR_EXCEPTIONS) - set(differ)) == [], "exceptions no longer needed: remove them"


def test_bench_and_tune_measure_on_this_hosts_device_by_default():
    """--device: neither defaults to cuda on a host without GPUs (bench used to, an error on CPU)."""
    devices = {path: d for path, d, _ in _options()["--device"]}
    assert devices["bench"] is None and devices["tune"] is None
