#!/usr/bin/env bash
# Everything that needs a GPU, in one run on a GPU machine that has none of the build's
# libraries (a GPU node, the device machine): it runs the GPU bundle (scripts/gpu-bundle.sh)
# and writes every log and a summary table under $OUT (default ./gpu-out).
#
#   bench/gpu.sh [--unpack-only] [BUNDLE]
#
# BUNDLE is the archive or its unpacked folder (default .gpu/lockstep-gpu.tar.xz, unpacked
# beside it once; a folder already unpacked is reused). The parts, each with its own time limit;
# a part that fails is reported and the rest still run:
#   1. the machine: GPU, driver, CUDA, and the cuBLAS, cuDNN and NCCL the bundle found;
#   2. side by side (none of them is timed): every gpu test; the cnn trained on Fashion-MNIST
#      for 5 epochs in float32, mixed_bfloat16 and mixed_float16, and its Keras file
#      (examples/models/cnn.json) on the device graph; MultiWorkerMirrored with two processes on
#      GPU 0 over the TCP ring, and the same with --collective=nccl, which must fail at once
#      with exit 2 (NCCL takes one GPU per rank);
#   3. alone, timed: gpu_bench, then PyTorch (bench/gpu_torch.py: eager and torch.compile,
#      the same models, batch sizes and precisions, and the copy and bf16 GEMM ceilings);
#   4. the summary (bench/gpu_summary.py), printed last.
# Fashion-MNIST's gzipped IDX files are read from $LOCKSTEP_DATA_DIR, .gpu/fashion-mnist or
# Debian's folder; without them the cnn trains on synthetic data and the summary says so.
# $LOCKSTEP_GPU_TORCH_ARGS adds flags to bench/gpu_torch.py (e.g. --models=mlp,cnn).
#
# On the device machine (64 MiB a call, the working tree included; a warm machine keeps what
# an earlier call left), two calls in a row:
#   here:   scripts/gpu-bundle.sh .gpu && mkdir -p .gpu/fashion-mnist &&
#           cp /usr/share/datasets/fashion-mnist/*.gz .gpu/fashion-mnist/
#   call 1: carry .gpu/lockstep-gpu.tar.xz, run bench/gpu.sh --unpack-only
#   call 2: carry .gpu/fashion-mnist, run bench/gpu.sh (timeout 540 s)
set -uo pipefail
unpack_only=0
[[ ${1:-} == --unpack-only ]] && { unpack_only=1; shift; }
# Paths given are the caller's; the script runs from the repository's root.
repo=$(cd "$(dirname "$0")/.." && pwd)
bundle=$(realpath -m "${1:-$repo/.gpu/lockstep-gpu.tar.xz}")
out=$(realpath -m "${OUT:-$repo/gpu-out}")
cd "$repo" || exit 1
mkdir -p "$out"
started=$SECONDS
parts=$out/parts.tsv
: >"$parts"
part() {  # part NAME STATUS NOTE: one line of the summary's parts table
  printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$parts"
  echo "== $1: $2${3:+ ($3)}"
}

# The bundle, unpacked beside its archive.
if [[ -f $bundle ]]; then
  dir=$(dirname "$bundle")/lockstep-gpu
  if [[ ! -f $dir/.unpacked || $bundle -nt $dir/.unpacked ]]; then
    rm -rf "$dir"
    if command -v xz >/dev/null; then
      tar -C "$(dirname "$bundle")" -xJf "$bundle"
    else  # Python's tarfile reads xz where the xz program is missing
      python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
        "$bundle" "$(dirname "$bundle")"
    fi || { echo "cannot unpack $bundle" >&2; exit 1; }
    touch "$dir/.unpacked"
  fi
  bundle=$dir
fi
[[ -x $bundle/run ]] || {
  echo "no GPU bundle at $bundle: make one with scripts/gpu-bundle.sh (see this script's header)" >&2
  exit 1
}
bundle=$(cd "$bundle" && pwd)
run=$bundle/run

# 1. The machine.
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1
  nvidia-smi 2>/dev/null | sed -n 's/.*\(CUDA Version: [0-9.]*\).*/\1 (the driver)/p'
  "$run" --env
  "$run" lockstep-trainer --version
  python3 -c 'import torch; print("torch", torch.__version__, "cuDNN", torch.backends.cudnn.version(),
    "NCCL", ".".join(map(str, torch.cuda.nccl.version())))' 2>&1
  cat "$bundle/MANIFEST"
} >"$out/machine.txt" 2>&1
head -20 "$out/machine.txt"
"$run" lockstep-trainer --version >/dev/null 2>&1 || {
  part bundle FAILED "its programs do not start: $("$run" lockstep-trainer --version 2>&1 | head -3)"
  exit 1
}
[[ $unpack_only == 1 ]] && { echo "unpacked in $bundle"; exit 0; }
if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  part machine FAILED "no GPU is visible (nvidia-smi -L lists none)"
  exit 1
fi

data=(--dataset=synthetic --synthetic-size=60000)
data_note="synthetic data (no Fashion-MNIST files found)"
for d in "${LOCKSTEP_DATA_DIR:-}" .gpu/fashion-mnist /usr/share/datasets/fashion-mnist; do
  if [[ -n $d && -f $d/train-images-idx3-ubyte.gz ]]; then
    data=(--dataset=fashion-mnist "--data-dir=$(cd "$d" && pwd)")
    data_note="Fashion-MNIST"
    break
  fi
done

# 2. Side by side, untimed.
export LOCKSTEP_SOURCE_DIR=$repo
[[ -d $bundle/shared ]] && export LOCKSTEP_SHARED_DIR=$bundle/shared
tests() {  # the gpu test programs side by side
  local pids=() failed=0
  for t in trainer_gpu_test trainer_graph_gpu_test trainer_gpu_training_test trainer_backend_ops_test; do
    timeout 300 "$run" "$t" >"$out/$t.txt" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || failed=1; done
  return $failed
}
train() {  # train NAME MODEL PRECISION
  timeout 300 "$run" lockstep-trainer --model="$2" --device=gpu --precision="$3" --epochs=5 \
    --metrics-port=0 --checkpoint-dir="$out/ckpt-$1" "${data[@]}" >"$out/train-$1.txt" 2>&1
}
mwm() {  # mwm NAME COLLECTIVE PORT SECONDS: a chief and a worker on GPU 0
  local cluster="{\"chief\":[\"127.0.0.1:$3\"],\"worker\":[\"127.0.0.1:$(($3 + 1))\"]}" pids=()
  for task in chief worker; do
    TF_CONFIG="{\"cluster\":$cluster,\"task\":{\"type\":\"$task\",\"index\":0}}" \
      LOCKSTEP_STRATEGY=MultiWorkerMirrored LOCKSTEP_JOB_TOKEN=bench \
      timeout "$4" "$run" lockstep-trainer --model=mlp --device=gpu --collective="$2" \
      --steps=200 --metrics-port=0 --dataset=synthetic --checkpoint-dir="$out/ckpt-$1-$task" \
      >"$out/$1-$task.txt" 2>&1 &
    pids+=($!)
  done
  local codes=()
  for p in "${pids[@]}"; do wait "$p"; codes+=($?); done
  echo "${codes[*]}"
}
tests &
tests_pid=$!
train cnn-float32 cnn float32 & p1=$!
train cnn-bf16 cnn mixed_bfloat16 & p2=$!
train cnn-fp16 cnn mixed_float16 & p3=$!
train cnn-json-float32 examples/models/cnn.json float32 & p4=$!
train cnn-json-bf16 examples/models/cnn.json mixed_bfloat16 & p5=$!
ring_codes=$(mwm mwm-ring ring 23456 180)
t0=$SECONDS
nccl_codes=$(mwm mwm-nccl nccl 23466 60)
nccl_s=$((SECONDS - t0))

wait "$tests_pid"
tests_rc=$?
counts=""
for t in trainer_gpu_test trainer_graph_gpu_test trainer_gpu_training_test trainer_backend_ops_test; do
  f=$out/$t.txt
  n() {  # n PASSED|FAILED|SKIPPED: gtest's count (a count of none is not printed)
    local v
    v=$(sed -n "s/^\[  $1 *\] \([0-9]*\) tests\?[,.].*/\1/p" "$f" | head -1)
    echo "${v:-0}"
  }
  counts+="$t: $(n PASSED) passed, $(n FAILED) failed, $(n SKIPPED) skipped; "
done
part "gpu tests" "$([[ $tests_rc == 0 ]] && echo passed || echo FAILED)" "$counts"
i=0
for name in cnn-float32 cnn-bf16 cnn-fp16 cnn-json-float32 cnn-json-bf16; do
  pids=("$p1" "$p2" "$p3" "$p4" "$p5")
  wait "${pids[$i]}"
  rc=$?
  i=$((i + 1))
  acc=$(sed -n 's/^final test accuracy: \([0-9.]*\).*/\1/p' "$out/train-$name.txt")
  sps=$(sed -n 's/^steady training samples\/s: //p' "$out/train-$name.txt")
  if [[ $rc == 0 && -n $acc ]]; then
    part "$name, 5 epochs" passed "test accuracy $acc, $sps samples/s, $data_note"
  else
    part "$name, 5 epochs" FAILED "exit $rc: $(tail -2 "$out/train-$name.txt" | tr '\n' ' ')"
  fi
done
if [[ $ring_codes == "0 0" ]]; then
  part "MultiWorkerMirrored, 2 processes on GPU 0, ring" passed \
    "$(sed -n 's/^steady training samples\/s: \(.*\)/\1 samples\/s/p' "$out/mwm-ring-chief.txt")"
else
  part "MultiWorkerMirrored, 2 processes on GPU 0, ring" FAILED "exits $ring_codes"
fi
if [[ $nccl_codes == "2 2" ]] && ((nccl_s < 60)); then
  part "--collective=nccl, 2 processes on GPU 0" passed "exit 2 in ${nccl_s} s: $(
    grep -h -m1 -o 'share GPU.*' "$out"/mwm-nccl-*.txt | head -1 | cut -c1-120)"
else
  part "--collective=nccl, 2 processes on GPU 0" FAILED "exits $nccl_codes after ${nccl_s} s"
fi

# 3. Alone, timed.
rm -f "$out/lockstep.jsonl" "$out/torch.jsonl"
if (cd "$repo" && timeout 240 "$run" gpu_bench --json="$out/lockstep.jsonl") >"$out/gpu_bench.txt" 2>&1 &&
  grep -q '"kind": "train"' "$out/lockstep.jsonl" 2>/dev/null
then part gpu_bench passed ""
else part gpu_bench FAILED "$(tail -2 "$out/gpu_bench.txt" | tr '\n' ' ')"
fi
# PyTorch gets what is left of 8 minutes, less the summary's few seconds.
budget=$((470 - (SECONDS - started)))
((budget < 60)) && budget=60
# shellcheck disable=SC2086  # LOCKSTEP_GPU_TORCH_ARGS: more flags for gpu_torch.py, split
if PYTHONUNBUFFERED=1 timeout $((budget + 120)) python3 bench/gpu_torch.py \
  --json="$out/torch.jsonl" --budget-s="$budget" ${LOCKSTEP_GPU_TORCH_ARGS:-} >"$out/torch.txt" 2>&1
then part "PyTorch peer" passed "budget ${budget} s"
else part "PyTorch peer" FAILED "$(tail -2 "$out/torch.txt" | tr '\n' ' ')"
fi

# 4. The summary.
rm -rf "$out"/ckpt-*
python3 bench/gpu_summary.py "$out" | tee "$out/summary.txt"
echo "bench/gpu.sh: $((SECONDS - started)) s; logs in $out"
! grep -q $'\tFAILED\t' "$parts"
