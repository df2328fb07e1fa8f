#pragma once
// Layer: one operation of a graph model with explicit forward and backward passes, in Keras's
// terms: channels-last activations (NHWC, NWC, NDHWC), weights in Keras's layouts (Dense
// kernel [in, out], Conv2D kernel [kh, kw, in, out]), so a Keras weights file maps onto them
// one to one.
//
// A layer holds its weights; what one call needs between its forward and backward passes lives
// in that call's Saved record, which the graph keeps per node. So one layer may be called at
// several nodes (a shared layer): each call keeps its own activations, and every call's
// backward adds into the same weight gradients (the graph zeroes them before a step).
//
// Shapes at build time exclude the batch dimension, and -1 is a dimension the config leaves
// open (a text model's sequence length); tensors at run time carry the batch first.
// Thread-safety: one thread per layer object.

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <typeindex>
#include <typeinfo>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/graph/activation.h"
#include "trainer/tensor/tensor.h"

namespace lockstep::trainer::graph {

// The shape of a batch of `batch` examples of `example`'s shape.
inline Shape Batched(int64_t batch, const Shape& example) {
  Shape out{batch};
  out.insert(out.end(), example.begin(), example.end());
  return out;
}

// A weight as Keras names it ("kernel", "bias", "gamma", "moving_mean"...). Trainable weights
// have a gradient of their shape (the optimizer's and the all-reduce's); the others (moving
// statistics, adapted means) are state that checkpoints and exports keep.
struct Weight {
  std::string name;
  Tensor value;
  Tensor grad;  // empty unless trainable
  bool trainable = true;
  float l1 = 0, l2 = 0;  // a regularizer's penalty l1 * sum|w| + l2 * sum w^2 (trainable only)
};

// One call's record between forward and backward.
struct Saved {
  std::vector<Tensor> t;
  std::vector<int64_t> i;
  Tensor mask;  // an output mask the layer computed (Embedding with mask_zero)
};

// The inputs of one call: values and masks ([batch, time] of 0/1, or null).
struct Args {
  std::vector<const Tensor*> x;
  std::vector<const Tensor*> mask;
  const Tensor* mask0() const { return mask.empty() ? nullptr : mask[0]; }
};

struct CallContext {
  bool training = false;
  std::mt19937_64* rng = nullptr;  // Dropout and GaussianNoise draw from it
  // Where a layer reports input it cannot compute on (an Embedding id out of range): the
  // first report is kept, the layer computes something finite, and the caller fails the step.
  std::string* error = nullptr;
  void Report(const std::string& what) const {
    if (error != nullptr && error->empty()) *error = what;
  }
};

struct BuildContext {
  std::mt19937_64* rng = nullptr;  // initializers without a seed of their own draw from it
};

class Layer {
 public:
  Layer(std::string name, std::string class_name)
      : name_(std::move(name)), class_name_(std::move(class_name)) {}
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  const std::string& name() const { return name_; }
  const std::string& class_name() const { return class_name_; }

  // Checks the input shapes of one call, creates the weights at the first call, and returns
  // the output shapes. InvalidArgument names what does not fit.
  virtual absl::StatusOr<std::vector<Shape>> Build(const std::vector<Shape>& inputs,
                                                   const BuildContext& ctx) = 0;
  // Fills `out` (one tensor per output, as Build returned) from the inputs.
  virtual void Forward(const Args& in, std::vector<Tensor>* out, Saved* s,
                       const CallContext& ctx) = 0;
  // `dout[k]` is dL/d(output k) (zeros when that output feeds nothing). Fills din[i] with
  // dL/d(input i), sized as the input, for each i where need_din[i]; adds into the weights'
  // gradients.
  virtual void Backward(const Args& in, const std::vector<Tensor>& out,
                        const std::vector<const Tensor*>& dout, const std::vector<bool>& need_din,
                        std::vector<Tensor>* din, Saved* s) = 0;
  // The mask of the outputs after Forward: by default the first input's passes through. It
  // applies to the first `MaskedOutputs()` outputs (a recurrent layer's states get none).
  virtual const Tensor* OutputMask(const Args& in, const Saved& s) const {
    (void)s;
    return in.mask0();
  }
  virtual size_t MaskedOutputs() const { return 1; }
  // Inputs that carry no gradient (an Embedding's token ids).
  virtual bool Differentiable(size_t input) const {
    (void)input;
    return true;
  }

  // The type of the options record the layer was made from (HasOptions below), by which the
  // layer registry (trainer/layers/registry.h) finds the layer's backends and exporters; void
  // for a layer made from none.
  virtual std::type_index options_type() const { return typeid(void); }

  // How many token ids input `input` takes (an Embedding's table rows: the GPU keeps those ids
  // in fp32, synthetic data draws ids below it); 0 for an input of values.
  virtual int64_t IdBound(size_t input) const {
    (void)input;
    return 0;
  }
  // True when the layer reads input `input` in whatever dtype it has (a comparison against a
  // constant), so it neither needs ids nor values in the compute dtype.
  virtual bool ReadsAnyDtype(size_t input) const {
    (void)input;
    return false;
  }

  // The activation the layer ends in (Dense's, an Activation layer's), if any: a model whose
  // output ends in softmax or sigmoid hands probabilities to its loss.
  virtual const Activation* output_activation() const { return nullptr; }

  std::vector<Weight>& weights() { return weights_; }
  const std::vector<Weight>& weights() const { return weights_; }
  bool built() const { return built_; }
  // Frozen (Keras's trainable=false): the weights get no gradient.
  void set_trainable(bool t) { trainable_ = t; }
  bool trainable() const { return trainable_; }
  // An activity regularizer on the first output: l1 * sum|y| + l2 * sum y^2, divided by the
  // batch size when `per_example` (Keras 2 does; Keras 3 does not).
  struct ActivityPenalty {
    float l1 = 0, l2 = 0;
    bool per_example = false;
    bool any() const { return l1 != 0 || l2 != 0; }
  };
  void set_activity_penalty(ActivityPenalty p) { activity_ = p; }
  const ActivityPenalty& activity_penalty() const { return activity_; }

 protected:
  // Adds a weight (trainable only when the layer is): the value is `init`'s shape.
  Weight& AddWeight(std::string name, Tensor init, bool trainable = true);
  bool built_ = false;

 private:
  std::string name_, class_name_;
  std::vector<Weight> weights_;
  bool trainable_ = true;
  ActivityPenalty activity_;
};

// InvalidArgument "layer 'name' (Class): message".
absl::Status LayerError(const Layer& l, const std::string& message);

// A layer whose options its backends and exporters (the GPU's, ONNX's) read back as the typed
// record they were made from. The layer also overrides Layer::options_type with typeid(Options).
template <typename Options>
class HasOptions {
 public:
  virtual ~HasOptions() = default;
  virtual Options options() const = 0;
};
// The options of `l` when it was made from an `Options` record, else nullopt.
template <typename Options>
std::optional<Options> OptionsOf(const Layer& l) {
  if (l.options_type() != typeid(Options)) return std::nullopt;
  return dynamic_cast<const HasOptions<Options>&>(l).options();
}

}  // namespace lockstep::trainer::graph
