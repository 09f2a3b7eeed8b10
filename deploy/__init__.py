"""Deployment templates for periodic fleet runs (systemd timer, Kubernetes CronJob, Slurm job).

:func:`deploy.render.render` fills the templates in ``deploy/templates/``; ``autoselect fleet
deploy`` prints or writes them.
"""
