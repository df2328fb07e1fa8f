#!/usr/bin/env bash
# The GPU bundle needs nothing from the machine that built it (scripts/gpu-bundle.sh): laid out
# from this build, it runs in a mount namespace whose system library folder holds only glibc,
# libgcc_s and libstdc++, with the CUDA toolkit folder hidden and the CUDA libraries offered
# only where a GPU machine's Python wheels keep them (a site-packages/nvidia/*/lib folder):
#  - every library each bundled program loads resolves inside the bundle or to that set, or to
#    cuBLAS, cuDNN and NCCL in the wheels' folder (the loader's own list, as ldd prints it);
#  - the launcher finds those libraries there and says so (`run --env`);
#  - the bundled trainer trains a few steps on the CPU, and the bundled gpu tests run and skip
#    (no GPU here), with none failing;
#  - without libstdc++ and libgcc_s on the machine, the launcher takes the bundle's copies;
#  - bench/gpu.sh --unpack-only reports the machine and starts the bundle's programs.
# Skips (77) where mount namespaces cannot be made (not root, or no CAP_SYS_ADMIN).
# Usage: gpu_bundle.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
src=$2
fail() { echo "FAIL: $*" >&2; exit 1; }
if ! unshare --mount --propagation private true 2>/dev/null; then
  echo "cannot make a mount namespace here (needs root): skipping"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$src/scripts/gpu-bundle.sh" --from "$build" --no-archive "$work/out"
bundle=$work/out/lockstep-gpu
[[ -x $bundle/run && -f $bundle/MANIFEST ]] || fail "no bundle laid out"

# The system library folder inside the namespace: glibc, the loader, the compiler runtime.
multiarch=/usr/lib/x86_64-linux-gnu
allowed='^(linux-vdso\.so\.1|ld-linux-x86-64\.so\.2|libc\.so\.6|libm\.so\.6|libdl\.so\.2|libpthread\.so\.0|librt\.so\.1|libresolv\.so\.2|libutil\.so\.1|libgcc_s\.so\.1|libstdc\+\+\.so\.6)$'
wheels=$work/venv/lib/python3.12/site-packages/nvidia/cu13/lib
mkdir -p "$work/usrlib/x86_64-linux-gnu" "$wheels"
for lib in ld-linux-x86-64.so.2 libc.so.6 libm.so.6 libdl.so.2 libpthread.so.0 librt.so.1 \
  libresolv.so.2 libutil.so.1 libgcc_s.so.1 libstdc++.so.6; do
  [[ -e $multiarch/$lib ]] && cp -L "$multiarch/$lib" "$work/usrlib/x86_64-linux-gnu/"
done
: >"$work/ld.so.cache"
cuda_lib=$(readlink -f /usr/local/cuda/lib64)
[[ -f $cuda_lib/libcublas.so.13 ]] || { echo "no CUDA 13 toolkit in /usr/local/cuda: skipping"; exit 77; }

# in_namespace NAME: runs the commands on stdin (sh, with $b the bundle's launcher and $w this
# test's folder) in a mount namespace over that library folder, from a clean environment.
# /bin/sh (dash) needs only the C library, so it runs what is left once the folder is
# replaced; `mount` runs before that, the folder last.
in_namespace() {
  {
    echo "set -e; b='$bundle/run'; w='$work'"
    echo "mount --bind '$cuda_lib' '$wheels'"
    echo "mount -t tmpfs none /usr/local/cuda"
    echo "mount -t tmpfs none /usr/local/lib"
    echo "mount --bind '$work/ld.so.cache' /etc/ld.so.cache"
    echo "mount --bind '$work/usrlib' /usr/lib"
    echo "export LOCKSTEP_GPU_LIB_ROOTS='$work'"
    cat
  } >"$work/$1.sh"
  env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME="$work" \
    ${ASAN_OPTIONS:+ASAN_OPTIONS=$ASAN_OPTIONS} ${UBSAN_OPTIONS:+UBSAN_OPTIONS=$UBSAN_OPTIONS} \
    unshare --mount --propagation private /bin/sh "$work/$1.sh" ||
    fail "$1: $(for f in "$work"/*.txt; do echo "--- $f"; tail -n 5 "$f"; done)"
}
train='lockstep-trainer --device=cpu --model=mlp --dataset=synthetic --synthetic-size=512 --steps=5 --batch-size=64 --metrics-port=0'

in_namespace inside <<EOF
"\$b" --env >"\$w/env.txt" 2>&1
"\$b" lockstep-trainer --version >"\$w/version.txt" 2>&1
for p in lockstep-trainer gpu_bench trainer_gpu_test trainer_graph_gpu_test trainer_gpu_training_test; do
  "\$b" --list "\$p" >"\$w/list-\$p.txt" 2>&1
done
"\$b" $train --checkpoint-dir="\$w/ckpt" >"\$w/train.txt" 2>&1
for t in trainer_gpu_test trainer_graph_gpu_test trainer_gpu_training_test; do
  "\$b" "\$t" >"\$w/\$t.txt" 2>&1
done
"\$b" gpu_bench >"\$w/gpu_bench.txt" 2>&1
EOF

grep -q "^libcudnn.so.9: $wheels/libcudnn.so.9$" "$work/env.txt" ||
  fail "run --env did not find cuDNN in the wheels' folder: $(cat "$work/env.txt")"
grep -Eq '^GPU libraries: CUDA runtime 13\.[0-9]+, driver none, cuBLAS 13\.[0-9.]+, cuDNN 9\.[0-9.]+, NCCL 2\.[0-9.]+$' \
  "$work/version.txt" || fail "bundled lockstep-trainer --version: $(cat "$work/version.txt")"
grep -q '^libcuda.so.1: not found' "$work/env.txt" ||
  fail "run --env found a driver here: $(cat "$work/env.txt")"

# The loader's list: every line 'name => path (address)'; nothing 'not found'.
for p in lockstep-trainer gpu_bench trainer_gpu_test trainer_graph_gpu_test trainer_gpu_training_test; do
  list=$work/list-$p.txt
  grep -q '=>' "$list" || fail "$p: no library list: $(cat "$list")"
  ! grep -q 'not found' "$list" || fail "$p: $(grep 'not found' "$list")"
  while read -r name arrow path _; do
    [[ $arrow == "=>" ]] || continue
    if [[ $path == "$bundle/lib/"* ]]; then continue; fi
    if [[ $name =~ ^(libcublas|libcublasLt|libcudnn[a-z_]*|libnccl)\.so && $path == "$work/venv/"* ]]; then
      continue
    fi
    if [[ $name =~ $allowed && $path == /usr/lib/x86_64-linux-gnu/* ]]; then continue; fi
    if [[ $name =~ $allowed && $path == /lib/x86_64-linux-gnu/* ]]; then continue; fi
    fail "$p loads $name from $path: neither the bundle, the wheels' folder nor glibc and the compiler runtime"
  done <"$list"
done
grep -q 'after 5 steps' "$work/train.txt" || fail "bundled trainer: $(tail -5 "$work/train.txt")"
for t in trainer_gpu_test trainer_graph_gpu_test trainer_gpu_training_test; do
  f=$work/$t.txt
  grep -q '^\[  PASSED  \] 0 tests' "$f" || fail "$t: $(tail -5 "$f")"
  grep -Eq '^\[  SKIPPED \] [1-9][0-9]* tests?' "$f" || fail "$t skipped nothing: $(tail -5 "$f")"
  ! grep -q '^\[  FAILED  \]' "$f" || fail "$t: $(grep FAILED "$f")"
done
grep -q '^gpu_bench: no usable GPU' "$work/gpu_bench.txt" ||
  fail "bundled gpu_bench: $(tail -3 "$work/gpu_bench.txt")"

# A machine without the compiler runtime (or with one older than the build's): the launcher
# takes the bundle's copies from lib/fallback.
rm "$work/usrlib/x86_64-linux-gnu/libstdc++.so.6" "$work/usrlib/x86_64-linux-gnu/libgcc_s.so.1"
in_namespace inside-old <<EOF
"\$b" --env >"\$w/env-old.txt" 2>&1
"\$b" $train --checkpoint-dir="\$w/ckpt-old" >"\$w/train-old.txt" 2>&1
EOF
grep -q '^libstdc++: bundled' "$work/env-old.txt" || fail "run --env: $(cat "$work/env-old.txt")"
grep -q 'after 5 steps' "$work/train-old.txt" ||
  fail "with the bundled libstdc++: $(tail -n 5 "$work/train-old.txt")"

# bench/gpu.sh's first part on the unpacked bundle, outside the namespace: the machine's
# report, and the bundle's programs start.
OUT=$work/gpu-out "$src/bench/gpu.sh" --unpack-only "$bundle" >"$work/gpu-sh.txt" 2>&1 ||
  fail "bench/gpu.sh --unpack-only: $(tail -5 "$work/gpu-sh.txt")"
grep -q "^unpacked in $bundle" "$work/gpu-sh.txt" || fail "bench/gpu.sh: $(cat "$work/gpu-sh.txt")"
grep -q '^libnccl.so.2: /' "$work/gpu-out/machine.txt" ||
  fail "bench/gpu.sh's machine report: $(cat "$work/gpu-out/machine.txt")"
echo "ok: $(find "$bundle/lib" -type f | wc -l) libraries bundled; $(
  grep -c '=>' "$work/list-lockstep-trainer.txt") loaded by lockstep-trainer, all from the bundle," \
  "the wheels' folder or the allowed set"
