#!/usr/bin/env bash
# Training throughput of Keras model files in lockstep against the same models in PyTorch
# (Debian's python3-torch 1.13), both on the OpenMP build of OpenBLAS (the header, from
# blas_info.sh, names the CPU and each side's BLAS and threads), side by side: per model and thread count the programs alternate, three rounds, and the
# medians are compared. Batch 64, SGD with momentum 0.9 and lr 0.01, the same threads pinned
# with taskset (one thread on core 0, two on cores 0-1), 2,048 examples made before the clock
# starts, 20 warm-up steps left out (efficientnet_mha: 128 examples, 3 warm-up steps).
#
# The models (bench/models/make_models.py writes the two of this directory):
#   resnet20       bench/models/resnet20.json, ResNet-20 on 32x32x3 (272k weights)
#   bilstm         the corpus's 029-functional-bilstm-k215.json: Embedding 500x64 over 50 token
#                  ids, Bidirectional LSTM 64, Dense 1 sigmoid
#   cnn_attention  bench/models/cnn_attention.json: EfficientNet-style blocks on 64x64x3 under a
#                  MultiHeadAttention encoder block, all trainable (the corpus's 019 in small)
#   efficientnet_mha  the corpus's 019-cnn-transformer-mha.json itself: a frozen EfficientNet-B0
#                  on 224x224x3 (its BatchNormalization on the moving statistics, no weight
#                  gradients) under a trainable MultiHeadAttention block; about 4 s a step and
#                  13 GiB in lockstep, so a short run through keras_models_bench
# lockstep's figure is lockstep-trainer's "steady training samples/s" on --dataset=synthetic.
# The trainer's synthetic data are floats, which an Embedding refuses as token ids, so bilstm
# runs through bench/keras_models_bench instead: the same GraphModel step and SGD on integer
# ids. keras_models_bench also runs every model for the last two columns: samples per second
# of CPU time, lockstep's (keras_models_bench) and PyTorch's, and their ratio; on a machine
# other processes share, that ratio moves less than the wall-clock one.
#
# PyTorch (keras_torch_reference.py) builds each model from the same JSON file.
# Usage: bench/keras_vs_torch.sh [BUILD_DIR]   (default build/release)
#   THREADS="1 2" MODELS="resnet20 bilstm cnn_attention" ROUNDS=3 override the defaults;
#   KERAS_CONFIGS is the corpus directory (default ../shared/testdata/keras-configs).
set -euo pipefail
build=${1:-build/release}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
configs=${KERAS_CONFIGS:-$root/../shared/testdata/keras-configs}
trainer=$build/trainer/lockstep-trainer
bench=$build/bench/keras_models_bench
for b in "$trainer" "$bench"; do
  [[ -x $b ]] || { echo "missing $b (ninja -C $build lockstep-trainer keras_models_bench)" >&2; exit 2; }
done
/usr/bin/python3 -c "import torch" 2>/dev/null || {
  echo "needs python3-torch (apt-get install python3-torch libopenblas0-openmp)" >&2; exit 77; }
rounds=${ROUNDS:-3}
median() { sort -n | awk '{v[NR] = $1} END {print NR ? v[int((NR + 1) / 2)] : 0}'; }

"$here/blas_info.sh" "$trainer"
printf '%-16s %-7s %-8s %10s %10s %6s | %12s %12s %6s\n' model threads via lockstep \
  torch ratio "lockstep/cpu" "torch/cpu" ratio
for model in ${MODELS:-resnet20 bilstm cnn_attention efficientnet_mha}; do
  warmup=20 examples=2048
  case $model in
    resnet20) file=$here/models/resnet20.json steps=50 driver=trainer ;;
    bilstm) file=$configs/029-functional-bilstm-k215.json steps=220 driver=bench ;;
    cnn_attention) file=$here/models/cnn_attention.json steps=50 driver=trainer ;;
    efficientnet_mha)
      file=$configs/019-cnn-transformer-mha.json steps=11 warmup=3 examples=128 driver=bench ;;
    *) echo "unknown model $model" >&2; exit 2 ;;
  esac
  for threads in ${THREADS:-1 2}; do
    cpus=$([[ $threads == 1 ]] && echo 0 || echo "0-$((threads - 1))")
    ours=(); bench_wall=(); bench_cpu=(); torch_wall=(); torch_cpu=()
    for ((round = 1; round <= rounds; ++round)); do
      if [[ $driver == trainer ]]; then
        ours+=("$(taskset -c "$cpus" "$trainer" --model="$file" --dataset=synthetic \
          --synthetic-size=$examples --optimizer=sgd --momentum=0.9 --learning-rate=0.01 \
          --lr-schedule=constant --batch-size=64 --steps=$steps --threads="$threads" \
          --metrics-port=0 2>/dev/null | sed -n 's/^steady training samples\/s: //p')")
      fi
      read -r w c < <(taskset -c "$cpus" "$bench" "$file" --threads="$threads" --steps=$steps \
        --warmup=$warmup --examples=$examples)
      bench_wall+=("$w"); bench_cpu+=("$c")
      [[ $driver == bench ]] && ours+=("$w")
      read -r w c < <(LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp \
        taskset -c "$cpus" /usr/bin/python3 "$here/keras_torch_reference.py" "$file" "$threads" \
        $steps $warmup $examples)
      torch_wall+=("$w"); torch_cpu+=("$c")
    done
    a=$(printf '%s\n' "${ours[@]}" | median)
    b=$(printf '%s\n' "${torch_wall[@]}" | median)
    ac=$(printf '%s\n' "${bench_cpu[@]}" | median)
    bc=$(printf '%s\n' "${torch_cpu[@]}" | median)
    printf '%-16s %-7s %-8s %10.1f %10.1f %6.2f | %12.1f %12.1f %6.2f\n' "$model" "$threads" \
      "$driver" "$a" "$b" "$(echo "$a / $b" | bc -l)" "$ac" "$bc" "$(echo "$ac / $bc" | bc -l)"
  done
done
