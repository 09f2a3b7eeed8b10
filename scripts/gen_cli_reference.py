#!/usr/bin/env python3
"""Write docs/cli-reference.md from the --help of every autoselect command.

The reference is generated, never edited by hand (as sqlite-utils generates its
docs/cli-reference.rst with cog). tests/docs/test_docs.py fails when the file is out of date.

    python3 scripts/gen_cli_reference.py            # rewrite docs/cli-reference.md
    python3 scripts/gen_cli_reference.py --check    # exit 1 if it is out of date
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autoselect.cli import main  # noqa: E402

REFERENCE = ROOT / "docs" / "cli-reference.md"
REGENERATE = "python3 scripts/gen_cli_reference.py"
#: Help is wrapped as in an 80-column terminal, whatever terminal runs the script.
WIDTH = 78


def _walk(ctx: click.Context):
    """(command path, help text) of ctx's command, then of every subcommand, depth first."""
    yield ctx.command_path, ctx.command.get_help(ctx)
    if isinstance(ctx.command, click.Group):
        for name in ctx.command.list_commands(ctx):
            sub = ctx.command.get_command(ctx, name)
            with click.Context(sub, info_name=name, parent=ctx) as sub_ctx:
                yield from _walk(sub_ctx)


def _anchor(path: str) -> str:
    return path.replace(" ", "-")


def render() -> str:
    """The whole of docs/cli-reference.md, from the commands' --help."""
    with click.Context(main, info_name="autoselect", terminal_width=WIDTH, max_content_width=WIDTH) as ctx:
        pages = list(_walk(ctx))
    out = [
        "# autoselect CLI reference",
        "",
        "<!-- Generated from each command's --help by scripts/gen_cli_reference.py: do not edit.",
        f"     Regenerate with: {REGENERATE} -->",
        "",
        "Every command and subcommand, exactly as `--help` prints it. The README explains what the",
        "commands are for and how they fit together; this page is the complete list of options.",
        "",
    ]
    out += [f"- [`{path}`](#{_anchor(path)})" for path, _ in pages]
    for path, text in pages:
        out += ["", f"## {path}", "", "```", text.rstrip("\n"), "```"]
    return "\n".join(out) + "\n"


def main_(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/cli-reference.md is out of date")
    args = parser.parse_args(argv)
    text = render()
    current = REFERENCE.read_text() if REFERENCE.exists() else None
    if args.check:
        if current != text:
            print(f"{REFERENCE.relative_to(ROOT)} is out of date: run `{REGENERATE}`", file=sys.stderr)
            return 1
        return 0
    if current != text:
        REFERENCE.write_text(text)
        print(f"wrote {REFERENCE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main_())
