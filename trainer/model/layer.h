#pragma once
// Layers with explicit forward and backward passes. A layer keeps what its backward pass needs
// from the last forward pass (its input, a mask, arg-maxes), so Forward and Backward alternate
// on one batch at a time. Parameters and their gradients are exposed as parallel lists so an
// optimizer, a checkpoint or an all-reduce can walk them without knowing the layer.
// Thread-safety: one thread per layer object.

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "trainer/kernels/cpu/conv2d.h"
#include "trainer/tensor/tensor.h"

namespace lockstep::trainer {

class Layer {
 public:
  virtual ~Layer() = default;
  virtual std::string name() const = 0;
  // `training` turns Dropout on.
  virtual const Tensor& Forward(const Tensor& x, bool training) = 0;
  // Returns dL/dx for the last Forward's input; fills the parameter gradients.
  // `need_input_grad` false lets the first layer skip dx.
  virtual const Tensor& Backward(const Tensor& dy, bool need_input_grad = true) = 0;
  virtual std::vector<Tensor*> Params() { return {}; }
  virtual std::vector<Tensor*> Grads() { return {}; }
  virtual Shape OutputShape(const Shape& input) const = 0;
  // The hyper-parameters another implementation of the layer (the GPU model) needs.
  struct Config {
    int64_t pad = 0;        // Conv2D
    int64_t pool_size = 0;  // MaxPool2D
  };
  virtual Config config() const { return {}; }
};

// Dense: y = x W^T + b; W [out, in] Glorot-uniform, b zero.
std::unique_ptr<Layer> MakeDense(int64_t in, int64_t out, std::mt19937* rng);
// Conv2D: stride 1, `pad` zeros; W [k, c, r, r] He-uniform, b zero.
std::unique_ptr<Layer> MakeConv2D(int64_t in_channels, int64_t out_channels, int64_t kernel,
                                  int64_t pad, std::mt19937* rng);
std::unique_ptr<Layer> MakeMaxPool2D(int64_t size);
std::unique_ptr<Layer> MakeReLU();
std::unique_ptr<Layer> MakeFlatten();
// Inverted dropout: kept units are scaled by 1/(1-rate) in training; identity otherwise.
std::unique_ptr<Layer> MakeDropout(float rate, uint64_t seed);

}  // namespace lockstep::trainer
