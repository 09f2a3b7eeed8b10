"""The docs are tested: every command has help and a mention; the examples in the docs are real.

"The docs" are README.md and every page under docs/ (the generated docs/cli-reference.md is
checked against --help instead).
"""

from __future__ import annotations

import difflib
import importlib
import re
import shlex

import click
import pytest
from click.testing import CliRunner

from support import browser
from support.paths import REPO, load_script

from autoselect.cli import COMMANDS, main

ROOT = REPO
README = (ROOT / "README.md").read_text()
#: (path relative to ROOT, text) of README.md and the hand-written pages under docs/.
PAGES = [("README.md", README)] + [
    (str(p.relative_to(ROOT)), p.read_text()) for p in sorted((ROOT / "docs").rglob("*.md"))
    if p.name != "cli-reference.md"
]
ALL_DOCS = "\n".join(text for _, text in PAGES)

#: ```console blocks (README or docs/) for these commands are re-run and must match exactly (deterministic
#: commands only: no database, no clock). Add yours here once its output is deterministic.
REPRODUCED = ("inspect", "check")


def _command(name: str) -> click.Command:
    module_name, attr = COMMANDS[name].split(":")
    return getattr(importlib.import_module(module_name), attr)


def _all_commands():
    """(path, command) for every registered command and every subcommand of a group."""
    out = []
    for name in sorted(COMMANDS):
        cmd = _command(name)
        out.append((name, cmd))
        if isinstance(cmd, click.Group):
            out.extend((f"{name} {sub}", sub_cmd) for sub, sub_cmd in sorted(cmd.commands.items()))
    return out


@pytest.mark.parametrize("path", [p for p, _ in _all_commands()])
def test_every_command_has_help_with_an_example_block(path):
    cmd = dict(_all_commands())[path]
    assert cmd.help and cmd.help.strip(), f"`autoselect {path}` has no help text"
    assert cmd.get_short_help_str(limit=200).strip(), f"`autoselect {path}` has no short help"
    assert "\b" in cmd.help, f"`autoselect {path}` help has no \\b example block"


@pytest.mark.parametrize("path", [p for p, _ in _all_commands()])
def test_every_command_is_mentioned_in_the_docs(path):
    assert re.search(rf"autoselect {re.escape(path)}\b", ALL_DOCS), f"neither README.md nor docs/ mention `autoselect {path}`"


def _console_blocks():
    for block in re.findall(r"```console\n(.*?)```", ALL_DOCS, flags=re.S):
        lines = block.rstrip("\n").split("\n")
        if not lines[0].startswith("$ autoselect "):
            continue
        argv = shlex.split(lines[0][2:])[1:]
        if argv[0] in REPRODUCED:
            yield lines[0][2:], argv, "\n".join(lines[1:]) + "\n"


@pytest.mark.parametrize("command, argv, expected", list(_console_blocks()), ids=lambda x: x if isinstance(x, str) and x.startswith("autoselect") else "")
def test_readme_console_examples_reproduce_exactly(command, argv, expected, monkeypatch):
    monkeypatch.chdir(ROOT)
    result = CliRunner().invoke(main, argv)
    assert result.exit_code in (0, 1), result.stderr
    assert result.stdout == expected


def _quick_start_commands():
    """argv of every `autoselect` command of the Quick start, in order (also inside `$(...)`)."""
    block = re.search(r"## Quick start\n.*?```bash\n(.*?)```", README, flags=re.S).group(1)
    out = []
    for line in block.replace("\\\n", " ").splitlines():
        for tokens in _autoselect_invocations(line):
            out.append(tokens[1:])
    return out


def test_quick_start_commands_parse():
    commands = _quick_start_commands()
    assert [argv[0] for argv in commands][:3] == ["inspect", "bench", "recommend"], commands
    for argv in commands:
        cmd = _command(argv[0])
        cmd.make_context(f"autoselect {argv[0]}", list(argv[1:]))  # raises on an unknown flag or a bad value


def test_quick_start_deterministic_commands_run():
    for argv in _quick_start_commands():
        if argv[0] not in REPRODUCED:
            continue
        result = CliRunner().invoke(main, argv, catch_exceptions=False)
        assert result.exit_code == 0, (argv, result.stderr)


@pytest.mark.slow
def test_quick_start_runs_end_to_end_on_cpu(tmp_path, monkeypatch):
    """inspect -> bench on CPU (real gloo workers) -> recommend -> report, as the README shows it; the
    report's page, looked at in headless Chromium, weighs only the token counts bench measured and
    shows no confidence its pick does not have."""
    monkeypatch.chdir(ROOT)
    outputs = {}
    for argv in _quick_start_commands():
        out = [i + 1 for i, a in enumerate(argv) if a == "--out"]
        argv = [str(tmp_path / a) if a.endswith(".db") or i in out else a for i, a in enumerate(argv)]
        result = CliRunner().invoke(main, argv, catch_exceptions=False)
        assert result.exit_code == 0, (argv, result.output)
        outputs[argv[0] if "args" not in argv else "args"] = result.stdout
    assert outputs["args"].startswith("--data-parallel-size 2 --enable-expert-parallel --all2all-backend "), outputs
    assert list(outputs) == ["inspect", "bench", "recommend", "args", "report"]
    page = tmp_path / "report-cpu" / "report.html"
    images, dom = browser.loaded(page, tmp_path)
    assert len(images) == 4 and images[-1] == "true:0x0" and all(s != "true:0x0" for s in images[:-1]), images
    browser.screenshot(page, tmp_path, tmp_path / "quick-start-report.png")
    assert re.findall(r"<th>T=(\d+) \(µs\)</th>", dom) == ["1", "16", "256"]
    [verdict] = re.findall(r'<tr class="chosen"><td>[^<]*</td><td>([^<]*)</td>', dom)
    assert verdict != "incomplete" or "(confidence: high)" not in dom


def test_readme_documents_reproduced_examples():
    assert {argv[0] for _, argv, _ in _console_blocks()} == set(REPRODUCED)


# --- every flag the docs give an autoselect command exists-- -------------------------------

_FLAG = re.compile(r"^--[a-z][a-z0-9-]*$")


def _autoselect_invocations(text: str):
    """Token lists starting with "autoselect" for every `autoselect CMD ...` written in text."""
    for m in re.finditer(r"(?<![\w/.-])autoselect (?=[a-z])", text):
        rest = re.split(r"\)|\||>|;|&&|`|\s#", text[m.start():])[0]
        try:
            tokens = shlex.split(rest)
        except ValueError:
            tokens = rest.split()
        if len(tokens) > 1 and tokens[1] in COMMANDS:
            yield tokens


def _readme_invocations():
    """(where, tokens) for every autoselect command line in a code block or code span of the docs."""
    for block in re.findall(r"```(?:bash|console)\n(.*?)```", ALL_DOCS, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            if block.lstrip().startswith("$") and not line.startswith("$ "):
                continue  # console output, not a command
            for tokens in _autoselect_invocations(line):
                yield line, tokens
    for span in re.findall(r"`([^`\n]+)`", ALL_DOCS):
        for tokens in _autoselect_invocations(span):
            yield span, tokens


def _options(cmd: click.Command) -> set[str]:
    return {opt for p in cmd.params for opt in (*p.opts, *p.secondary_opts)} | {"--help"}


def test_every_flag_the_readme_uses_exists():
    unknown = []
    for where, tokens in _readme_invocations():
        cmd, path, rest = _command(tokens[1]), tokens[1], tokens[2:]
        if isinstance(cmd, click.Group) and rest and rest[0] in cmd.commands:
            cmd, path, rest = cmd.commands[rest[0]], f"{path} {rest[0]}", rest[1:]
        flags = []
        for tok in rest:
            if tok == "--":
                break  # what follows is the vllm serve command line `check` reads
            flags.append(tok.split("=", 1)[0])
        unknown += [f"autoselect {path} {f}   (in: {where})" for f in flags if _FLAG.match(f) and f not in _options(cmd)]
    assert not unknown, "the docs use flags the commands do not have:\n" + "\n".join(unknown)


# --- docs/cli-reference.md is generated from --help ----------------------------------------


def _generator():
    return load_script(ROOT / "scripts" / "gen_cli_reference.py")


def test_cli_reference_is_up_to_date():
    gen = _generator()
    path = ROOT / "docs" / "cli-reference.md"
    current = path.read_text() if path.exists() else ""
    expected = gen.render()
    if current != expected:
        diff = "".join(list(difflib.unified_diff(
            current.splitlines(True), expected.splitlines(True), "docs/cli-reference.md", "--help now"))[:40])
        pytest.fail(f"docs/cli-reference.md is out of date with the commands' --help; regenerate it with "
                    f"`{gen.REGENERATE}` and commit it.\n{diff}", pytrace=False)


def test_cli_reference_lists_every_command():
    text = (ROOT / "docs" / "cli-reference.md").read_text()
    for path, _ in _all_commands():
        assert f"\n## autoselect {path}\n" in text, f"docs/cli-reference.md has no section for `autoselect {path}`"


def test_readme_links_the_cli_reference():
    assert "(docs/cli-reference.md)" in README


def _github_anchor(heading: str) -> str:
    """The id GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(text: str) -> set[str]:
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    return {_github_anchor(h) for h in re.findall(r"^#{1,4} (.+)$", prose, flags=re.M)}


@pytest.mark.parametrize("page", [p for p, _ in PAGES])
def test_doc_links_resolve(page):
    """Every relative link of a page names an existing file, and every #anchor a heading there."""
    text = dict(PAGES)[page]
    here = (ROOT / page).parent
    broken = []
    prose = re.sub(r"`[^`\n]*`", "", re.sub(r"```.*?```", "", text, flags=re.S))
    for link in re.findall(r"\]\(([^)\s]+)\)", prose):
        if link.startswith(("http://", "https://", "mailto:")):
            continue
        target, _, anchor = link.partition("#")
        path = (here / target).resolve() if target else ROOT / page
        if not path.exists():
            broken.append(link)
        elif anchor and path.suffix == ".md" and anchor not in _anchors(path.read_text()):
            broken.append(link)
    assert not broken, f"{page} links to missing headings or files: {broken}"


def test_readme_has_links():
    assert re.findall(r"\]\(([^)\s]+)\)", README)


def test_the_readme_names_the_newest_release_the_rules_have_read():
    from autoselect.rules.versions import NEWEST_VLLM, RELEASES

    assert f"from {RELEASES[0]} to\n{NEWEST_VLLM}, the newest known" in README
