"""The ``autoselect`` command line: parsing and printing only.

Commands live in small modules beside this one and are loaded lazily (click's
"LazyGroup" pattern), so ``autoselect recommend --help`` never pays for the imports of
``bench`` or ``tune``. Every :class:`autoselect.errors.UserError` raised below a command
becomes one ``Error: ...`` line on stderr and exit status 2, and so does every mistake click
itself finds (an unknown option, a missing argument, a bad choice): one line naming the
command's ``--help``, not click's usage block.

Numbers: every ``type=int`` / ``type=float`` option of every command (click's INT, FLOAT and
their ranges) is converted through :func:`autoselect.options.parse_int` / ``parse_number``
when the command is loaded (:func:`strict_numbers`): ASCII digits only, bounded, finite, so
``--dp ١٢``, ``--timeout nan`` and ``--dp 99999999999999999999`` are one ``Error:`` line
wherever they are typed.

Text: every argument (and every ``AUTOSELECT_*`` variable) must be valid UTF-8; one that is not
is one ``Error:`` line before click reads anything (:func:`autoselect.text.check_argv`), whatever
option or argument it was meant for.
"""

from __future__ import annotations

import errno
import gc
import importlib
import math
import os
import sys
import warnings

import click

from autoselect import __version__
from autoselect.errors import UserError
from autoselect.options import parse_int, parse_number
from autoselect.stopping import STOPPING
from autoselect.redact import redacted_text
from autoselect.text import SQLITE_NOT_UTF8, check_argv, one_line


class InputError(click.ClickException):
    "Bad input: one line on stderr, exit status 2."

    exit_code = 2

    def format_message(self) -> str:
        return shown(self.message)


class _StrictNumber(click.ParamType):
    """A click number type (``base``) whose text goes through one of the options grammars first;
    ``base`` still converts the number (a range's bounds) and names it in ``--help``."""

    def __init__(self, base: click.ParamType):
        self.base = base

    def get_metavar(self, param, ctx=None):
        return self.base.get_metavar(param=param, ctx=ctx)

    def __repr__(self):
        return f"{type(self).__name__}({self.base!r})"

    @property
    def name(self):  # the base's words in --help (INTEGER, INTEGER RANGE, FLOAT)
        return self.base.name


class StrictInt(_StrictNumber):
    """click's INT (and IntRange) through :func:`autoselect.options.parse_int`."""

    def convert(self, value, param, ctx):
        what = _option_name(param)
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        else:
            try:
                number = parse_int(value, what=what)
            except UserError as e:
                raise InputError(str(e)) from None
        return self.base.convert(number, param, ctx)  # IntRange's bounds, if the option has them


class StrictFloat(_StrictNumber):
    """click's FLOAT (and FloatRange) through :func:`autoselect.options.parse_number`."""

    def convert(self, value, param, ctx):
        what = _option_name(param)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = float(value)
            if not math.isfinite(number):
                raise InputError(f"{what} {value} is not a finite number")
        else:
            try:
                number = parse_number(value, what=what)
            except UserError as e:
                raise InputError(str(e)) from None
        return self.base.convert(number, param, ctx)


def _option_name(param) -> str:
    if param is None:
        return "value"
    opts = [o for o in getattr(param, "opts", []) if o.startswith("--")] or getattr(param, "opts", None)
    return opts[0] if opts else param.human_readable_name


def strict_numbers(command: click.Command) -> click.Command:
    """``command`` (and a group's subcommands) with every INT / FLOAT parameter converted through
    the options grammars (:class:`StrictInt`, :class:`StrictFloat`); idempotent."""
    if getattr(command, "_strict_numbers", False):
        return command
    for param in command.params:
        if isinstance(param.type, click.types.IntParamType):
            param.type = StrictInt(param.type)
        elif isinstance(param.type, click.types.FloatParamType):
            param.type = StrictFloat(param.type)
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            strict_numbers(sub)
    command._strict_numbers = True
    return command


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
    "launch": "autoselect.cli.launch_cmd:launch_cmd",
}


#: Commands that load, answer and exit (a few hundred milliseconds): :func:`run` keeps the cyclic
#: garbage collector off for their whole run. ``launch`` is one: it decides and then replaces the
#: process with the server (``os.execvpe``), whose interpreter starts with its own collector.
#: Every other command gets it back before it starts.
SHORT_LIVED = frozenset({"recommend", "explain", "check", "inspect", "launch"})


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
            return strict_numbers(getattr(importlib.import_module(module_name), attr))
        command = super().get_command(ctx, name)
        return strict_numbers(command) if command is not None else None

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        """click's main, except that a usage error is one ``Error: ...`` line (exit 2)."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:  # text enters here: every argument, before click reads any (autoselect/text.py)
            check_argv(sys.argv[1:] if args is None else list(args), dict(os.environ))
        except UserError as e:
            click.echo(f"Error: {shown(str(e))}", err=True)
            sys.exit(InputError.exit_code)
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.NoArgsIsHelpError as e:  # a group called alone: its help, as click shows it
            e.show()
            sys.exit(e.exit_code)
        except click.UsageError as e:
            where = e.ctx.command_path if e.ctx is not None else "autoselect"
            click.echo(f"Error: {_one_line(e.format_message()).rstrip('.')}; see `{where} --help`", err=True)
            sys.exit(e.exit_code)
        except click.ClickException as e:
            e.show()
            sys.exit(e.exit_code)
        except click.exceptions.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)
        except OSError as e:
            if e.errno == errno.EPIPE:  # the reader of our stdout went away (| head): as click does
                sys.stdout = open(os.devnull, "w")
                sys.exit(1)
            raise
        sys.exit(rv if isinstance(rv, int) and not isinstance(rv, bool) else 0)

    def resolve_command(self, ctx, args):
        name, command, rest = super().resolve_command(ctx, args)
        if name not in SHORT_LIVED:
            gc.enable()  # off since run() started: a command that runs long must collect its garbage
        return name, command, rest

    def invoke(self, ctx):
        previous = warnings.showwarning
        warnings.showwarning = _show_warning
        try:
            return super().invoke(ctx)
        except UserError as e:
            raise InputError(str(e)) from None
        except Exception as e:
            sqlite3 = sys.modules.get("sqlite3")  # not imported: the error is no database's
            if sqlite3 is None or not isinstance(e, sqlite3.OperationalError) or SQLITE_NOT_UTF8 not in str(e):
                raise
            # a database another program wrote text into that is not UTF-8: damage, not a bug
            raise InputError(f"the results database holds text that is not UTF-8 ({e}); `autoselect db check` "
                             "names the rows, `autoselect db drop-run RUN --yes` removes a run") from None
        finally:
            warnings.showwarning = previous


def shown(message: str) -> str:
    """What an ``Error:`` or ``Warning:`` line prints of ``message``: one line (control characters it
    quotes escaped) with the secrets it quotes out (:mod:`autoselect.redact`)."""
    return one_line(redacted_text(message))


def _one_line(text: str) -> str:
    """click's own (multi-line) message as one line, control characters it quotes escaped."""
    return one_line(" ".join(part.strip() for part in str(text).splitlines() if part.strip()))


def _show_warning(message, category, filename, lineno, file=None, line=None):
    """The project's own warnings (a reader skipped rows that break the schema, ...) as one
    ``Warning: ...`` line on stderr; anything else as Python prints it."""
    if issubclass(category, UserWarning) and category.__module__.split(".")[0] in ("autoselect", "db", "bench", "deploy"):
        click.echo(f"Warning: {shown(str(message))}", err=True)
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


def warn_newer_vllm(warning: str | None) -> None:
    """The one ``Warning:`` line on stderr when the target vLLM is newer than every release the
    rules know (:attr:`autoselect.bridge.version.TargetVersion.warning`); the JSON carries the
    same text as ``vllm_version_warning``."""
    if warning:
        click.echo(f"Warning: {shown(warning)}", err=True)


def run() -> None:
    """The process's entry point (the ``autoselect`` script, ``python -m autoselect``): :func:`main`
    with the cyclic garbage collector set for a command-line process.

    Loading a command creates some 20,000 objects (modules, classes, rule tables) that live until
    the process exits, and no garbage cycles worth collecting; yet the collector runs ~25 times
    while they are created and walks all of them again, several times, while the interpreter
    exits: ~15 ms of a ~100 ms ``recommend`` (perf/recommend_latency.py). So the collector is off
    from here on for :data:`SHORT_LIVED` commands (every other one turns it back on before it
    starts, in :meth:`LazyGroup.resolve_command`), and whatever is alive when the command ends is
    frozen (:func:`gc.freeze`): the exit does not walk it. Library callers and ``CliRunner`` call
    :func:`main` and keep Python's defaults.
    """
    gc.disable()
    try:
        main()
    finally:
        gc.freeze()


def db_option(f=None, *, readable: bool = True):
    """The ``--db PATH`` option every command that reads or writes the store shares (``@db_option``).

    ``@db_option(readable=False)``: a file this user cannot read is not click's usage error but
    the command's to judge (``launch`` says so on its line and answers without it).
    """
    option = click.option(
        "--db",
        "db_path",
        envvar="AUTOSELECT_DB",
        show_envvar=True,
        metavar="PATH",
        type=click.Path(dir_okay=False, readable=readable),
        default=None,
        help="Results database (default: the platform's user data dir, autoselect/results.db).",
    )
    return option if f is None else option(f)


def stopping_rule_options(f):
    """``--max-noise``, ``--min-samples``, ``--min-time``, ``--timeout``: the stopping rule of each
    measured point (``bench``, ``fleet run``, ``fleet schedule``), defaults from
    :data:`autoselect.stopping.STOPPING`; parameters ``max_noise``, ``min_samples``, ``min_time_s``,
    ``timeout_s``."""
    options = [
        click.option("--max-noise", type=float, default=STOPPING.max_noise, show_default=True, metavar="FRACTION",
                     help="Stop a point once the relative standard error of its median is below this fraction."),
        click.option("--min-samples", type=int, default=STOPPING.min_samples, show_default=True, metavar="N",
                     help="Samples per point at least."),
        click.option("--min-time", "min_time_s", type=float, default=STOPPING.min_time_s, show_default=True,
                     metavar="SECONDS",
                     help="Seconds of accumulated sample time per point at least."),
        click.option("--timeout", "timeout_s", type=float, default=STOPPING.timeout_s, show_default=True,
                     metavar="SECONDS",
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
        help="Output format; json is stable and documented under docs/.",
    )
