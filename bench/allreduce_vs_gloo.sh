#!/usr/bin/env bash
# All-reduce bus bandwidth on loopback, side by side in one run: Lockstep's TCP backend with
# the ring and with halving-doubling (each forced for every size; halving-doubling up to
# 1 MiB, the sizes it is meant for), torch.distributed on gloo (Debian's python3-torch), and
# the loopback TCP ceiling (plain sockets in the same ring pattern, both directions at once)
# twice: through buffers of the message's size, which an all-reduce must read and write too
# ("ceiling"), and through 4 MiB buffers that stay in the CPU's cache ("cached", a bound no
# all-reduce larger than the cache reaches), for 2 and 4 ranks.
# Usage: bench/allreduce_vs_gloo.sh [BUILD_DIR]   (default build/release)
# A run that fails, or a table missing a row, stops the script with the error and status 1.
set -euo pipefail
build=${1:-build/release}
here=$(dirname "$0")
bench=$build/bench/allreduce_bench
[[ -x $bench ]] || { echo "build $bench first" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# run NAME CMD...: CMD's stdout to $tmp/NAME; on failure, its stderr and a loud exit.
run() {
  local name=$1
  shift
  if ! "$@" >"$tmp/$name" 2>"$tmp/$name.err"; then
    echo "allreduce_vs_gloo: '$*' failed:" >&2
    cat "$tmp/$name.err" >&2
    exit 1
  fi
}

# The machine, and the gloo side's PyTorch (the ranks are single-threaded on both sides).
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores;" \
  "torch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)' 2>/dev/null || echo '?');" \
  "load average $(cut -d' ' -f1-3 /proc/loadavg)"
for n in 2 4; do
  run ring "$bench" "$n" --algorithm ring
  run hd "$bench" "$n" --algorithm halving-doubling --max-bytes $((1 << 20))
  run ceil "$bench" "$n" --ceiling
  run cached "$bench" "$n" --ceiling-cached
  run gloo /usr/bin/python3 "$here/allreduce_gloo.py" "$n"
  echo "== $n ranks: busbw GB/s (latency us) of the ring, halving-doubling and gloo; the"
  echo "   loopback TCP ceilings (GB/s per link); the ring as a share of each; each against gloo"
  printf '%10s %18s %18s %18s %8s %8s %9s %9s %9s %9s\n' bytes ring halv-doub gloo ceiling \
    cached ring/ceil ring/cach ring/gloo hd/gloo
  awk -v hdmax=$((1 << 20)) '
    FNR == 1 { f++ } /^#/ { next }
    f == 1 { ring_t[$1] = $2; ring_b[$1] = $4 } f == 2 { hd_t[$1] = $2; hd_b[$1] = $4 }
    f == 3 { ceil_b[$1] = $3 } f == 4 { cach_b[$1] = $3 }
    f == 5 { gloo_t[$1] = $2; gloo_b[$1] = $4 }
    END {
      for (b = 4096; b <= 256 * 1048576; b *= 4) {
        if (!(b in ring_b) || !(b in ceil_b) || !(b in cach_b) || !(b in gloo_b) ||
            (b <= hdmax && !(b in hd_b))) {
          print "allreduce_vs_gloo: no result for " b " bytes" > "/dev/stderr"; exit 1
        }
        hd = b in hd_b ? sprintf("%8.3f (%7.1f)", hd_b[b], hd_t[b] * 1e6) : sprintf("%18s", "-")
        hdg = b in hd_b ? sprintf("%.2fx", hd_b[b] / gloo_b[b]) : "-"
        printf "%10d %8.3f (%7.1f) %s %8.3f (%7.1f) %8.3f %8.3f %8.0f%% %8.0f%% %8.2fx %9s\n", b,
          ring_b[b], ring_t[b] * 1e6, hd, gloo_b[b], gloo_t[b] * 1e6, ceil_b[b], cach_b[b],
          100 * ring_b[b] / ceil_b[b], 100 * ring_b[b] / cach_b[b], ring_b[b] / gloo_b[b], hdg
      }
    }' "$tmp/ring" "$tmp/hd" "$tmp/ceil" "$tmp/cached" "$tmp/gloo"
done
