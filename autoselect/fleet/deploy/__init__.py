"""Deployment templates for periodic fleet runs (systemd timer, Kubernetes CronJob, Slurm job).

:func:`~autoselect.fleet.deploy.jobs.render` fills the templates in ``templates/`` (package
data) through the quoting of each file's format (:mod:`~autoselect.fleet.deploy.quoting`);
``autoselect fleet deploy`` prints or writes them (:func:`~autoselect.fleet.deploy.jobs.write_files`).
"""

from autoselect.fleet.deploy.jobs import render, write_files

__all__ = [
    "render", "write_files",
]
