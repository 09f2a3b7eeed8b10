"""autoselect/atomic.py: a file is replaced whole, durably, and by this one function only."""

from __future__ import annotations

import os
import re
import stat

import pytest

from support.paths import REPO

from autoselect.atomic import replacing


def test_the_new_text_replaces_the_file_whole_and_keeps_its_mode(tmp_path):
    path = tmp_path / "unit.service"
    path.write_text("old\n")
    os.chmod(path, 0o640)
    with replacing(path) as f:
        f.write("new\n")
    assert path.read_text() == "new\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["unit.service"]


def test_an_error_inside_the_block_leaves_the_old_file_and_no_partial_one(tmp_path):
    path = tmp_path / "export.jsonl"
    path.write_text("old\n")
    with pytest.raises(RuntimeError), replacing(path) as f:
        f.write("half of the new")
        raise RuntimeError("disk full")
    assert path.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export.jsonl"]


def _fsyncs(monkeypatch) -> list[str]:
    """Record what each os.fsync call syncs: "file" or "directory"."""
    synced, real = [], os.fsync

    def fsync(fd):
        synced.append("directory" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        return real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return synced


def test_the_new_file_is_synced_before_the_rename_and_the_directory_after_it(tmp_path, monkeypatch):
    synced = _fsyncs(monkeypatch)
    renamed, real_replace = [], os.replace

    def replace(src, dst):
        renamed.append(list(synced))  # what was synced when the rename happened
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with replacing(tmp_path / "decision.json") as f:
        f.write("{}")
    assert renamed == [["file"]]
    assert synced == ["file", "directory"]


def test_a_file_only_running_processes_read_is_not_synced(tmp_path, monkeypatch):
    synced = _fsyncs(monkeypatch)
    with replacing(tmp_path / "rank0.exit", durable=False) as f:
        f.write("0")
    assert (tmp_path / "rank0.exit").read_text() == "0"
    assert synced == []


def test_no_other_module_replaces_a_file_its_own_way():
    """One way to replace a file (this module): a copy elsewhere forgets the fsyncs or the cleanup."""
    own = []
    for path in sorted(p for d in ("autoselect", "bench", "db") for p in (REPO / d).rglob("*.py")):
        if path == REPO / "autoselect" / "atomic.py":
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"\bos\.(replace|rename)\(|\.replace\(\s*\w*path\w*\s*\)|\.rename\(", line):
                own.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    assert own == [], "use autoselect.atomic.replacing"
