#!/usr/bin/env bash
# Installs the system packages the test suite needs, when they are missing:
#   PostgreSQL server (Debian postgresql), Chromium (Debian chromium), rsync, Node.js + npm,
#   bubblewrap and setpriv (the repair flow's sandbox, docs/sandbox.md),
#   redis-server (services: [redis], docs/fleet.md), libfaketime and faketime (a consumer's shifted clock),
#   gitlab-ci-local 4.64.1 and BullMQ 5.81.5 (npm, into .tools/ of this checkout).
# As root it installs with apt-get/npm; otherwise it stops and names the package to install.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
have_pg() { ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1; }
have_pg || missing+=(postgresql)
[ -x /usr/bin/chromium ] || missing+=(chromium)
command -v rsync >/dev/null 2>&1 || missing+=(rsync)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
command -v git >/dev/null 2>&1 || missing+=(git)
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
command -v setpriv >/dev/null 2>&1 || missing+=(util-linux)
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v faketime >/dev/null 2>&1 || missing+=(faketime)
ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1 || missing+=(libfaketime)

if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "acklab: the test suite needs these system packages: ${missing[*]}" >&2
    echo "        install them (e.g. sudo apt-get install ${missing[*]}) and run make test again." >&2
    exit 4
  fi
  echo "acklab: installing system packages: ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # With recommends: that is how these were installed and tested here (fonts for Chromium
  # come in as recommends).
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi

GCL_VERSION=4.64.1
if [ ! -x .tools/node_modules/.bin/gitlab-ci-local ] || \
   ! grep -q "\"version\": \"$GCL_VERSION\"" .tools/node_modules/gitlab-ci-local/package.json 2>/dev/null; then
  echo "acklab: installing gitlab-ci-local@$GCL_VERSION into .tools/" >&2
  mkdir -p .tools
  npm install --silent --no-audit --no-fund --prefix .tools "gitlab-ci-local@$GCL_VERSION" >/dev/null
fi

# BullMQ for the queue consumer the tests run on Node (tests/consumers/bullmq_orders): 5.x runs on Node 20.
BULLMQ_VERSION=5.81.5
if ! grep -q "\"version\": \"$BULLMQ_VERSION\"" .tools/node_modules/bullmq/package.json 2>/dev/null; then
  echo "acklab: installing bullmq@$BULLMQ_VERSION into .tools/" >&2
  mkdir -p .tools
  npm install --silent --no-audit --no-fund --prefix .tools "bullmq@$BULLMQ_VERSION" >/dev/null
fi
