#pragma once
// DeviceGraph: a Keras model's graph (model/graph_model.h) on one GPU: the graph's one executor
// (graph/executor.h, the traversal the CPU runs too) over the GPU backend, where each node of
// the host graph is the device op its layer's family registered (layers/registry.h,
// layers/gpu_op.h), made from the layer's options and run by CUDA kernels that have the CPU
// layers' semantics.
// The weights live in the flat buffers of device_params.h (the trainable ones, then the kept
// ones: moving statistics, a frozen layer's weights), mirrored from the host graph, so a seed
// gives the same initial network on either device. Activations are stored in the compute
// dtype (a mixed policy's fp16 or bf16; token ids stay fp32); every sum is fp32.
//
// The executor runs the nodes forward in order and backward in reverse, and a tensor read by
// several nodes gets the sum of their gradients, as on the CPU. A layer called at several nodes (a
// shared layer) has one set of weights whose gradient sums its calls'. Dropout and GaussianNoise
// draw from counter-based streams keyed by (seed, step, node), so the backward pass regenerates the
// forward pass's mask.
//
// Masks flow as on the CPU: Embedding mask_zero, Masking and a mask= argument make one, most
// layers pass their first input's on, and the recurrent layers, GlobalAveragePooling1D and
// MultiHeadAttention honour it.
//
// A recurrent layer's initial states are inputs of its node and its final states (return_state)
// outputs; a node's backward pass takes the gradients of all its outputs.
//
// Not on the GPU yet (gpu_support.h names the first such layer; the trainer then runs the model
// on the CPU, or refuses --device gpu): a recurrent layer's (or Bidirectional's) dropout; a
// Bidirectional's initial states, return_state or merge_mode None; BatchNormalization given a
// mask; the augmentation layers; a ReLU layer with a threshold, or with both a maximum and a
// negative slope. Weight and activity regularizers add their penalties and gradients.
// Thread-safety: one thread (the replica's), which has activated the context.

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/graph/graph.h"
#include "trainer/kernels/cuda/loss.h"
#include "trainer/model/device_params.h"
#include "trainer/model/gpu_support.h"
#include "trainer/model/graph_model.h"

namespace lockstep::trainer {

class GpuBackend;  // device_graph.cc

class DeviceGraph final {
 public:
  static absl::StatusOr<std::unique_ptr<DeviceGraph>> Create(cuda::GpuContext* ctx,
                                                             GraphModel& host, cuda::DType compute,
                                                             uint64_t seed);
  ~DeviceGraph();

  // Forward, loss and backward on one host batch; the gradients (multiplied by `loss_scale`)
  // land in weights().grads(). The loss and count come back to the host. DataLoss names input
  // the model cannot compute on (a token id outside an Embedding's table).
  absl::StatusOr<cuda::LossResult> TrainStep(const Tensor& x, const std::vector<int32_t>& labels,
                                             float loss_scale);
  absl::StatusOr<cuda::LossResult> Evaluate(const Tensor& x, const std::vector<int32_t>& labels);
  // Called after weights().Load() (a restored checkpoint): refreshes what the layers derive
  // from their weights.
  absl::Status Reloaded();
  DeviceParams& weights() { return weights_; }

 private:
  DeviceGraph() = default;
  absl::StatusOr<cuda::LossResult> Run(const Tensor& x, const std::vector<int32_t>& labels,
                                       bool training, float loss_scale);
  // The weight regularizers' penalty and the step's activity penalties added to `loss`, and
  // (when `gradients`) the weight regularizers' gradient, times the loss scale, to the weights'
  // gradients.
  absl::Status AddPenalties(bool gradients, float loss_scale, double* loss);
  // DataLoss when an op counted input it cannot compute on (an Embedding's ids).
  absl::Status CheckInput();

  cuda::GpuContext* ctx_ = nullptr;
  GraphModel* host_ = nullptr;
  DeviceParams weights_;
  std::unique_ptr<GpuBackend> backend_;  // the nodes' ops, per layer its weights on the device
  std::unique_ptr<graph::Executor<GpuBackend>> executor_;
  std::vector<cuda::DeviceTensor> inputs_;  // the graph's inputs, uploaded
  std::vector<cuda::DType> input_dtypes_;
  // The trained weights with a regularizer (their place in the flat buffers); each one's
  // penalty of the last step, then each activity regularizer's.
  struct Penalty {
    size_t weight;
    int64_t size;
    float l1, l2;
  };
  std::vector<Penalty> penalties_;
  cuda::DeviceTensor penalty_values_;
  cuda::DeviceTensor targets_;
  Tensor host_targets_;
};

}  // namespace lockstep::trainer
