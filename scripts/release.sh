#!/usr/bin/env bash
# The release job (.gitlab-ci.yml, on tags): build acklab's wheel and sdist, versioned by the
# tag, and upload them to this project's GitLab package registry (PyPI-compatible) with twine
# and the job token.
#
#   CI_COMMIT_TAG                 X.Y.Z (a PEP 440 release such as 1.2.0 or 1.2.0rc1): the version
#                                 the packages get; pyproject.toml's is replaced in a copy of the tree
#   CI_API_V4_URL, CI_PROJECT_ID  the registry: $CI_API_V4_URL/projects/$CI_PROJECT_ID/packages/pypi
#   CI_JOB_TOKEN                  uploads as user gitlab-ci-token (GitLab sets all of these)
#
# It runs in the job's Python environment (.python installs build and twine with the dev
# extras) and builds without isolation, from the build requirements installed there, in a
# copy of the committed tree whose version is the tag's (the checkout is never changed). A
# file the registry already holds is refused by GitLab ("File name has already been taken"):
# a version is published once. Exit codes: 0 published, 2 misconfigured (nothing built or
# uploaded), anything else the build's or twine's.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python}

if [ -z "${CI_COMMIT_TAG:-}" ]; then
  echo "acklab: the release job runs on a tag (CI_COMMIT_TAG is not set): tag X.Y.Z to release version X.Y.Z" >&2
  exit 2
fi
# A release version, as the CI/CD Catalog wants its tags: digits and dots, an optional pre-release.
if ! printf %s "$CI_COMMIT_TAG" | grep -Eq '^[0-9]+\.[0-9]+\.[0-9]+((a|b|rc)[0-9]+)?$'; then
  echo "acklab: tag $CI_COMMIT_TAG is not a release version; tag X.Y.Z (e.g. 1.2.0, or 1.2.0rc1)" >&2
  exit 2
fi
version=$CI_COMMIT_TAG
for name in CI_API_V4_URL CI_PROJECT_ID CI_JOB_TOKEN; do
  if [ -z "${!name:-}" ]; then
    echo "acklab: $name is not set; the release uploads to this project's registry with GitLab's job token" >&2
    exit 2
  fi
done
registry="$CI_API_V4_URL/projects/$CI_PROJECT_ID/packages/pypi"

rm -rf dist
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
# A copy of the source tree (git's files where git knows them: no build leftovers, no ignored
# files), its version the tag's; the checkout itself is never changed.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf - | tar -xf - -C "$tree"
else
  tar --exclude=./.git --exclude=./.venv --exclude=./.tools --exclude=./dist --exclude=./out \
    --exclude=./public --exclude=./.cache -cf - . | tar -xf - -C "$tree"
fi
"$python" - "$tree/pyproject.toml" "$version" <<'PY'
import re, sys
path, version = sys.argv[1], sys.argv[2]
text = open(path, encoding="utf-8").read()
changed, n = re.subn(r'(?m)^version = "[^"]*"$', f'version = "{version}"', text, count=1)
if n != 1:
    sys.exit("acklab: pyproject.toml has no version line to set")
open(path, "w", encoding="utf-8").write(changed)
PY
"$python" -m build --no-isolation --outdir "$PWD/dist" "$tree"
"$python" -m twine check --strict dist/*
TWINE_USERNAME=gitlab-ci-token TWINE_PASSWORD="$CI_JOB_TOKEN" \
  "$python" -m twine upload --non-interactive --disable-progress-bar --repository-url "$registry" dist/*
echo "acklab: published acklab $version ($(cd dist && echo *)) to $registry" >&2
