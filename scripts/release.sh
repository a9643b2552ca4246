#!/usr/bin/env bash
# The release job (.gitlab-ci.yml, on tags): build acklab's wheel and sdist and upload them to
# this project's GitLab package registry (PyPI-compatible) with twine and the job token.
#
#   CI_COMMIT_TAG                 X.Y.Z, pyproject.toml's version (else nothing is built)
#   CI_API_V4_URL, CI_PROJECT_ID  the registry: $CI_API_V4_URL/projects/$CI_PROJECT_ID/packages/pypi
#   CI_JOB_TOKEN                  uploads as user gitlab-ci-token (GitLab sets all of these)
#
# It runs in the job's Python environment (.python installs build and twine with the dev
# extras) and builds without isolation, from the build requirements installed there. A file
# the registry already holds is refused by GitLab ("File name has already been taken"): a
# version is published once. Exit codes: 0 published, 2 misconfigured (nothing built or
# uploaded), anything else the build's or twine's.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python}

version=$("$python" -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')
if [ -z "${CI_COMMIT_TAG:-}" ]; then
  echo "acklab: the release job runs on a tag (CI_COMMIT_TAG is not set): tag $version to release this version" >&2
  exit 2
fi
if [ "$CI_COMMIT_TAG" != "$version" ]; then
  echo "acklab: tag $CI_COMMIT_TAG does not name version $version (pyproject.toml); tag $version, or set the version first" >&2
  exit 2
fi
for name in CI_API_V4_URL CI_PROJECT_ID CI_JOB_TOKEN; do
  if [ -z "${!name:-}" ]; then
    echo "acklab: $name is not set; the release uploads to this project's registry with GitLab's job token" >&2
    exit 2
  fi
done
registry="$CI_API_V4_URL/projects/$CI_PROJECT_ID/packages/pypi"

rm -rf dist
"$python" -m build --no-isolation --outdir dist .
"$python" -m twine check --strict dist/*
TWINE_USERNAME=gitlab-ci-token TWINE_PASSWORD="$CI_JOB_TOKEN" \
  "$python" -m twine upload --non-interactive --disable-progress-bar --repository-url "$registry" dist/*
echo "acklab: published acklab $version ($(cd dist && echo *)) to $registry" >&2
