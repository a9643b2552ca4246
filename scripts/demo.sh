#!/usr/bin/env bash
# make demo: the fixture by hand, then every experiment on the unsafe and the live handler.
# Exits with `acklab demo`'s code (0 when the unsafe handler fails and the live one passes, as expected).
set -euo pipefail
cd "$(dirname "$0")/.."
ACKLAB="${ACKLAB:-.venv/bin/acklab}"
OUT="${ACKLAB_DEMO_OUT:-out}"

rc=0
"$ACKLAB" demo --out "$OUT" || rc=$?

echo
echo "Evidence bundles are under $OUT/ (check one with: $ACKLAB evidence verify $OUT/<run_id>)."
if "$ACKLAB" console --help >/dev/null 2>&1; then
  echo "Open the console:         $ACKLAB console --evidence $OUT"
fi
if "$ACKLAB" pages --help >/dev/null 2>&1; then
  "$ACKLAB" pages --evidence "$OUT" --out public && echo "Static snapshot:          open public/index.html"
fi
exit "$rc"
