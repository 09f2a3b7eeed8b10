"""Headless Chromium for the tests that look at a page as a person would (.ci/run installs
Debian's chromium; without it those tests skip and say why)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

#: Appended to a copy of a page: writes each image's load state into the DOM on load.
PROBE = (
    '<script>window.addEventListener("load", function () {'
    ' var out = [];'
    ' for (var i = 0; i < document.images.length; i++) {'
    '   var im = document.images[i]; out.push(im.complete + ":" + im.naturalWidth + "x" + im.naturalHeight); }'
    ' var pre = document.createElement("pre"); pre.id = "image-probe"; pre.textContent = out.join(" ");'
    ' document.body.appendChild(pre); });</script>'
)


def chromium() -> str:
    """The browser's path; skips the test when there is none."""
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    reason = "chromium is not installed and could not be installed (.ci/run installs Debian's chromium)"
    print(reason)
    pytest.skip(reason)


def _run(page: Path, work: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={work / 'chromium-profile'}", "--virtual-time-budget=10000", *extra, page.as_uri()],
        capture_output=True, text=True, timeout=120,
    )


def loaded(page: Path, work: Path) -> tuple[list[str], str]:
    """(``complete:WIDTHxHEIGHT`` of every image of ``page`` once loaded, then of a broken control
    image, which must read ``true:0x0``; the DOM chromium rendered). A copy of the page carries the
    probe."""
    broken = '<img id="control" src="data:image/png;base64,bm90IGEgcG5n" alt="control">'
    probe_page = work / "probe.html"
    probe_page.write_text(page.read_text().replace("</body>", broken + PROBE + "</body>"))
    proc = _run(probe_page, work, "--dump-dom")
    match = re.search(r'<pre id="image-probe">([^<]*)</pre>', proc.stdout)
    assert match, f"no probe output; chromium exit {proc.returncode}: {proc.stderr[-2000:]}"
    return match.group(1).split(), proc.stdout


def screenshot(page: Path, work: Path, out: Path, *, width: int = 1280, height: int = 4000) -> Path:
    """A PNG screenshot of ``page`` at ``width`` x ``height``."""
    shot = _run(page, work, "--hide-scrollbars", f"--window-size={width},{height}", f"--screenshot={out}")
    assert out.is_file() and out.stat().st_size > 0, f"no screenshot; chromium exit {shot.returncode}: {shot.stderr[-2000:]}"
    return out
