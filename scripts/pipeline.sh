#!/usr/bin/env bash
# Runs .gitlab-ci.yml locally with gitlab-ci-local, on a throw-away snapshot of the working tree.
#
#   scripts/pipeline.sh [--workdir DIR] [--keep] [--mr | --tag TAG] [--server URL] [gitlab-ci-local arguments...]
#
# The snapshot holds the files `git ls-files` reports (tracked and untracked-but-not-ignored,
# as they are on disk now), committed to a fresh repository on branch `main` whose origin
# looks like a GitLab project; gitlab-ci-local needs a repository with a commit, and this way
# it never touches the developer's checkout. Jobs run on the shell executor with shell
# isolation: each job gets its own copy under .gitlab-ci-local/builds/<job>/ and sees other
# jobs' artifacts only through needs:/stages, as on GitLab. Artifacts land in
# <workdir>/.gitlab-ci-local/artifacts/<job>/.
#
# Jobs borrow a ready virtualenv (ACKLAB_VENV, default: this checkout's .venv) instead of
# installing per job; the before_script puts the job's own checkout first on sys.path.
# Local defaults, overridable from the environment: ACKLAB_TRIALS=1 (trials per experiment),
# ACKLAB_PYTEST_MARKERS="not slow" (the slow tests are the ones that run this script),
# ACKLAB_PYTEST_WORKERS=0 (pytest-xdist workers: none for a local run's few files) and
# ACKLAB_HISTORY=0 (there is no GitLab to pull earlier pipelines' evidence from).
#
# --mr       run as a merge-request pipeline (CI_PIPELINE_SOURCE=merge_request_event, MR !1)
# --tag TAG  run as the pipeline of tag TAG (CI_COMMIT_TAG; no CI_COMMIT_BRANCH), as a release is
# --server   the GitLab the snapshot's origin names (default https://gitlab.example.com): the
#            jobs' CI_SERVER_URL and CI_API_V4_URL point there (a GitLab double, in the tests)
# --workdir  where to build the snapshot (must not exist or be empty; default: a temp dir)
# --keep     keep the snapshot (always kept with --workdir)
# Exit code: gitlab-ci-local's (non-zero when a job that may not fail failed).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd -P)
workdir="" keep=0 mr=0 tag="" server=https://gitlab.example.com
gcl_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --workdir) workdir=$2; keep=1; shift 2 ;;
    --keep) keep=1; shift ;;
    --mr) mr=1; shift ;;
    --tag) tag=$2; shift 2 ;;
    --server) server=${2%/}; shift 2 ;;
    *) gcl_args+=("$1"); shift ;;
  esac
done

command -v gitlab-ci-local >/dev/null 2>&1 || PATH="$repo/.tools/node_modules/.bin:$PATH"
if ! command -v gitlab-ci-local >/dev/null 2>&1; then
  echo "acklab: gitlab-ci-local not found; run \`make system-deps\` (installs it into .tools/)" >&2
  exit 4
fi
venv=${ACKLAB_VENV:-$repo/.venv}
if [ ! -x "$venv/bin/acklab" ]; then
  echo "acklab: no ready virtualenv at $venv; run \`make install\` or set ACKLAB_VENV" >&2
  exit 4
fi

if [ -z "$workdir" ]; then
  workdir=$(mktemp -d "${TMPDIR:-/tmp}/acklab-pipeline.XXXXXX")
elif [ -e "$workdir" ] && [ -n "$(ls -A "$workdir")" ]; then
  echo "acklab: --workdir $workdir exists and is not empty" >&2
  exit 2
fi
mkdir -p "$workdir"
workdir=$(cd "$workdir" && pwd)
cleanup() { [ "$keep" = 1 ] || rm -rf "$workdir"; }
trap cleanup EXIT

# The snapshot: what `git ls-files` lists and still exists on disk (a deleted tracked file
# stays deleted, as it would be in the next commit).
if [ "$(git -C "$repo" rev-parse --show-toplevel 2>/dev/null)" = "$repo" ]; then
  (cd "$repo" && git ls-files -z --cached --others --exclude-standard) |
    (cd "$repo" && while IFS= read -r -d '' f; do [ -e "$f" ] || [ -L "$f" ] && printf '%s\0' "$f"; done) |
    rsync -a --from0 --files-from=- "$repo/" "$workdir/"
else
  # Not a repository of its own (a job directory of an enclosing local pipeline run):
  # the same selection by the .gitignore rules, read by rsync.
  rsync -a --exclude=/.git --filter=':- .gitignore' "$repo/" "$workdir/"
fi
git_q() { git -C "$workdir" -c user.name=acklab -c user.email=acklab@localhost "$@" >/dev/null; }
git_q init -q -b main
git_q add -A
git_q commit -q -m "acklab pipeline snapshot"
# What gitlab-ci-local reads for CI_PROJECT_PATH, CI_SERVER_URL and CI_DEFAULT_BRANCH.
git_q remote add origin "$server/acklab/acklab.git"
git_q update-ref refs/remotes/origin/main HEAD
git_q symbolic-ref refs/remotes/origin/HEAD refs/remotes/origin/main

# A runner's warm cache, as GitLab's `cache:` hands it to the typecheck job (cache key `mypy`):
# this checkout's mypy cache (what `make checks` left), which the venv borrowed above matches.
# mypy rechecks every file whose hash changed; cold, the job spends minutes of CPU.
if [ -d "$repo/.mypy_cache" ]; then
  mkdir -p "$workdir/.gitlab-ci-local/cache/mypy"
  rsync -a "$repo/.mypy_cache" "$workdir/.gitlab-ci-local/cache/mypy/"
fi

vars=(
  --variable "ACKLAB_VENV=$venv"
  --variable "ACKLAB_TRIALS=${ACKLAB_TRIALS:-1}"
  --variable "ACKLAB_PYTEST_MARKERS=${ACKLAB_PYTEST_MARKERS-not slow}"
  --variable "ACKLAB_PYTEST_PATHS=${ACKLAB_PYTEST_PATHS:-}"
  --variable "ACKLAB_PYTEST_WORKERS=${ACKLAB_PYTEST_WORKERS:-0}"
  --variable "ACKLAB_HISTORY=${ACKLAB_HISTORY:-0}"
)
if [ -n "$tag" ]; then
  # A tag pipeline: GitLab sets CI_COMMIT_TAG and no CI_COMMIT_BRANCH.
  git_q tag "$tag"
  vars+=(--variable "CI_COMMIT_TAG=$tag" --variable "CI_COMMIT_REF_NAME=$tag" --ignore-predefined-vars CI_COMMIT_REF_NAME
         --unset-variable CI_COMMIT_BRANCH)
fi
if [ "$mr" = 1 ]; then
  # In a merge-request pipeline GitLab sets no CI_COMMIT_BRANCH.
  vars+=(--variable CI_PIPELINE_SOURCE=merge_request_event --ignore-predefined-vars CI_PIPELINE_SOURCE
         --variable CI_MERGE_REQUEST_IID=1
         --unset-variable CI_COMMIT_BRANCH)
fi

# A clean environment for the jobs: nothing of an enclosing pipeline, pytest run or
# activated venv leaks in (gitlab-ci-local passes its own environment to shell jobs).
clean_env=(-u VIRTUAL_ENV -u PYTHONPATH)
for name in $(compgen -e); do
  case "$name" in CI_*|GITLAB_*|GCL_*|PYTEST_*) clean_env+=(-u "$name") ;; esac
done

echo "acklab: running the pipeline in $workdir" >&2
rc=0
(cd "$workdir" && env "${clean_env[@]}" gitlab-ci-local \
  --shell-isolation --force-shell-executor --shell-executor-no-image --no-artifacts-to-source \
  --timestamps "${vars[@]}" "${gcl_args[@]}") || rc=$?
[ "$keep" = 1 ] && echo "acklab: artifacts in $workdir/.gitlab-ci-local/artifacts/" >&2
exit "$rc"
