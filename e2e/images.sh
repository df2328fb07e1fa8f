#!/usr/bin/env bash
# The container images without a container runtime (none on the build machines):
#  - each Dockerfile's RUN steps call only the scripts CI runs (install-deps.sh and build.sh
#    through test.sh, bundle.sh here), its base images carry a version tag, and its final stage
#    runs as a non-root user with the right entrypoint;
#  - bundle.sh lays out the operator and the trainer as the final stages get them, and the
#    bundled binaries run with nothing but the bundle and the system's glibc: the operator
#    answers --version, the trainer trains a few steps on the bundled OpenBLAS.
# Usage: images.sh OPERATOR_BINARY TRAINER_BINARY SOURCE_DIR
set -euo pipefail
operator=$1
trainer=$2
src=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

for image in operator trainer; do
  df=$src/images/$image/Dockerfile
  [[ -f $df ]] || fail "no $df"
  # Join continuation lines, drop comments.
  steps=$(sed -e 's/#.*//' "$df" | sed -e ':a;/\\$/{N;s/\\\n//;ba}')
  grep -E '^FROM ' <<<"$steps" | while read -r _ ref _; do
    [[ $ref == *:* && $ref != *:latest ]] || fail "$df: FROM $ref has no pinned tag"
    [[ ${ref##*:} =~ [0-9] ]] || fail "$df: FROM $ref: the tag names no version"
  done
  grep -E '^RUN ' <<<"$steps" | while read -r _ cmd; do
    # Each command of the step: ./scripts/{install-deps,build,bundle}.sh with arguments.
    while IFS= read -r part; do
      part=$(sed -e 's/^ *//' <<<"$part")
      [[ $part =~ ^\./scripts/(install-deps|build|bundle)\.sh( |$) ]] ||
        fail "$df: RUN step '$part' is not one of the scripts CI runs"
    done < <(sed -e 's/ *&& */\n/g' <<<"$cmd")
  done
  last_user=$(grep -E '^USER ' <<<"$steps" | tail -1 | awk '{print $2}')
  [[ -n $last_user && ${last_user%%:*} != 0 && ${last_user%%:*} != root ]] ||
    fail "$df: the final stage runs as root (USER '$last_user')"
  grep -qx "ENTRYPOINT \[\"/usr/local/bin/lockstep-$image\"\]" <<<"$steps" ||
    fail "$df: the entrypoint is not /usr/local/bin/lockstep-$image"
  grep -q "scripts/bundle.sh /out build/release/[a-z]*/lockstep-$image" <<<"$steps" ||
    fail "$df: does not bundle lockstep-$image"
done
grep -q 'install-deps.sh' "$src/scripts/test.sh" && grep -q 'build.sh' "$src/scripts/test.sh" ||
  fail "test.sh no longer runs install-deps.sh and build.sh, which the Dockerfiles use"

"$src/scripts/bundle.sh" "$work/root" "$operator" "$trainer" >/dev/null
lib=$work/root/usr/local/lib/lockstep
# A clean environment, but for the sanitizers' options in the ASan build.
clean_env=(env -i LD_LIBRARY_PATH="$lib" ${ASAN_OPTIONS:+ASAN_OPTIONS=$ASAN_OPTIONS}
  ${UBSAN_OPTIONS:+UBSAN_OPTIONS=$UBSAN_OPTIONS} ${LSAN_OPTIONS:+LSAN_OPTIONS=$LSAN_OPTIONS})
for bin in lockstep-operator lockstep-trainer; do
  # Every library outside glibc, the compiler runtime and (for a CUDA build of the trainer) the
  # CUDA libraries that the trainer image's CUDA base provides resolves inside the bundle.
  missing=$("${clean_env[@]}" ldd "$work/root/usr/local/bin/$bin" |
    awk '$2 == "=>" {print $1, $3}' |
    grep -Ev '^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libresolv|libutil|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libcudnn[a-z_]*|libnccl)\.' |
    grep -v " $lib/" || true)
  [[ -z $missing ]] || fail "$bin loads libraries from outside the bundle: $missing"
done
version=$("${clean_env[@]}" "$work/root/usr/local/bin/lockstep-operator" --version)
[[ $version == "lockstep-operator "* ]] || fail "bundled operator: $version"
"${clean_env[@]}" HOME="$work" "$work/root/usr/local/bin/lockstep-trainer" \
  --model=mlp --dataset=synthetic --synthetic-size=512 --steps=8 --batch-size=64 \
  --checkpoint-dir="$work/ckpt" --metrics-port=0 >"$work/train.log" 2>&1 || fail "bundled trainer: $(cat "$work/train.log")"
grep -q "after 8 steps" "$work/train.log" || fail "bundled trainer: $(cat "$work/train.log")"
echo "ok: $(ls "$lib" | wc -l) libraries bundled"
