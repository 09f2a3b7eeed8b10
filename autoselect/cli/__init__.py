"""The ``autoselect`` command line: parsing and printing only.

Commands live in small modules beside this one and are loaded lazily (click's
"LazyGroup" pattern), so ``autoselect recommend --help`` never pays for the imports of
``bench`` or ``tune``. Every :class:`autoselect.errors.UserError` raised below a command
becomes one ``Error: ...`` line on stderr and exit status 2.
"""

from __future__ import annotations

import importlib
import warnings

import click

from autoselect import __version__
from autoselect.errors import UserError
from autoselect.options import STOPPING


class InputError(click.ClickException):
    "Bad input: one line on stderr, exit status 2."

    exit_code = 2


#: command name -> "module:attribute". Add a line here to add a command.
COMMANDS: dict[str, str] = {
    "db": "autoselect.cli.db_cmds:db_group",
    "hosts": "autoselect.cli.db_cmds:hosts_cmd",
    "inspect": "autoselect.cli.model_cmds:inspect_cmd",
    "check": "autoselect.cli.model_cmds:check_cmd",
    "report": "autoselect.cli.report_cmd:report_cmd",
    "recommend": "autoselect.cli.recommend_cmd:recommend_cmd",
    "explain": "autoselect.cli.recommend_cmd:explain_cmd",
    "tune": "autoselect.cli.tune_cmd:tune_cmd",
    "bench": "autoselect.cli.bench_cmd:bench_cmd",
    "fleet": "autoselect.cli.fleet_cmds:fleet_group",
    "serve": "autoselect.cli.fleet_cmds:serve_cmd",
    "confirm": "autoselect.cli.confirm_cmd:confirm_cmd",
}


class LazyGroup(click.Group):
    """A click group that imports each command's module only when it is used."""

    def __init__(self, *args, lazy_commands: dict[str, str] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.lazy_commands = lazy_commands or {}

    def list_commands(self, ctx):
        return sorted(set(super().list_commands(ctx)) | set(self.lazy_commands))

    def get_command(self, ctx, name):
        if name in self.lazy_commands:
            module_name, attr = self.lazy_commands[name].split(":")
            return getattr(importlib.import_module(module_name), attr)
        return super().get_command(ctx, name)

    def invoke(self, ctx):
        previous = warnings.showwarning
        warnings.showwarning = _show_warning
        try:
            return super().invoke(ctx)
        except UserError as e:
            raise InputError(str(e)) from None
        finally:
            warnings.showwarning = previous


def _show_warning(message, category, filename, lineno, file=None, line=None):
    """The project's own warnings (a reader skipped rows that break the schema, ...) as one
    ``Warning: ...`` line on stderr; anything else as Python prints it."""
    if issubclass(category, UserWarning) and category.__module__.split(".")[0] in ("autoselect", "db", "bench", "deploy"):
        click.echo(f"Warning: {message}", err=True)
        return
    _PYTHON_SHOWWARNING(message, category, filename, lineno, file, line)


_PYTHON_SHOWWARNING = warnings.showwarning


@click.group(cls=LazyGroup, lazy_commands=COMMANDS)
@click.version_option(__version__, prog_name="autoselect")
def main():
    """Pick the fastest legal vLLM MoE all2all backend for a model on this node.

    autoselect measures vLLM's --all2all-backend candidates on the local GPUs
    (correctness first), stores every measurement in SQLite, and turns them into
    `vllm serve` flags. It never recommends a backend that is illegal for the
    model's activation dtype (flashinfer_nvlink_one_sided: nvfp4 only).

    \b
    Typical flow:
      autoselect inspect --model deepseek-ai/DeepSeek-R1
      autoselect bench --model deepseek-ai/DeepSeek-R1
      vllm serve deepseek-ai/DeepSeek-R1 $(autoselect recommend --model deepseek-ai/DeepSeek-R1 --format args)
    """


def db_option(f):
    """The ``--db PATH`` option every command that reads or writes the store shares."""
    return click.option(
        "--db",
        "db_path",
        envvar="AUTOSELECT_DB",
        show_envvar=True,
        metavar="PATH",
        type=click.Path(dir_okay=False),
        default=None,
        help="Results database (default: the platform's user data dir, autoselect/results.db).",
    )(f)


def stopping_rule_options(f):
    """``--max-noise``, ``--min-samples``, ``--min-time``, ``--timeout``: the stopping rule of each
    measured point (``bench``, ``fleet run``, ``fleet schedule``), defaults from
    :data:`autoselect.options.STOPPING`; parameters ``max_noise``, ``min_samples``, ``min_time_s``,
    ``timeout_s``."""
    options = [
        click.option("--max-noise", type=float, default=STOPPING.max_noise, show_default=True,
                     help="Stop a point once the relative standard error of its median is below this fraction."),
        click.option("--min-samples", type=int, default=STOPPING.min_samples, show_default=True,
                     help="Samples per point at least."),
        click.option("--min-time", "min_time_s", type=float, default=STOPPING.min_time_s, show_default=True,
                     help="Seconds of accumulated sample time per point at least."),
        click.option("--timeout", "timeout_s", type=float, default=STOPPING.timeout_s, show_default=True,
                     help="Seconds per point before sampling stops (noise target then recorded as not met)."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def format_option(*choices: str, default: str = "text"):
    """A ``--format`` option with the given choices."""
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(list(choices)),
        default=default,
        show_default=True,
        help="Output format; json is stable and documented in the README.",
    )
