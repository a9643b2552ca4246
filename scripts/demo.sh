#!/usr/bin/env bash
# make demo: the fixture by hand, every experiment on the unsafe and the live handler (one plan,
# one seed: the console compares them delivery by delivery), the deeper faults, then the
# repair story (a sandbox whose unsafe handler the flow repairs), and the static console
# snapshot. Exits non-zero when any part does not show what it should.
set -euo pipefail
cd "$(dirname "$0")/.."
ACKLAB="${ACKLAB:-.venv/bin/acklab}"
OUT="${ACKLAB_DEMO_OUT:-out}"

rc=0
"$ACKLAB" demo --out "$OUT" || rc=$?

echo
echo "Part 4 — the repair story: a sandbox copy whose handler is the unsafe one, repaired by the flow"
frc=0
"$ACKLAB" flow demo --out "$OUT" || frc=$?
[ "$rc" -ne 0 ] || rc=$frc

echo
echo "Evidence bundles are under $OUT/ (check one with: $ACKLAB evidence verify $OUT/<run_id>)."
if "$ACKLAB" console --help >/dev/null 2>&1; then
  echo "Open the console:         $ACKLAB console --evidence $OUT"
  echo "  (Compare: unsafe vs live, one plan, delivery by delivery with j/k; the repair's runs sit under its trail)"
fi
if "$ACKLAB" pages --help >/dev/null 2>&1; then
  "$ACKLAB" pages --evidence "$OUT" --out public && echo "Static snapshot:          open public/index.html (and public/compare/index.html)"
fi
exit "$rc"
