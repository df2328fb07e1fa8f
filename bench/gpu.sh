#!/usr/bin/env bash
# Everything that needs a GPU, in one run on a GPU machine (the lent device machine, or a GPU
# node): builds with CUDA, runs the gpu-labelled tests, the GPU benchmark, a cnn training run
# on Fashion-MNIST (or synthetic data when the IDX files are absent) with the built-in model and
# with its Keras file on the device graph, and MultiWorkerMirrored
# over NCCL with two processes sharing GPU 0. Logs go to $OUT (or ./gpu-out).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-out}
mkdir -p "$out"
nvidia-smi -L 2>&1 | tee "$out/gpu.txt"
cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DLOCKSTEP_CUDA=ON \
  -DLOCKSTEP_CUDA_ARCHITECTURES=90 >/dev/null || exit 1
cmake --build build/gpu -j "$(nproc)" --target lockstep-trainer gpu_bench trainer_gpu_test \
  trainer_graph_gpu_test trainer_gpu_training_test trainer_comm_test 2>&1 | tail -3
echo "== gpu tests"
ctest --test-dir build/gpu -L gpu --output-on-failure 2>&1 | tee "$out/gpu-tests.txt" | tail -15
echo "== benchmark"
./build/gpu/bench/gpu_bench 2>&1 | tee "$out/gpu-bench.txt"
data=(--dataset=fashion-mnist)
[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte ] || data=(--dataset=synthetic --synthetic-size=60000)
echo "== cnn, 5 epochs, mixed_bfloat16 (${data[*]})"
./build/gpu/trainer/lockstep-trainer --model=cnn --device=gpu --precision=mixed_bfloat16 \
  --epochs=5 --metrics-port=0 "${data[@]}" 2>&1 | tee "$out/cnn.txt" | tail -3
echo "== examples/models/cnn.json (the same cnn as a Keras file), 5 epochs, mixed_bfloat16"
./build/gpu/trainer/lockstep-trainer --model=examples/models/cnn.json --device=gpu \
  --precision=mixed_bfloat16 --epochs=5 --metrics-port=0 "${data[@]}" 2>&1 |
  tee "$out/cnn-json.txt" | tail -3
echo "== MultiWorkerMirrored over NCCL, two processes on GPU 0"
cluster='{"chief":["127.0.0.1:23456"],"worker":["127.0.0.1:23457"]}'
for task in chief:0 worker:0; do
  TF_CONFIG="{\"cluster\":$cluster,\"task\":{\"type\":\"${task%:*}\",\"index\":${task#*:}}}" \
  LOCKSTEP_STRATEGY=MultiWorkerMirrored LOCKSTEP_JOB_TOKEN=bench \
    ./build/gpu/trainer/lockstep-trainer --model=mlp --device=gpu --collective=nccl --steps=200 \
    --metrics-port=0 --dataset=synthetic >"$out/mwm-${task%:*}.txt" 2>&1 &
done
wait
tail -2 "$out"/mwm-*.txt
