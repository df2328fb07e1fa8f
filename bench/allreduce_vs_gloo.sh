#!/usr/bin/env bash
# All-reduce bus bandwidth on loopback, side by side in one run: Lockstep's ring backend,
# torch.distributed on gloo (Debian's python3-torch), and the loopback TCP ceiling (plain
# sockets in the same ring pattern, both directions at once), for 2 and 4 ranks.
# Usage: bench/allreduce_vs_gloo.sh [BUILD_DIR]   (default build/release)
set -euo pipefail
build=${1:-build/release}
here=$(dirname "$0")
bench=$build/bench/allreduce_bench
[[ -x $bench ]] || { echo "build $bench first" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for n in 2 4; do
  "$bench" "$n" >"$tmp/ring$n"
  "$bench" "$n" --ceiling >"$tmp/ceil$n"
  /usr/bin/python3 "$here/allreduce_gloo.py" "$n" >"$tmp/gloo$n" 2>/dev/null
  echo "== $n ranks: busbw GB/s (latency us), ring vs gloo, and ring as a share of the TCP ceiling"
  printf '%10s %18s %18s %10s %9s %9s\n' bytes ring gloo ceiling ring/gloo ring/ceil
  join <(grep -v '^#' "$tmp/ring$n") <(grep -v '^#' "$tmp/gloo$n") |
    join - <(grep -v '^#' "$tmp/ceil$n") |
    awk '{ printf "%10d %8.3f (%7.1f) %8.3f (%7.1f) %10.3f %8.2fx %8.0f%%\n",
           $1, $4, $2 * 1e6, $7, $5 * 1e6, $9, $4 / $7, 100 * $4 / $9 }'
done
