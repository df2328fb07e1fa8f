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

# Extracts the marked blocks as "PAGE:LINE" headers followed by the block's lines.
blocks=$work/blocks
for page in "$src"/docs/getting-started/*.md "$src"/docs/tasks/*.md; do
  awk -v page="${page#"$src"/}" '
    /^<!-- doctest -->$/ { marked = NR; next }
    marked && NR == marked + 1 && /^```sh$/ { print "@@ " page ":" NR; inblock = 1; next }
    inblock && /^```$/ { inblock = 0; marked = 0; next }
    inblock { print; next }
    { marked = 0 }
  ' "$page"
done >"$blocks"
count=$(grep -c '^@@ ' "$blocks" || true)
[[ $count -gt 0 ]] || fail "no marked command blocks found under $src/docs"

n=0
while IFS= read -r header; do
  where=${header#@@ }
  n=$((n + 1))
  dir=$work/block-$n
  mkdir -p "$dir"
  ln -s "$src/examples" "$dir/examples"
  # The block's lines: up to the next header.
  awk -v want="$header" '$0 == want { on = 1; next } /^@@ / { on = 0 } on' "$blocks" >"$dir/block.sh"
  echo "== $where"
  if ! (cd "$dir" && bash -euo pipefail block.sh) >"$dir.log" 2>&1; then
    cat "$dir.log"
    fail "the command block at $where failed (its output is above)"
  fi
  tail -3 "$dir.log"
  "$lockstep" local down >/dev/null 2>&1 || true
done < <(grep '^@@ ' "$blocks")
echo "doc_commands: $n command blocks ran"
