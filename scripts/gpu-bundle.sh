#!/usr/bin/env bash
# Makes the GPU bundle: the GPU programs and everything they load that a bare GPU machine lacks,
# in one archive, for a machine with an NVIDIA driver and the CUDA libraries but none of the
# Debian libraries the trainer links (a GPU node, the device machine).
#
#   scripts/gpu-bundle.sh [--from BUILD_DIR] [--no-archive] OUT_DIR
#
# Builds (CUDA architecture 90, no debug information) lockstep-trainer, gpu_bench and the
# gpu-labelled test programs in build/release, unless --from names a build that has them, and
# lays them out as OUT_DIR/lockstep-gpu/:
#   bin/           the programs, stripped
#   lib/           every shared library they load but glibc and the loader, libcuda, cuBLAS and
#                  cuBLASLt, cuDNN and NCCL (the GPU machine's: `run` finds them there), and the
#                  compiler runtime
#   lib/fallback/  libstdc++ and libgcc_s, used only where the machine's are older
#   run            the launcher (scripts/gpu-bundle-run.sh): `run PROGRAM ARGS...`, `run --env`
#   shared/        the shared Keras corpus the gpu tests read, when ../shared is beside the tree
#   MANIFEST       what was built from which commit, and what the bundle expects of the machine
# then packs it as OUT_DIR/lockstep-gpu.tar.xz (not with --no-archive) and prints its size,
# failing past 48 MiB (the device machine takes 64 MiB a call, the working tree included).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=""
archive=1
while [[ $# -gt 1 ]]; do
  case $1 in
    --from) build=$2; shift 2 ;;
    --no-archive) archive=0; shift ;;
    *) break ;;
  esac
done
[[ $# -eq 1 && $1 != -* ]] || {
  echo "usage: gpu-bundle.sh [--from BUILD_DIR] [--no-archive] OUT_DIR" >&2; exit 2; }
out=$1
limit_mib=48
programs=(trainer/lockstep-trainer bench/gpu_bench trainer/trainer_gpu_test
  trainer/trainer_graph_gpu_test trainer/trainer_gpu_training_test trainer/trainer_backend_ops_test)

if [[ -z $build ]]; then
  LOCKSTEP_CUDA_ARCHITECTURES=90 LOCKSTEP_DEBUG_INFO=0 "$src/scripts/build.sh" \
    "${programs[@]##*/}"
  build=$src/build/release
fi
cache=$build/CMakeCache.txt
[[ -f $cache ]] || { echo "gpu-bundle.sh: $build is not a build folder" >&2; exit 1; }
grep -q '^LOCKSTEP_CUDA_ARCHITECTURES:STRING=.*90' "$cache" || {
  echo "gpu-bundle.sh: $build was not built with CUDA for architecture 90 (no CUDA toolkit, or" \
    "LOCKSTEP_CUDA_ARCHITECTURES without 90)" >&2; exit 1; }
for p in "${programs[@]}"; do
  [[ -x $build/$p ]] || { echo "gpu-bundle.sh: $build/$p is not built" >&2; exit 1; }
done

root=$out/lockstep-gpu
rm -rf "$root"
mkdir -p "$root/bin" "$root/lib/fallback"
# What the GPU machine provides (found by `run`), and the compiler runtime (lib/fallback).
provided='^(linux-vdso|ld-linux-x86-64|libc|libm|libdl|libpthread|librt|libresolv|libutil|libcuda|libcublas|libcublasLt|libcudnn[a-z_]*|libnccl)\.so'
runtime='^(libstdc\+\+|libgcc_s)\.so'
for p in "${programs[@]}"; do
  install -m 0755 -s "$build/$p" "$root/bin/"
  while read -r name arrow path _; do
    [[ $arrow == "=>" ]] || continue
    [[ $name =~ $provided ]] && continue
    [[ -f $path ]] || { echo "gpu-bundle.sh: $p needs $name, which is not found" >&2; exit 1; }
    dest=$root/lib
    [[ $name =~ $runtime ]] && dest=$root/lib/fallback
    # Under its soname, with the file's contents (alternatives and version links resolved).
    [[ -f $dest/$name ]] || cp -L "$path" "$dest/$name"
  done < <(ldd "$build/$p")
done
install -m 0755 "$src/scripts/gpu-bundle-run.sh" "$root/run"
corpus=$src/../shared/testdata/keras-configs
if [[ -d $corpus ]]; then
  mkdir -p "$root/shared/testdata"
  cp -r "$corpus" "$root/shared/testdata/"
fi
{
  echo "lockstep GPU bundle"
  echo "commit: $(git -C "$src" rev-parse HEAD 2>/dev/null || echo unknown)$(
    git -C "$src" diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release && echo "$PRETTY_NAME")," \
    "glibc $(ldd --version | head -1 | awk '{print $NF}')"
  nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  echo "CUDA: $("$nvcc" --version 2>/dev/null | tail -1) (architectures" \
    "$(sed -n 's/^LOCKSTEP_CUDA_ARCHITECTURES:STRING=//p' "$cache"))"
  echo "needs from the machine: glibc $(ldd --version | head -1 | awk '{print $NF}') or newer," \
    "the NVIDIA driver (CUDA 13), cuBLAS 13, cuDNN 9, NCCL 2"
  echo "programs:"
  (cd "$root/bin" && ls -l | awk 'NR > 1 {printf "  %-28s %6.1f MiB\n", $NF, $5 / 1048576}')
  echo "libraries:"
  (cd "$root/lib" && find . -type f | sort | while read -r f; do
    printf '  %-40s %6.1f MiB\n' "${f#./}" "$(stat -c %s "$f" | awk '{print $1 / 1048576}')"
  done)
} >"$root/MANIFEST"
echo "gpu-bundle.sh: ${#programs[@]} programs, $(find "$root/lib" -type f | wc -l) libraries," \
  "$(du -sm "$root" | cut -f1) MiB unpacked in $root"
[[ $archive == 1 ]] || exit 0
tar -C "$out" -cf - lockstep-gpu | xz -T0 -9 >"$out/lockstep-gpu.tar.xz"
bytes=$(stat -c %s "$out/lockstep-gpu.tar.xz")
mib=$(awk -v b="$bytes" 'BEGIN {printf "%.1f", b / 1048576}')
echo "gpu-bundle.sh: $out/lockstep-gpu.tar.xz: $mib MiB compressed (limit $limit_mib MiB)"
if ((bytes > limit_mib * 1048576)); then
  echo "gpu-bundle.sh: the bundle is over $limit_mib MiB: it and the working tree would not fit" \
    "the device machine's 64 MiB a call" >&2
  exit 1
fi
