#!/usr/bin/env bash
# `make test`'s pytest: the whole suite, each test once, in two sessions side by side — the
# unit tier as `make unit` runs it (scripts/unit.sh: PostgreSQL, Chromium, Node and the rest
# hidden in a private mount namespace) and every other test (`pytest --tier=rest`).
#
#   scripts/suite.sh UNIT_WORKERS REST_WORKERS
#
# The rest mostly waits on servers, sandboxes and pipelines (about a third of its time is CPU):
# the unit tier, run beside it, takes the cores the rest leaves idle instead of a minute and
# more of its own before the rest starts (on 7 December, the same hour: 772 s one after the
# other, 718 s side by side). At a lower priority (nice 10) it was starved: it took the rest's
# whole 12 minutes and a unit test's deadline passed. The rest's report is shown as it runs;
# the unit tier's goes to test-artifacts/unit-tier.log and is shown after the rest's.
# ACKLAB_TIERS_BESIDE=0 runs the unit tier first and the rest after it, as before.
# Exit code: the unit tier's when it failed, else the rest's; an interrupt stops both.
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
python=${ACKLAB_PYTHON:-$repo/.venv/bin/python}
unit_workers=${1:?usage: scripts/suite.sh UNIT_WORKERS REST_WORKERS}
rest_workers=${2:?usage: scripts/suite.sh UNIT_WORKERS REST_WORKERS}
unit=(scripts/unit.sh -p bench.pytest_timing -n "$unit_workers" --dist loadfile)
rest=("$python" -m pytest -p bench.pytest_timing -n "$rest_workers" --dist loadfile --tier=rest)
export PATH="$repo/.tools/node_modules/.bin:$PATH"

if [ "${ACKLAB_TIERS_BESIDE:-1}" = 0 ]; then
  "${unit[@]}" || exit $?
  exec "${rest[@]}"
fi

mkdir -p test-artifacts
log=test-artifacts/unit-tier.log
# A session of its own (setsid): a ^C at the terminal reaches the rest, and the trap below stops
# the unit tier's whole process group with it. bash starts a background job with SIGINT and
# SIGQUIT ignored, which pytest and every process a test starts would inherit (a test of
# interrupts then finds them ignored): env puts them back to the default.
setsid env --default-signal=INT,QUIT ACKLAB_UNIT_BESIDE_REST=1 "${unit[@]}" >"$log" 2>&1 &
unit_pid=$!
stop_unit() {
  kill -TERM -- "-$unit_pid" 2>/dev/null
  wait "$unit_pid" 2>/dev/null
  echo "acklab: interrupted; the unit tier was stopped too (its report so far: $log)" >&2
  exit 130
}
trap stop_unit INT TERM HUP
echo "acklab: the unit tier runs beside the rest (pid $unit_pid); its report follows the rest's ($log)"

# In the foreground: a ^C reaches it as usual (pytest stops and reports), and the trap runs
# when it has stopped.
"${rest[@]}"
rest_code=$?
if kill -0 "$unit_pid" 2>/dev/null; then
  echo "acklab: the rest is done; waiting for the unit tier ..."
fi
wait "$unit_pid"
unit_code=$?
trap - INT TERM HUP

echo
echo "================ the unit tier, run beside the rest ($log) ================"
cat "$log"
if [ "$unit_code" -ne 0 ]; then
  echo "acklab: the unit tier failed (pytest exit $unit_code); the rest exited $rest_code" >&2
  exit "$unit_code"
fi
exit "$rest_code"
