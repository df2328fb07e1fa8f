#!/bin/sh
# The launcher of the GPU bundle (scripts/gpu-bundle.sh copies it to BUNDLE/run):
#
#   BUNDLE/run PROGRAM [ARG...]   runs BUNDLE/bin/PROGRAM with the bundle's libraries
#   BUNDLE/run --env              says where each library the machine provides was found
#   BUNDLE/run --list PROGRAM     the dynamic loader's list of what PROGRAM loads, and from where
#
# The bundle carries every library its programs load except those a GPU machine provides: glibc
# and the loader, the driver's libcuda, and cuBLAS/cuBLASLt 13, cuDNN 9 and NCCL 2. Those are
# found here, at run time, in this order:
#   1. $LOCKSTEP_CUDA_LIBS (folders, ':'-separated), when set;
#   2. the NVIDIA Python wheels' nvidia/*/lib folders in the site-packages of `python3` and
#      under the roots in $LOCKSTEP_GPU_LIB_ROOTS (default: /opt /usr/local/lib /usr/lib);
#   3. a CUDA toolkit folder: $CUDA_HOME, /usr/local/cuda;
#   4. the driver's folders /usr/local/nvidia/lib64 and /usr/local/nvidia/lib, and the system's.
# The compiler runtime (libstdc++, libgcc_s) is the machine's unless it is older than the one
# the bundle was built with; then the bundle's copy in lib/fallback is used.
#
# Plain POSIX sh with no command but the shell's own and the bundled programs, so that it runs
# where the system library folders hold nothing but the C library.
set -u
here=${0%/*}
[ "$here" = "$0" ] && here=.
wanted="libcublas.so.13 libcublasLt.so.13 libcudnn.so.9 libnccl.so.2"

dirs=""
add_dir() {  # add_dir DIR: appended to the search path once, when it exists
  [ -d "$1" ] || return 0
  case ":$dirs:" in *":$1:"*) return 0 ;; esac
  dirs=${dirs:+$dirs:}$1
}
add_wheels() {  # add_wheels SITE_PACKAGES: every nvidia/*/lib folder of the wheels there
  for d in "$1"/nvidia/*/lib; do add_dir "$d"; done
}

old_ifs=$IFS
IFS=:
for d in ${LOCKSTEP_CUDA_LIBS:-}; do add_dir "$d"; done
IFS=$old_ifs
site=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null) &&
  add_wheels "$site"
for root in ${LOCKSTEP_GPU_LIB_ROOTS:-/opt /usr/local/lib /usr/lib}; do
  # A virtual environment or an installed Python, one to three folders down (/opt/X/.venv, ...).
  for s in "$root"/python3*/site-packages "$root"/python3/dist-packages \
    "$root"/*/lib/python3*/site-packages "$root"/*/.[!.]*/lib/python3*/site-packages \
    "$root"/*/*/lib/python3*/site-packages "$root"/.[!.]*/lib/python3*/site-packages; do
    [ -d "$s/nvidia" ] && add_wheels "$s"
  done
done
for cuda in ${CUDA_HOME:-} /usr/local/cuda; do
  add_dir "$cuda/lib64"
  add_dir "$cuda/targets/x86_64-linux/lib"
done
add_dir /usr/local/nvidia/lib64
add_dir /usr/local/nvidia/lib

# where SONAME: the first folder of the search path (or the system's) that holds it.
where() {
  IFS=:
  for d in $dirs /usr/lib/x86_64-linux-gnu /usr/lib64 /lib64 /usr/lib; do
    if [ -e "$d/$1" ]; then
      IFS=$old_ifs
      echo "$d/$1"
      return 0
    fi
  done
  IFS=$old_ifs
  return 1
}

missing=""
for lib in $wanted; do
  where "$lib" >/dev/null || missing="$missing $lib"
done
if [ -n "$missing" ]; then
  echo "lockstep-gpu: not found on this machine:$missing (cuBLAS 13, cuDNN 9, NCCL 2). Searched:" \
    "${dirs:-nothing} and the system's folders. Install the CUDA libraries or NVIDIA's Python" \
    "wheels, or name their folders in LOCKSTEP_CUDA_LIBS." >&2
  exit 127
fi

export LD_LIBRARY_PATH="$here/lib:$dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# The machine's compiler runtime, unless the bundled programs need a newer one.
runtime=system
probe=$("$here/bin/lockstep-trainer" --version 2>&1) || case $probe in
  *GLIBCXX* | *CXXABI* | *GCC_[0-9]* | *libstdc++* | *libgcc_s*)
    export LD_LIBRARY_PATH="$here/lib:$here/lib/fallback:$dirs"
    runtime="bundled (the machine's is older)"
    ;;
esac

case ${1:-} in
  --env)
    echo "bundle: $here"
    for lib in $wanted libcuda.so.1; do
      echo "$lib: $(where "$lib" || echo 'not found (no NVIDIA driver: programs run on the CPU)')"
    done
    echo "libstdc++: $runtime"
    echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    ;;
  --list)
    [ $# -eq 2 ] || { echo "usage: run --list PROGRAM" >&2; exit 2; }
    exec /lib64/ld-linux-x86-64.so.2 --list "$here/bin/$2"
    ;;
  "" | -*)
    echo "usage: run PROGRAM [ARG...] | run --env | run --list PROGRAM" >&2
    exit 2
    ;;
  *)
    program=$1
    shift
    [ -x "$here/bin/$program" ] || { echo "lockstep-gpu: no program $program in $here/bin" >&2; exit 2; }
    exec "$here/bin/$program" "$@"
    ;;
esac
