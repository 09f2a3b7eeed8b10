"""Render the periodic-run templates in ``deploy/templates/`` (``string.Template`` syntax).

``render(kind, ...)`` returns ``{file name: text}``: ``systemd`` gives a service and a timer,
``kubernetes`` a CronJob (plus its scavenger PriorityClass), ``slurm`` a self-resubmitting
batch script. The container image is the ``autoselect-vllm`` image built from the
repository's Dockerfile.
"""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path
from string import Template

from autoselect.errors import UserError
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
    every_s = parse_duration(every, what="--every")
    jitter_s = parse_duration(jitter, what="--jitter", allow_zero=True)
    timeout_s = parse_duration(timeout, what="timeout")
    if every_s <= 0:
        raise UnschedulableInterval(f"--every {every!r} must be positive, e.g. 24h")
    try:
        extra = shlex.split(fleet_args)
    except ValueError as e:
        raise UnknownDeployKind(f"--args {fleet_args!r} is not valid shell syntax ({e}); quote it") from None
    executable = executable or shutil.which("autoselect") or "/usr/local/bin/autoselect"
    values = {
        "fleet_args": " ".join(shlex.quote(a) for a in extra),
        "db_path": db_path,
        "db_dir": str(Path(db_path).parent),
        "address": address,
        "every": every,
        "jitter": jitter,
        "every_seconds": int(every_s),
        "jitter_seconds": int(jitter_s),
        "timeout_s": int(timeout_s),
        "image": image,
        "executable": executable,
        "nodes": nodes,
        "gpus_per_node": gpus_per_node,
        "slurm_time": slurm_time(timeout_s),
        "container_args": json.dumps(["fleet", "run", "--trigger", "cronjob", "--only-idle", *extra]),
    }
    if kind == "kubernetes":
        values["cron"] = cron_schedule(every_s)
    return {name: Template((TEMPLATES / name).read_text()).substitute(values) for name in KINDS[kind]}
