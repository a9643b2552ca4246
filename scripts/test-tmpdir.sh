#!/usr/bin/env bash
# Prints the directory the test suite's temporary files go to (make unit, make pytest, make test).
#
#   TMPDIR=$(scripts/test-tmpdir.sh [SHM]) pytest ...
#
# The suite creates and deletes hundreds of thousands of files (clones, sandbox copies, database
# clusters, virtualenvs, pipeline builds). On ext4 each creation searches the inode bitmaps past
# the recently deleted ones: measured here, one repair-flow test spent 5-6 s in the kernel with
# its files in /tmp and 1.1 s on tmpfs (12 s wall against 7), and make unit went from 71 s to 57 s.
# So the files go to a directory of their own on /dev/shm (or SHM) when that is a tmpfs the tests can use:
#   - writable and not mounted noexec (tests run the scripts and virtualenvs they write there),
#   - at least 6 GiB free on it and 8 GiB of memory available (tmpfs lives in memory),
#   - the directory /dev/shm/make-test-tmp-<uid> is ours, a real directory, not a link.
# perf put that kernel time in ext4's inode allocation (find_inode_bit, recently_deleted).
# Otherwise it prints the usual one ($TMPDIR, or /tmp) and says why on stderr.
# ACKLAB_TEST_TMPDIR=DIR chooses DIR outright (ACKLAB_TEST_TMPDIR=/tmp: the disk, as before); DIR
# must be a writable directory, or the script says so and exits 2 (make stops before any test).
# The directory is like /tmp (1777: PostgreSQL's and the sandbox's own users make files there).
# A passing test's tmp_path is removed as it ends (pyproject.toml: tmp_path_retention_policy).
set -euo pipefail

fallback=${TMPDIR:-/tmp}
if [ -n "${ACKLAB_TEST_TMPDIR:-}" ]; then
  # Python's tempfile passes over a TMPDIR that is not a writable directory without a word.
  if [ ! -d "$ACKLAB_TEST_TMPDIR" ] || [ ! -w "$ACKLAB_TEST_TMPDIR" ]; then
    echo "acklab: ACKLAB_TEST_TMPDIR=$ACKLAB_TEST_TMPDIR is not a writable directory;" \
         "create it, or unset ACKLAB_TEST_TMPDIR to let make choose" >&2
    exit 2
  fi
  echo "$ACKLAB_TEST_TMPDIR"
  exit 0
fi

no() {
  echo "acklab: test files stay in $fallback: $*" >&2
  echo "$fallback"
  exit 0
}

shm=${1:-/dev/shm}
gib=$((1024 * 1024))
[ "$(stat -f -c %T "$shm" 2>/dev/null || true)" = tmpfs ] || no "$shm is not a tmpfs"
[ -w "$shm" ] || no "$shm is not writable"
options=$(awk -v m="$shm" '$2 == m { print $4 }' /proc/self/mounts | tail -n 1)
case ",$options," in *,noexec,*) no "$shm is mounted noexec" ;; esac
free_kib=$(df -Pk "$shm" | awk 'NR == 2 { print $4 }')
[ "${free_kib:-0}" -ge $((6 * gib)) ] || no "$shm has $((${free_kib:-0} / 1024)) MiB free (needs 6 GiB)"
available_kib=$(awk '$1 == "MemAvailable:" { print $2 }' /proc/meminfo)
[ "${available_kib:-0}" -ge $((8 * gib)) ] || no "$((${available_kib:-0} / 1024)) MiB of memory available (needs 8 GiB)"

dir=$shm/make-test-tmp-$(id -u)
if [ ! -e "$dir" ] && [ ! -L "$dir" ]; then
  mkdir -m 1777 "$dir" 2>/dev/null || no "cannot create $dir"
fi
[ ! -L "$dir" ] && [ -d "$dir" ] || no "$dir is not a directory"
[ "$(stat -c %u "$dir")" = "$(id -u)" ] || no "$dir belongs to someone else"
chmod 1777 "$dir"
echo "$dir"
