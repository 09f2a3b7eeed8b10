"""``autoselect launch``: start the user's own server line with the pick (or refuse an illegal one).

Parsing and printing only; the decision is :func:`autoselect.launch.plan_launch`, carrying it
out :func:`autoselect.launch.run_plan`. This path never imports torch, flashinfer, vllm, numpy,
sqlite_utils, optuna or pyarrow.
"""

from __future__ import annotations

import click

from autoselect.cli import db_option


@click.command("launch", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--host-class", default=None, metavar="CLASS",
              help="Answer for this host class of the database, or a reference class ref-<system>-x<N> "
                   "(planning a line for other GPUs); default: this machine.")
@click.option("--gpu-arch", default=None, metavar="ARCH",
              help="GPU arch the line runs on: sm90, sm100, ... (default: the local GPUs'; without GPUs here, "
                   "vLLM's CPU platform).")
@click.option("--vllm-version", default=None, metavar="X.Y.Z",
              help="The vLLM that will run the line (default: the release its vllm/vllm-openai image tag names, "
                   "else the vllm of the line's own Python, else as recommend resolves it).")
@click.option("--role", default=None, metavar="ROLE",
              help="prefill, decode or both: what this instance serves (default: the line's --kv-transfer-config "
                   "kv_role); sets the workload the pick is weighed on.")
@click.option("--workload", type=click.Choice(["decode", "prefill", "mixed"]), default=None,
              show_default="the role's: prefill, decode, else mixed", help="Token buckets to weigh the pick on.")
@click.option("--max-workspace-gib", type=click.FloatRange(min=0, min_open=True), default=None, metavar="GIB",
              show_default="2.0",
              help="One-sided workspace allowed per GPU (as recommend).")
@click.option("--override", is_flag=True,
              help="Replace a backend the line names with the pick (default: the line's own legal backend stays).")
@click.option("--require-evidence", is_flag=True,
              help="Refuse to start when nothing measured or published answers (default: vLLM's default stays).")
@click.option("--server", default=None, metavar="URL",
              help="Ask this running `autoselect serve` for the pick (the fleet's database) before the local "
                   "database; if it cannot answer in time, answer locally and say so.")
@click.option("--server-timeout", "server_timeout_s", type=float, default=5.0, show_default=True, metavar="SECONDS",
              help="Seconds the service may take for the whole exchange.")
@click.option("--token-file", default=None, metavar="PATH", type=click.Path(dir_okay=False),
              help="A file holding the service's bearer token (first line), as `serve --token-file` reads it.")
@click.option("--server-model", default=None, metavar="NAME",
              help="The model's name on the service (default: the line's model; for a local directory, its name "
                   "under the service's --model-root).")
@db_option(readable=False)  # an unreadable file is said on the line, and launch answers without it
@click.option("--decision-json", default=None, metavar="PATH", type=click.Path(dir_okay=False),
              help="Also write the decision as JSON to PATH (docs/launch.md) before starting.")
@click.option("--dry-run", is_flag=True, help="Print the final command line (shell-quoted) instead of running it.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def launch_cmd(command, dry_run, decision_json, **kw):
    """Start a vLLM server line with the fastest legal all2all backend (or refuse an illegal one).

    Reads the line after `--` as check does and judges it with check's own judge: a line check
    finds an error in (an illegal backend for the model, GPUs, EP size or release, anything vLLM
    would not start) is refused, as is anything but a vLLM server behind env, nohup, sudo,
    numactl, uv run, docker run and the like (exit 2, nothing started); check's warnings are
    Warning: lines. Then it picks as recommend does (or asks --server, whose answer is judged
    like any untrusted input), and puts the pick in the line the way the target release takes
    it: a line without a backend gets the pick; a line that names one keeps it (--override
    replaces it). On a host without GPUs, vLLM's CPU platform runs only allgather_reducescatter.
    Without evidence, vLLM's default stays and the bench command that would settle it is
    printed. One line on stderr says what was chosen and why; then this process becomes the
    server (same PID: signals and the exit status are vLLM's).

    \b
    Examples:
      autoselect launch -- vllm serve deepseek-ai/DeepSeek-V3 -dp 8 --enable-expert-parallel
      autoselect launch --dry-run --host-class ref-h200_sxm-x8 -- vllm serve ./DeepSeek-V3 -dp 8 -ep
      autoselect launch --server http://autoselect.fleet:8765 --token-file /run/secrets/autoselect \\
          -- vllm serve Qwen/Qwen3-30B-A3B -dp 4 --enable-expert-parallel
      autoselect launch -- python -m vllm.entrypoints.openai.api_server --model ./m -dp 2 -ep
    """
    from autoselect.launch import LaunchOptions, check_decision_path, plan_launch, run_plan

    check_decision_path(decision_json)
    plan = plan_launch(list(command), LaunchOptions(dry_run=dry_run, **kw))
    raise SystemExit(run_plan(plan, dry_run=dry_run, decision_json=decision_json))
