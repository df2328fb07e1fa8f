#!/usr/bin/env bash
# Lays out built binaries for an image's final stage: DEST/usr/local/bin/<binary>, and every
# shared library they load that the C library and compiler runtime do not already provide
# (gRPC, protobuf, abseil, OpenBLAS, cpprestsdk, Boost, yaml-cpp, OpenSSL, ...) in
# DEST/usr/local/lib/lockstep, found through LD_LIBRARY_PATH at run
# time (the Dockerfiles set it). The libraries come from the machine that built the binaries,
# so the final stage needs nothing but glibc and libstdc++ of the same or a newer release.
# Usage: bundle.sh DEST BINARY...
set -euo pipefail
dest=$1; shift
[ $# -gt 0 ] || { echo "usage: bundle.sh DEST BINARY..." >&2; exit 2; }
mkdir -p "$dest/usr/local/bin" "$dest/usr/local/lib/lockstep"
# Provided by every base image (glibc, the dynamic loader, the compiler runtime), and by the
# CUDA image and the node's driver (CUDA runtime, cuBLAS, cuDNN, NCCL, libcuda).
system='^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libresolv|libutil|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libcudnn[a-z_]*|libnccl|libnvidia-[a-z-]*)\.'
for bin in "$@"; do
  install -m 0755 -s "$bin" "$dest/usr/local/bin/"  # without debug info
  ldd "$bin" | while read -r name arrow path _; do
    [ "$arrow" = "=>" ] || continue
    [[ $name =~ $system ]] && continue
    [ -f "$path" ] || { echo "bundle.sh: $bin needs $name, which is not found" >&2; exit 1; }
    # Under its soname, with the file's contents (alternatives and version links resolved).
    cp -L "$path" "$dest/usr/local/lib/lockstep/$name"
  done
done
echo "bundle.sh: $# binaries, $(ls "$dest/usr/local/lib/lockstep" | wc -l) libraries in $dest"
