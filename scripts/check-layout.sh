#!/usr/bin/env bash
# The repository's root holds only the entries listed here (the ctest test repo_layout): a
# stray file (a log, a histogram, a scratch script) fails the suite before it is committed.
# Tracked and untracked-but-not-ignored files count; ignored ones (build/) do not.
# Usage: scripts/check-layout.sh [SOURCE_DIR]
set -euo pipefail
cd "${1:-$(dirname "$0")/..}"
allowed=(
  .ci .clang-format .dockerignore .gitignore
  CMakeLists.txt README.md LICENSE CONTRIBUTING.md CHANGELOG.md
  operator trainer images charts crds e2e common docs examples bench scripts
)
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  entries=$({ git ls-files; git ls-files --others --exclude-standard; } | cut -d/ -f1 | sort -u)
else
  entries=$(ls -A | grep -vx -e build -e .git)
fi
declare -A is_allowed=()
for a in "${allowed[@]}"; do is_allowed[$a]=1; done
bad=0
for e in $entries; do
  # A lookup, not `printf | grep -q`: under pipefail, grep quitting at its first match could
  # kill printf with SIGPIPE and fail the check for an entry that is listed.
  if [[ -z ${is_allowed[$e]:-} ]]; then
    echo "repo_layout: '$e' at the root is not one of the listed entries (scripts/check-layout.sh)"
    bad=1
  fi
done
for e in LICENSE CONTRIBUTING.md CHANGELOG.md README.md; do
  [[ -f $e ]] || { echo "repo_layout: $e is missing"; bad=1; }
done
[[ $bad == 0 ]] && echo "repo_layout: the root holds only the listed entries"
exit "$bad"
