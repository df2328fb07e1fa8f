#!/usr/bin/env bash
# Fails, listing the files, when clang-format would change any C++ source under version control.
set -euo pipefail
clang_format=${1:-clang-format}
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files -co --exclude-standard -- '*.h' '*.cc' '*.cu' '*.cuh')
bad=()
for f in "${files[@]}"; do
  [ -f "$f" ] || continue
  "$clang_format" --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ "${#bad[@]}" -ne 0 ]; then
  echo "clang-format would change ${#bad[@]} file(s); run: clang-format -i ${bad[*]}"
  exit 1
fi
echo "clang-format: ${#files[@]} files clean"
