"""The programs a server line may run behind, and the one rule for what ``launch`` may start.

``launch`` replaces itself with the line's first program (``os.execvpe``), so the words before
the server must be programs that run the next words as a command, each read with its own
options: ``env``, ``nohup``, ``nice``, ``sudo``, ``numactl``, ``taskset``, ``uv run``,
``canhazgpu run``, ``srun``, ``nsys profile``, ``time``, and ``docker run`` / ``podman run`` in
front of a ``vllm/vllm-openai`` image. :data:`WRAPPERS` holds each one as data: the words that
must follow its name, the options that take a value (so the value is not mistaken for the next
program), the options launch refuses (they change what runs: ``env -S`` splits a string into a
command, ``sudo -s`` starts a shell, ``docker run --entrypoint`` replaces the image's server), how
many positional words come before the command (``taskset``'s mask), and where that was read.
An option a row does not list is read as a switch without a value: were it to take one, the value
would stand where a program must, and the line is refused, never started wrong.

:func:`start_problem` walks the line with the table: anything else before the server (``rm``,
``true``, a shell, a second ``--``) is why launch does not start it. ``check`` reads the same
lines; it judges the server command and needs no program to start.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Mapping, NamedTuple

_ENV_ASSIGNMENT = r"^[A-Za-z_][A-Za-z0-9_]*="


class Wrapper(NamedTuple):
    """One program a server line may run behind, as its own parser reads its arguments."""

    name: str  # the program's file name
    subcommands: tuple[str, ...]  # the words that must follow it (``run`` of ``docker run``)
    value_options: frozenset  # options that take the next word as their value (or ``--opt=v``, ``-Ov``)
    refused: Mapping[str, str]  # option -> why launch does not start a line through it
    positional: int  # positional words between its options and the command (``taskset``'s mask)
    assignments: bool  # ``NAME=value`` words may follow its options (``env``, ``sudo``)
    image: bool  # the command is a container image, whose entry point is the server
    source: str


def _row(name, subcommands=(), values=(), refused=None, positional=0, assignments=False, image=False, *,
         source: str) -> Wrapper:
    return Wrapper(name, tuple(subcommands), frozenset(values), dict(refused or {}), positional, assignments, image,
                   source)


_CONTAINER_VALUES = (
    "-a", "--attach", "--add-host", "--annotation", "--blkio-weight", "--cap-add", "--cap-drop", "--cgroup-parent",
    "--cgroupns", "--cidfile", "--cpu-period", "--cpu-quota", "--cpu-shares", "-c", "--cpus", "--cpuset-cpus",
    "--cpuset-mems", "--device", "--device-cgroup-rule", "--dns", "--dns-option", "--dns-search", "--domainname",
    "-e", "--env", "--env-file", "--expose", "--gpus", "--group-add", "--health-cmd", "--health-interval",
    "--health-retries", "--health-start-period", "--health-timeout", "-h", "--hostname", "--ip", "--ip6", "--ipc",
    "--isolation", "--label", "-l", "--label-file", "--link", "--log-driver", "--log-opt", "--mac-address", "-m",
    "--memory", "--memory-reservation", "--memory-swap", "--memory-swappiness", "--mount", "--name", "--network",
    "--net", "--network-alias", "--pid", "--pids-limit", "--platform", "-p", "--publish", "--pull", "--restart",
    "--runtime", "--security-opt", "--shm-size", "--stop-signal", "--stop-timeout", "--storage-opt", "--sysctl",
    "--tmpfs", "-u", "--user", "--userns", "--ulimit", "--uts", "-v", "--volume", "--volume-driver",
    "--volumes-from", "-w", "--workdir", "--detach-keys", "--log-level", "--hooks-dir", "--secret", "--device-read-bps",
    "--device-write-bps", "--oom-score-adj", "--chrootdirs", "--arch", "--os", "--variant", "--pod", "--preserve-fds",
)
_ENTRYPOINT = "--entrypoint replaces the image's server with another program"

#: The programs a line may run behind, by file name.
WRAPPERS: dict[str, Wrapper] = {w.name: w for w in (
    _row("env", values=("-u", "--unset", "-C", "--chdir"), assignments=True,
         refused={"-S": "it splits a string into the command, which launch cannot read",
                  "--split-string": "it splits a string into the command, which launch cannot read"},
         source="GNU coreutils 9.4 env(1)"),
    _row("nohup", source="GNU coreutils 9.4 nohup(1)"),
    _row("nice", values=("-n", "--adjustment"), source="GNU coreutils 9.4 nice(1)"),
    _row("time", values=("-f", "--format", "-o", "--output"), source="GNU time 1.9 time(1)"),
    _row("sudo", values=("-u", "--user", "-g", "--group", "-C", "--close-from", "-D", "--chdir", "-h", "--host",
                         "-p", "--prompt", "-r", "--role", "-t", "--type", "-T", "--command-timeout", "-U",
                         "--other-user", "-R", "--chroot"), assignments=True,
         refused={"-s": "it starts a shell", "--shell": "it starts a shell", "-i": "it starts a login shell",
                  "--login": "it starts a login shell", "-e": "it edits files", "--edit": "it edits files",
                  "-l": "it lists privileges", "--list": "it lists privileges", "-v": "it runs no command",
                  "--validate": "it runs no command", "-k": "it runs no command without a command",
                  "-b": "it runs the server in the background", "--background": "it runs the server in the "
                                                                                 "background"},
         source="sudo 1.9.15 sudo(8)"),
    _row("numactl", values=("-C", "--physcpubind", "-N", "--cpunodebind", "-m", "--membind", "-i", "--interleave",
                            "-p", "--preferred", "-P", "--preferred-many", "-w", "--weighted-interleave"),
         refused={"-s": "it shows the policy and runs nothing", "--show": "it shows the policy and runs nothing",
                  "-H": "it shows the hardware and runs nothing", "--hardware": "it shows the hardware and runs "
                                                                                "nothing"},
         source="numactl 2.0.18 numactl(8)"),
    _row("taskset", positional=1,
         refused={"-p": "it changes a running process", "--pid": "it changes a running process"},
         source="util-linux 2.39 taskset(1): taskset [options] mask|list command"),
    _row("uv", subcommands=("run",),
         values=("--with", "--with-editable", "--with-requirements", "-p", "--python", "--project", "--directory",
                 "--env-file", "--extra", "--group", "--no-group", "--only-group", "--package", "--index",
                 "--default-index", "--index-url", "--extra-index-url", "-f", "--find-links", "--cache-dir",
                 "--config-file", "--color", "--python-preference", "--index-strategy", "--keyring-provider",
                 "--resolution", "--prerelease", "--exclude-newer", "--link-mode", "--refresh-package",
                 "--reinstall-package", "--upgrade-package", "-P", "--allow-insecure-host", "--script", "-C",
                 "--config-setting", "--no-binary-package", "--no-build-package", "--no-build-isolation-package",
                 "--fork-strategy", "--python-platform"),
         refused={"-m": "it runs a module uv resolves, not the line's program", "--module": "it runs a module uv "
                                                                                             "resolves"},
         source="uv 0.8 docs.astral.sh/uv/reference/cli/#uv-run"),
    _row("canhazgpu", subcommands=("run",), values=("--gpus", "-g", "--timeout", "-t", "--gpu-ids"),
         source="canhazgpu run --help (github.com/russellb/canhazgpu README)"),
    _row("srun", values=("-A", "--account", "-c", "--cpus-per-task", "-D", "--chdir", "-e", "--error", "-i",
                         "--input", "-J", "--job-name", "-N", "--nodes", "-n", "--ntasks", "-o", "--output", "-p",
                         "--partition", "-q", "--qos", "-t", "--time", "-w", "--nodelist", "-x", "--exclude",
                         "--gres", "--gpus", "-G", "--gpus-per-node", "--gpus-per-task", "--mem", "--mem-per-cpu",
                         "--mem-per-gpu", "--ntasks-per-node", "--cpu-bind", "--mpi", "--export", "--container-image",
                         "--container-mounts", "--container-workdir", "--reservation", "-C", "--constraint"),
         refused={"--pty": "it starts an interactive session"},
         source="Slurm 24.05 srun(1)"),
    _row("nsys", subcommands=("profile",),
         values=("-o", "--output", "-t", "--trace", "-s", "--sample", "-b", "--backtrace", "-c", "--capture-range",
                 "--capture-range-end", "-d", "--duration", "-y", "--delay", "-w", "--show-output", "-f",
                 "--force-overwrite", "-e", "--env-var", "--cuda-memory-usage", "--cudabacktrace", "--gpu-metrics-devices",
                 "--nvtx-capture", "--stats", "--export", "--session-new", "--cpuctxsw", "--osrt-threshold"),
         source="NVIDIA Nsight Systems 2024.6 User Guide, CLI profile command switch options"),
    _row("docker", subcommands=("run",), values=_CONTAINER_VALUES, refused={"--entrypoint": _ENTRYPOINT}, image=True,
         source="docs.docker.com/reference/cli/docker/container/run/ (Docker 27)"),
    _row("podman", subcommands=("run",), values=_CONTAINER_VALUES, refused={"--entrypoint": _ENTRYPOINT}, image=True,
         source="podman 5.2 podman-run(1)"),
)}

#: What launch starts: the server programs it knows, named in its refusals.
SERVER_PROGRAMS = "`vllm serve`, `python -m vllm.entrypoints...` or a vllm/vllm-openai image"
_PYTHON = r"^python[0-9.]*$"


def _name(word: str) -> str:
    return PurePosixPath(word).name


def _label(wrapper: Wrapper) -> str:
    return " ".join((wrapper.name, *wrapper.subcommands))


def _option_end(wrapper: Wrapper, words: list[str], i: int) -> tuple[int, str | None]:
    """The index after the option ``words[i]`` (and its value), and why launch refuses it (None: it does not).

    Long options take ``--opt value`` or ``--opt=value``; short ones ``-o value``, ``-ovalue`` or a
    cluster of switches ending in one that takes a value (``-ite X`` is ``-i -t -e X``), as getopt reads them.
    """
    word = words[i]
    name = word.split("=", 1)[0] if word.startswith("--") else word[:2]
    if word.startswith("--"):
        end = i + 2 if name in wrapper.value_options and "=" not in word else i + 1
        return end, (f"`{_label(wrapper)} {name}`: {wrapper.refused[name]}" if name in wrapper.refused else None)
    why = None
    for k, letter in enumerate(word[1:], 1):
        short = f"-{letter}"
        if short in wrapper.refused and why is None:
            why = f"`{_label(wrapper)} {short}`: {wrapper.refused[short]}"
        if short in wrapper.value_options:
            return (i + 1 if k + 1 < len(word) else i + 2), why
    return i + 1, why


def _wrapper_end(words: list[str], i: int, start: int) -> tuple[int, str | None]:
    """The index after the wrapper at ``words[i]`` and its own arguments, or why launch refuses it."""
    wrapper = WRAPPERS.get(_name(words[i]))
    if wrapper is None:
        return i, (f"`{words[i]}` is not a program launch starts the server through: it starts "
                   f"{SERVER_PROGRAMS}, behind {', '.join(sorted(WRAPPERS))}")
    i += 1
    for sub in wrapper.subcommands:
        if i >= start or words[i] != sub:
            return i, f"`{wrapper.name}` without `{sub}` runs no command launch can read (`{wrapper.name} {sub} ...`)"
        i += 1
    while i < start and words[i].startswith("-") and words[i] != "-":
        if words[i] == "--":
            i += 1
            break
        i, why = _option_end(wrapper, words, i)
        if why:
            return i, why
    while wrapper.assignments and i < start and re.match(_ENV_ASSIGNMENT, words[i]):
        i += 1
    return i + wrapper.positional, None


def start_problem(command) -> str | None:
    """Why ``launch`` does not start the line ``command`` (an :class:`autoselect.vllm_flags.Command`)
    (None: it may). The words from its first program (after the leading ``NAME=value``
    assignments) up to the server program must be wrappers of :data:`WRAPPERS`, each followed by its
    own arguments; a container's server must be the image ``docker run`` / ``podman run`` runs;
    ``python -m vllm.entrypoints...`` needs its Python; and no shell redirects the line's input or
    output (launch execs the server, no shell runs between)."""
    words, start, image, entrypoint = command.words, command.start, command.image, command.entrypoint
    if command.redirections:
        return (f"the line redirects its input or output ({' '.join(command.redirections)}), which only a shell "
                f"does; launch execs the server itself: redirect launch's own output instead "
                f"(`autoselect launch -- ... > log 2>&1`)")
    if start is None:
        return None  # bare arguments: the reader's own refusal (nothing names a program)
    if entrypoint.startswith("python -m") and not re.match(_PYTHON, _name(words[start])):
        return f"`-m {entrypoint.split()[-1]}` has no Python before it to run it"
    lead = 0
    while lead < start and re.match(_ENV_ASSIGNMENT, words[lead]):
        lead += 1
    i, runs_image = lead, False
    while i < start:
        wrapper = WRAPPERS.get(_name(words[i]))
        i, why = _wrapper_end(words, i, start)
        if why:
            return why
        if i > start:
            return (f"`{words[start]}` is read as an argument of `{wrapper.name}` there, not as the server: "
                    f"launch cannot tell what `{wrapper.name}` runs")
        if wrapper.image:
            if i != start:
                return f"`{wrapper.name} run` runs `{words[i]}` there, not the vLLM image the line names"
            runs_image = True
    if image and not runs_image:
        return f"the image {image} is not run by `docker run` or `podman run`"
    return None


#: The options of ``docker run`` / ``podman run`` that set the container's environment.
CONTAINER_ENV_OPTIONS = ("-e", "--env")
CONTAINER_ENV_FILE = "--env-file"


def container_environment(words: list[str]) -> tuple[dict[str, str], list[str], list[str]]:
    """What ``docker run`` / ``podman run`` options (``words``, after ``run``, up to the image) give the
    container's environment: ``(NAME -> value, names taken from the client's environment, env files)``.

    Read as the Docker CLI reads them: ``-e NAME=value``, ``--env NAME=value``, ``--env=NAME=value``,
    ``-eNAME=value``; ``-e NAME`` without a value passes the client's ``NAME`` (unset there: not at
    all); ``--env-file FILE`` is named, not read. Nothing else of the client's environment reaches the
    container.
    """
    env: dict[str, str] = {}
    inherit: list[str] = []
    files: list[str] = []
    wrapper = WRAPPERS["docker"]
    i = 0
    while i < len(words) and words[i].startswith("-") and words[i] != "--":
        word = words[i]
        end, _ = _option_end(wrapper, words, i)
        name, eq, inline = word.partition("=") if word.startswith("--") else (word[:2], "", word[2:])
        value = inline if (eq or inline) else (words[i + 1] if i + 1 < len(words) else "")
        if name in CONTAINER_ENV_OPTIONS and value:
            key, has, val = value.partition("=")
            if has:
                env[key] = val
                inherit = [n for n in inherit if n != key]
            else:
                env.pop(key, None)
                inherit.append(key)
        elif name == CONTAINER_ENV_FILE and value:
            files.append(value)
        i = end
    return env, inherit, files
