"""The periodic jobs: render the templates in ``templates/`` beside this module (``string.Template``
syntax) and write the files.

``render(kind, ...)`` returns ``{file name: text}``: ``systemd`` gives a service and a timer,
``kubernetes`` a CronJob (plus its scavenger PriorityClass), ``slurm`` a self-resubmitting
batch script. The container image is the ``autoselect-vllm`` image built from the
repository's Dockerfile. Every user value reaches a template through the quoting of that
file's format (:mod:`~autoselect.fleet.deploy.quoting`): a space, quote, ``$`` or ``%`` cannot
change what the unit, manifest or script does, and a control character is refused.
"""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path, PurePosixPath
from string import Template

from autoselect.atomic import output_directory, replacing
from autoselect.errors import UserError
from autoselect.fleet.deploy.quoting import (
    refuse_control,
    shell_word,
    systemd_command,
    systemd_environment,
    yaml_list,
    yaml_scalar,
)
from autoselect.options import parse_duration

TEMPLATES = Path(__file__).parent / "templates"

#: kind -> the template files it renders
KINDS = {
    "systemd": ("autoselect-fleet.service", "autoselect-fleet.timer"),
    "kubernetes": ("cronjob.yaml",),
    "slurm": ("autoselect-fleet.sbatch",),
}


class UnknownDeployKind(UserError):
    "A deployment kind with no template."


class UnschedulableInterval(UserError):
    "An interval a cron schedule cannot express."


class RelativeDeployPath(UserError):
    "A database path for a rendered job that is not one plain absolute path to a file."


class DeployOutputNotWritable(UserError):
    "An --out directory for fleet deploy that does not exist or cannot be written."


def database_directory(db_path: str, kind: str) -> str:
    """The directory of the rendered job's database (Kubernetes mounts its volume there), once
    ``db_path`` is known to name a file by one plain absolute path.

    Refused: a relative path (the job runs in a directory of its own: a container, a unit's
    root); a ``.`` or ``..`` component or a doubled ``/`` (Kubernetes refuses a ``mountPath``
    with ``..``, and the file meant is not what the text says); a path ending in ``/`` (a
    directory, not a database file); for Kubernetes, a file directly under ``/`` (the volume
    would be mounted over the container's root).

    :raises RelativeDeployPath: naming what is wrong and an example that works.
    """
    example = "e.g. /var/lib/autoselect/fleet.db"
    if not os.path.isabs(db_path):
        raise RelativeDeployPath(f"--db {db_path!r} is not an absolute path; the job runs in a directory of its own "
                                 f"(a container, a unit's root), so give it the whole path, {example}")
    parts = db_path.split("/")[1:]
    if db_path.endswith("/") or any(part in ("", ".", "..") for part in parts):
        raise RelativeDeployPath(f"--db {db_path!r} is not a plain path to a file (a '.' or '..' component, a doubled "
                                 f"or trailing '/'); write the file's path itself, {example}")
    directory = str(PurePosixPath(db_path).parent)
    if kind == "kubernetes" and directory == "/":
        raise RelativeDeployPath(f"--db {db_path!r} lies directly under /: the CronJob mounts its volume on the "
                                 f"database's directory, which cannot be the container's root; {example}")
    return directory


def cron_schedule(every_s: float) -> str:
    """A cron expression for "every ``every_s`` seconds": whole minutes dividing an hour, whole
    hours dividing a day, or whole days (runs start at minute 0 / 03:00)."""
    minutes = every_s / 60
    if minutes == int(minutes) and 1 <= minutes < 60 and 60 % int(minutes) == 0:
        return f"*/{int(minutes)} * * * *" if minutes > 1 else "* * * * *"
    hours = every_s / 3600
    if hours == int(hours) and 1 <= hours < 24 and 24 % int(hours) == 0:
        return f"0 */{int(hours)} * * *" if hours > 1 else "0 * * * *"
    days = every_s / 86400
    if days == int(days) and days >= 1:
        return f"0 3 */{int(days)} * *" if days > 1 else "0 3 * * *"
    raise UnschedulableInterval(
        f"cron cannot run every {every_s:g} s; use minutes dividing an hour, hours dividing a day, or whole days"
    )


def slurm_time(seconds: float) -> str:
    """Slurm's ``--time`` (``D-HH:MM:SS``) for a duration."""
    s = int(seconds)
    return f"{s // 86400}-{s % 86400 // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"


def render(kind: str, *, fleet_args: str = "", db_path: str = "/var/lib/autoselect/fleet.db",
           address: str = "auto", every: str = "24h", jitter: str = "1h", image: str = "autoselect-vllm:latest",
           executable: str | None = None, nodes: int = 2, gpus_per_node: int = 8,
           timeout: str = "6h") -> dict[str, str]:
    """Fill the ``kind`` templates; returns ``{file name: text}``.

    :param fleet_args: extra ``autoselect fleet run`` arguments (``--model ...``), shell syntax.
    :param executable: the autoselect command (default: the one on PATH, else /usr/local/bin/autoselect).
    """
    if kind not in KINDS:
        raise UnknownDeployKind(f"no templates for {kind!r}; use one of {', '.join(KINDS)}")
    executable = executable or shutil.which("autoselect") or "/usr/local/bin/autoselect"
    for what, value in (("--args", fleet_args), ("--db", db_path), ("--address", address), ("--every", every),
                        ("--jitter", jitter), ("--image", image), ("the autoselect executable", executable),
                        ("timeout", timeout)):
        refuse_control(what, value)
    every_s = parse_duration(every, what="--every")
    jitter_s = parse_duration(jitter, what="--jitter", allow_zero=True)
    timeout_s = parse_duration(timeout, what="timeout")
    if every_s <= 0:
        raise UnschedulableInterval(f"--every {every!r} must be positive, e.g. 24h")
    try:
        extra = shlex.split(fleet_args)
    except ValueError as e:
        raise UnknownDeployKind(f"--args {fleet_args!r} is not valid shell syntax ({e}); quote it") from None
    db_dir = database_directory(db_path, kind)
    values = {
        "every": every,
        "jitter": jitter,
        "every_seconds": int(every_s),
        "jitter_seconds": int(jitter_s),
        "timeout_s": int(timeout_s),
        "nodes": nodes,
        "gpus_per_node": gpus_per_node,
        "slurm_time": slurm_time(timeout_s),
        # systemd: the unit's Environment= assignments and ExecStart= command line
        "systemd_env_address": systemd_environment("RAY_ADDRESS", address),
        "systemd_env_db": systemd_environment("AUTOSELECT_DB", db_path),
        "systemd_exec": systemd_command([executable, "fleet", "run", "--trigger", "systemd", "--only-idle", *extra]),
        # Kubernetes: YAML scalars
        "yaml_image": yaml_scalar(image),
        "yaml_address": yaml_scalar(address),
        "yaml_db": yaml_scalar(db_path),
        "yaml_db_dir": yaml_scalar(db_dir),
        "yaml_args": yaml_list(["fleet", "run", "--trigger", "cronjob", "--only-idle", *extra]),
        # Slurm: bash words
        "sh_db": shell_word(db_path),
        "sh_executable": shell_word(executable),
        "sh_fleet_args": " ".join(shell_word(a) for a in extra),
    }
    if kind == "kubernetes":
        values["cron"] = cron_schedule(every_s)
    return {name: Template((TEMPLATES / name).read_text()).substitute(values) for name in KINDS[kind]}


def write_files(files: dict[str, str], out_dir: str | os.PathLike) -> list[Path]:
    """Write rendered files into the existing directory ``out_dir``; returns their paths.

    The directory must exist (nothing the user did not name is created); each file is written
    beside its final name and renamed over it, so a failure leaves no half-written unit; any OS
    error (an unwritable directory, a full disk) is :class:`DeployOutputNotWritable`.
    """
    out = output_directory(out_dir, what="--out", error=DeployOutputNotWritable, create=False)
    written = []
    for name, text in files.items():
        target = out / name
        try:
            with replacing(target, mode=0o644) as f:
                f.write(text)
        except OSError as e:
            raise DeployOutputNotWritable(f"cannot write {target} ({e.strerror or e}); pass another --out") from None
        written.append(target)
    return written
