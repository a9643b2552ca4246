"""scripts/test-tmpdir.sh: where make test puts the tests' files — a tmpfs only when it can take them.

Each case mounts a tmpfs of its own in a private mount namespace (as root, or as a user mapped to
root where user namespaces are allowed), so the machine's /dev/shm is never touched.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "test-tmpdir.sh"
GIB_KIB = 1024 * 1024


def namespace() -> list[str]:
    if os.geteuid() == 0:
        return ["unshare", "--mount", "--propagation", "private"]
    return ["unshare", "--mount", "--map-root-user", "--propagation", "private"]


def choose(shm: Path, fallback: Path, *, options: str = "size=7g", before: str = "") -> tuple[str, str]:
    """The script's answer for a tmpfs mounted at `shm` with `options`; what it printed (and the
    mode of the directory it chose, when it chose one) and what it said on stderr."""
    shm.mkdir()
    fallback.mkdir()
    inside = (
        'mount -t tmpfs -o "$2" acklab-test-shm "$1" && cd "$1" && eval "$3" && cd / && '
        'dir=$("$0" "$1") && echo "$dir" && case "$dir" in "$1"/*) stat -c %a "$dir" ;; esac'
    )
    env = {k: v for k, v in os.environ.items() if k != "ACKLAB_TEST_TMPDIR"} | {"TMPDIR": str(fallback)}
    done = subprocess.run(
        [*namespace(), "sh", "-c", inside, str(SCRIPT), str(shm), options, before or "true"],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout, done.stderr


def memory_available_kib() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1])
    raise AssertionError("no MemAvailable in /proc/meminfo")


def test_a_roomy_tmpfs_gets_a_directory_like_tmp(tmp_path):
    out, err = choose(tmp_path / "shm", tmp_path / "disk")
    if memory_available_kib() < 8 * GIB_KIB:
        assert out.split() == [str(tmp_path / "disk")]
        assert "of memory available (needs 8 GiB)" in err
    else:
        assert out.split() == [str(tmp_path / "shm" / "make-test-tmp-0"), "1777"], err
        assert err == ""


@pytest.mark.parametrize(
    ("options", "before", "reason"),
    [
        ("size=1g", "", "MiB free (needs 6 GiB)"),
        ("size=7g,noexec", "", "is mounted noexec"),
        ("size=7g", "ln -s /tmp make-test-tmp-0", "make-test-tmp-0 is not a directory"),
        ("size=7g", "touch make-test-tmp-0", "make-test-tmp-0 is not a directory"),
    ],
)
def test_a_tmpfs_it_cannot_use_leaves_the_files_where_they_were(tmp_path, options, before, reason):
    out, err = choose(tmp_path / "shm", tmp_path / "disk", options=options, before=before)
    assert out.split() == [str(tmp_path / "disk")]
    assert f"acklab: test files stay in {tmp_path / 'disk'}: " in err
    assert reason in err


def test_what_is_not_a_tmpfs_is_not_used(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "ACKLAB_TEST_TMPDIR"} | {"TMPDIR": str(tmp_path)}
    done = subprocess.run(
        [str(SCRIPT), "/proc"], capture_output=True, text=True, env=env, timeout=60, check=True
    )
    assert done.stdout.split() == [str(tmp_path)]
    assert "/proc is not a tmpfs" in done.stderr


def test_acklab_test_tmpdir_chooses_outright(tmp_path):
    env = os.environ | {"ACKLAB_TEST_TMPDIR": str(tmp_path)}
    done = subprocess.run([str(SCRIPT)], capture_output=True, text=True, env=env, timeout=60, check=True)
    assert done.stdout.split() == [str(tmp_path)]


def test_an_acklab_test_tmpdir_that_is_no_directory_is_refused_by_name(tmp_path):
    (tmp_path / "a-file").write_text("")
    for wrong in (tmp_path / "missing", tmp_path / "a-file"):
        env = os.environ | {"ACKLAB_TEST_TMPDIR": str(wrong)}
        done = subprocess.run([str(SCRIPT)], capture_output=True, text=True, env=env, timeout=60, check=False)
        assert done.returncode == 2
        assert done.stdout == ""
        assert f"ACKLAB_TEST_TMPDIR={wrong} is not a writable directory" in done.stderr
    assert not (tmp_path / "missing").exists(), "nothing is made on its behalf"
