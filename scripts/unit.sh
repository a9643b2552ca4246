#!/usr/bin/env bash
# `make unit`: the unit tier — the tests that need nothing but Python and acklab's own
# dependencies — run with PostgreSQL, Chromium, Node, gitlab-ci-local, redis-server and libfaketime hidden, so that a
# test which still reaches one of them fails instead of quietly using it.
#
#   scripts/unit.sh [pytest arguments...]
#
# It runs itself again in a private mount namespace (unshare: as root, or as a user where
# unprivileged user namespaces are allowed; nothing changes outside it), mounts an empty
# read-only directory over each installation and a stub that exits 127 over each program
# (the list is tests/tiers.py's, printed by `python -m tests.tiers hidden`), checks that none
# of them answers, then runs `pytest --tier=unit`. Where no namespace can be made it says
# so and runs the tier anyway: the tests' own audit hook still refuses a program they start
# themselves, but what their processes start is then not proven absent.
# Exit code: pytest's; 4 when the hiding did not hold.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
python=${ACKLAB_PYTHON:-$repo/.venv/bin/python}
stub=$repo/scripts/hidden-from-unit-tier

if [ -z "${ACKLAB_UNIT_HIDING:-}" ]; then
  if [ "$(id -u)" -eq 0 ]; then ns=(unshare --mount --propagation private)
  else ns=(unshare --mount --map-root-user --propagation private); fi
  if "${ns[@]}" true 2>/dev/null; then
    exec env ACKLAB_UNIT_HIDING=1 "${ns[@]}" "$0" "$@"
  fi
  echo "acklab: no private mount namespace here (unshare); the unit tier runs without hiding" \
       "PostgreSQL, Chromium, Node, gitlab-ci-local, redis-server and libfaketime" >&2
else
  # In the namespace: programs first (a symlink is followed to the file it names), then the
  # directories, whose tmpfs may cover a program's real file: either way it cannot run.
  mapfile -t hide < <("$python" -m tests.tiers hidden "$repo")
  shown=()
  for line in "${hide[@]}"; do
    kind=${line%% *} path=${line#* }
    if [ "$kind" = program ]; then
      found=$(command -v "$path" 2>/dev/null || true)
      for where in "$found" "/usr/bin/$path"; do
        if [ -n "$where" ] && [ -f "$where" ]; then
          mount --bind "$stub" "$(readlink -f "$where")"
          shown+=("$path")
          break
        fi
      done
    fi
  done
  for line in "${hide[@]}"; do
    kind=${line%% *} path=${line#* }
    if [ "$kind" = dir ]; then
      mount -t tmpfs -o ro,size=4k,mode=0555 acklab-unit-hidden "$path"
      shown+=("$path/")
    fi
  done
  # The proof: nothing hidden answers, and PostgreSQL's server cannot be found the way
  # acklab.harness.procs.pgtemp finds it.
  for line in "${hide[@]}"; do
    kind=${line%% *} path=${line#* }
    if [ "$kind" = program ] && command -v "$path" >/dev/null 2>&1 && "$path" --version >/dev/null 2>&1; then
      echo "acklab: $path still runs in the unit tier's namespace" >&2
      exit 4
    fi
    if [ "$kind" = dir ] && [ -n "$(ls -A "$path")" ]; then
      echo "acklab: $path is still visible in the unit tier's namespace" >&2
      exit 4
    fi
  done
  "$python" -c 'import sys; from acklab.harness.procs.pgtemp import available; sys.exit(1 if available() else 0)' || {
    echo "acklab: PostgreSQL's server binaries are still found in the unit tier's namespace" >&2
    exit 4
  }
  echo "acklab: hidden from the unit tier: ${shown[*]}" >&2
fi

export PATH="${PATH//$repo\/.tools\/node_modules\/.bin:/}"
exec "$python" -m pytest --tier=unit "$@"
