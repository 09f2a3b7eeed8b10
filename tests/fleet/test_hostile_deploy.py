"""Hostile values for ``fleet deploy``: nothing a user passes can add a directive, a key or a
command to the rendered files; --out never creates a directory nobody named."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from support.hostile import (
    cli,
    refused,
    systemd_environment_of,
    systemd_exec_argv,
    tree_state,
    unprivileged,
)

from autoselect.fleet.deploy import render

yaml = pytest.importorskip("yaml")

HOSTILE_DB = "/var/lib/a b/$(touch /tmp/pwned)`id`%h$HOME\\\"';.db"


def _exec_line(unit: str) -> str:
    return next(ln for ln in unit.splitlines() if ln.startswith("ExecStart="))[len("ExecStart="):]


@pytest.mark.parametrize("option, value", [
    ("--db", "/tmp/x\nExecStartPre=/bin/sh -c id"),
    ("--image", "x\nhostPID: true"),
    ("--address", "auto\r\nExecStartPre=/bin/sh"),
    ("--args", "--model x\n--evil"),
    ("--db", "/tmp/\x00x.db"),
    ("--db", "/tmp/x\x1b[2J.db"),
    ("--db", "/tmp/x\u0085.db"),
])
@pytest.mark.parametrize("kind", ["systemd", "kubernetes", "slurm"])
def test_a_control_character_in_any_value_is_refused_in_one_line(kind, option, value):
    line = refused(cli("fleet", "deploy", "--kind", kind, option, value))
    # a NUL is refused at the door, before deploy reads the value (autoselect.cli: no command line
    # carries one); every other control character by deploy's own check
    assert ("holds a NUL character" if "\x00" in value else "holds the control character") in line


def test_a_space_in_the_database_path_stays_one_systemd_environment_assignment():
    unit = render("systemd", db_path="/var/lib/my dir/fleet.db")["autoselect-fleet.service"]
    assert systemd_environment_of(unit) == {"RAY_ADDRESS": "auto", "AUTOSELECT_DB": "/var/lib/my dir/fleet.db"}


def test_systemd_reads_back_exactly_the_values_given():
    unit = render("systemd", db_path=HOSTILE_DB, address="h:1 $X %n",
                  fleet_args="--model 'a b' ';' '$HOME' '%n' '\"q\"' 'back\\slash'")["autoselect-fleet.service"]
    assert systemd_environment_of(unit) == {"RAY_ADDRESS": "h:1 $X %n", "AUTOSELECT_DB": HOSTILE_DB}
    argv = systemd_exec_argv(_exec_line(unit))
    assert argv[1:] == ["fleet", "run", "--trigger", "systemd", "--only-idle", "--model", "a b", ";", "$HOME", "%n",
                        '"q"', "back\\slash"]


def test_hostile_systemd_units_pass_systemd_analyze_verify(tmp_path):
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze not installed")
    files = render("systemd", db_path=HOSTILE_DB, fleet_args="--model 'a b' ';' '$HOME'", executable="/bin/true")
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    proc = subprocess.run(["systemd-analyze", "verify", *sorted(files)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)
    assert (proc.returncode, proc.stderr) == (0, "")


def test_a_newline_free_image_with_yaml_syntax_adds_no_key_to_the_manifest():
    image = 'reg/x:1", "hostPID": true, "y": "'
    text = render("kubernetes", image=image, db_path="/data/a: b/fleet.db", address="auto # comment",
                  fleet_args="--model 'x: y' '{a: 1}'")["cronjob.yaml"]
    cronjob, _ = list(yaml.safe_load_all(text))
    pod = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["image"] == image and "hostPID" not in pod and "hostPID" not in container
    assert {e["name"]: e["value"] for e in container["env"]} == {"RAY_ADDRESS": "auto # comment",
                                                                 "AUTOSELECT_DB": "/data/a: b/fleet.db"}
    assert container["volumeMounts"][0]["mountPath"] == "/data/a: b"
    assert container["args"][-3:] == ["--model", "x: y", "{a: 1}"]


def test_the_slurm_script_never_runs_what_the_database_path_says(tmp_path):
    marker = tmp_path / "pwned"
    db = f"/var/lib/$(touch {marker})`touch {marker}`/fleet.db"
    text = render("slurm", db_path=db)["autoselect-fleet.sbatch"]
    export = next(ln for ln in text.splitlines() if ln.startswith("export AUTOSELECT_DB="))
    proc = subprocess.run(["bash", "-c", f'{export}; printf %s "$AUTOSELECT_DB"'], capture_output=True, text=True,
                          timeout=30)
    assert proc.stdout == db and not marker.exists()
    assert subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True, timeout=30).returncode == 0


def test_a_relative_database_path_is_refused():
    assert "is not an absolute path" in refused(cli("fleet", "deploy", "--kind", "systemd", "--db", "fleet.db"))


@pytest.mark.parametrize("db, why", [
    ("/var/lib/../etc/fleet.db", "is not a plain path to a file"),
    ("/var/lib/./fleet.db", "is not a plain path to a file"),
    ("/var//lib/fleet.db", "is not a plain path to a file"),
    ("/var/lib/autoselect/", "is not a plain path to a file"),
    ("/", "is not a plain path to a file"),
    ("/..", "is not a plain path to a file"),
])
@pytest.mark.parametrize("kind", ["systemd", "kubernetes", "slurm"])
def test_a_database_path_that_is_not_plain_is_refused_for_every_kind(tmp_path, kind, db, why):
    before = tree_state(tmp_path)
    assert why in refused(cli("fleet", "deploy", "--kind", kind, "--db", db, "--out", tmp_path))
    assert tree_state(tmp_path) == before


def test_a_database_directly_under_the_root_is_refused_for_kubernetes_only(tmp_path):
    line = refused(cli("fleet", "deploy", "--kind", "kubernetes", "--db", "/fleet.db"))
    assert "lies directly under /: the CronJob mounts its volume on the database's directory" in line
    unit = cli("fleet", "deploy", "--kind", "systemd", "--db", "/fleet.db")
    assert unit.exit_code == 0 and "Environment=AUTOSELECT_DB=/fleet.db" in unit.stdout


def test_every_rendered_mount_path_is_absolute_and_plain():
    for db in ("/var/lib/autoselect/fleet.db", "/data/a b/fleet.db", "/x/y.db"):
        cronjob, _ = list(yaml.safe_load_all(render("kubernetes", db_path=db)["cronjob.yaml"]))
        mount = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][0]
        path = mount["mountPath"]
        assert path.startswith("/") and path != "/" and ".." not in path.split("/") and db.startswith(path + "/")


def test_out_longer_than_the_file_system_allows_is_one_error_line(tmp_path):
    before = tree_state(tmp_path)
    line = refused(cli("fleet", "deploy", "--kind", "systemd", "--out", tmp_path / ("a" * 300)))
    assert "(File name too long); pass another directory" in line
    assert tree_state(tmp_path) == before


def test_out_into_a_missing_directory_creates_nothing(tmp_path):
    before = tree_state(tmp_path)
    line = refused(cli("fleet", "deploy", "--kind", "systemd", "--out", tmp_path / "no" / "such" / "dir"))
    assert "is not an existing directory; create it first" in line
    assert tree_state(tmp_path) == before


def test_out_into_an_unwritable_directory_is_one_error_line(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    line = refused(unprivileged("fleet", "deploy", "--kind", "systemd", "--out", ro))
    assert "is not writable" in line and list(ro.iterdir()) == []


def test_out_replaces_the_files_it_renders_and_leaves_nothing_else(tmp_path):
    (tmp_path / "autoselect-fleet.service").write_text("old")
    r = cli("fleet", "deploy", "--kind", "systemd", "--out", tmp_path)
    assert r.exit_code == 0, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["autoselect-fleet.service", "autoselect-fleet.timer"]
    assert (tmp_path / "autoselect-fleet.service").read_text() != "old"
