#!/usr/bin/env bash
# mypy --strict on the package as it installs, and tests/ with check_untyped_defs (pyproject.toml).
# mypy cannot follow setuptools' package-dir mapping (the editable install is an import
# hook), so .typecheck/acklab/ rebuilds the installed shape from links: acklab/'s own
# files, and app, harness, evidence, console, flows beneath it. Edits in the folders are
# checked as they are; nothing is copied.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .typecheck
mkdir -p .typecheck/acklab
for f in acklab/*; do
  ln -s "../../$f" ".typecheck/acklab/$(basename "$f")"
done
for d in app harness evidence console flows; do
  ln -s "../../$d" ".typecheck/acklab/$d"
done
if [ -x .venv/bin/mypy ]; then exec .venv/bin/mypy "$@"; fi
exec mypy "$@"
