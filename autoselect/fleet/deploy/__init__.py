"""Deployment templates for periodic fleet runs (systemd timer, Kubernetes CronJob, Slurm job).

:func:`~autoselect.fleet.deploy.jobs.render` fills the templates in ``templates/`` (package
data) through the quoting of each file's format (:mod:`~autoselect.fleet.deploy.quoting`);
``autoselect fleet deploy`` prints or writes them (:func:`~autoselect.fleet.deploy.jobs.write_files`).
"""

from autoselect.fleet.deploy.jobs import (KINDS, TEMPLATES, DeployOutputNotWritable, RelativeDeployPath,
                                          UnknownDeployKind, UnschedulableInterval, cron_schedule, render, slurm_time,
                                          write_files)

__all__ = ["DeployOutputNotWritable", "KINDS", "RelativeDeployPath", "TEMPLATES", "UnknownDeployKind",
           "UnschedulableInterval", "cron_schedule", "render", "slurm_time", "write_files"]
