#!/usr/bin/env bash
# The manual's marked command blocks run as a reader would run them, so a page cannot rot:
# every ```sh block right after a `<!-- doctest -->` line in docs/getting-started/ and
# docs/tasks/ runs under `bash -euo pipefail`, in a scratch directory that sees the
# repository's examples/, with the built lockstep, lockstep-operator and lockstep-trainer first
# on PATH and a local cluster of its own ($LOCKSTEP_HOME). A block that fails fails the test,
# naming its page and line. Blocks run in page order; each starts from a fresh directory.
# Usage: doc_commands.sh LOCKSTEP_BINARY LOCKSTEP_TRAINER SOURCE_DIR
set -euo pipefail
lockstep=$(realpath "$1")
trainer=$(realpath "$2")
src=$(realpath "$3")
source "$(dirname "$0")/lib.sh"
export PATH="$(dirname "$lockstep"):$(dirname "$trainer"):/usr/bin:$PATH"
# A home of its own: the blocks use the default state directory, ~/.lockstep/local, and
# nothing they do reaches the caller's.
export HOME=$work/home
export LOCKSTEP_HOME=$HOME/.lockstep/local
mkdir -p "$HOME"

# Each marked block into a directory of its own, block-N/block.sh, with its page and line in
# block-N/where.
n=0
for page in "$src"/docs/getting-started/*.md "$src"/docs/tasks/*.md; do
  n=$(awk -v page="${page#"$src"/}" -v dir="$work" -v n="$n" '
    /^<!-- doctest -->$/ { marked = NR; next }
    marked && NR == marked + 1 && /^```sh$/ {
      n++; out = dir "/block-" n; system("mkdir -p " out)
      print page ":" NR > (out "/where"); inblock = 1; next
    }
    inblock && /^```$/ { inblock = 0; marked = 0; next }
    inblock { print > (out "/block.sh"); next }
    { marked = 0 }
    END { print n }
  ' "$page")
done
[[ $n -gt 0 ]] || fail "no marked command blocks found under $src/docs"

for ((i = 1; i <= n; i++)); do
  dir=$work/block-$i
  where=$(cat "$dir/where")
  ln -s "$src/examples" "$dir/examples"
  echo "== $where"
  if ! (cd "$dir" && bash -euo pipefail block.sh) >"$dir.log" 2>&1; then
    cat "$dir.log"
    fail "the command block at $where failed (its output is above)"
  fi
  tail -3 "$dir.log"
  "$lockstep" local down >/dev/null 2>&1 || true
done
echo "doc_commands: $n command blocks ran"
