#pragma once
// Graph: a directed acyclic graph of layer calls with explicit forward and backward passes, as
// a Keras functional model is. Tensors are numbered: the graph's inputs, then each call's
// outputs. A node calls one layer on some tensors; a layer may be called at several nodes (a
// shared layer: one set of weights, the calls' gradients summed), and a tensor may feed several
// nodes (its gradient is the sum of theirs). Nodes run in the order they were added, which
// Call's contract makes topological.
//
// Weights are listed in the order their layers were first called: Params()/Grads() are the
// trainable ones (what the optimizer, checkpoints and all-reduce buckets walk), State() the
// others (moving statistics). Backward reports, through GradsReady, each layer's range of
// Params() as soon as its last gradient contribution is in, last layer first.
// Thread-safety: one thread per graph.

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/graph/executor.h"
#include "trainer/graph/layer.h"

namespace lockstep::trainer::graph {

class Graph {
 public:
  Graph();
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // A model input of per-example `shape` (-1: any size); returns its tensor.
  int AddInput(std::string name, Shape shape);
  // Takes ownership; the returned pointer lives as long as the graph.
  Layer* AddLayer(std::unique_ptr<Layer> layer);
  // Calls `layer` (added before) on existing tensors; returns its output tensors. `training`,
  // when set, fixes this call's mode (a Keras 2 call with an explicit training argument).
  absl::StatusOr<std::vector<int>> Call(Layer* layer, const std::vector<int>& inputs,
                                        const BuildContext& ctx,
                                        std::optional<bool> training = std::nullopt);
  void SetOutputs(std::vector<int> outputs) { outputs_ = std::move(outputs); }

  size_t num_inputs() const { return inputs_.size(); }
  size_t num_tensors() const { return shapes_.size(); }
  const std::vector<int>& inputs() const { return inputs_; }
  const std::vector<int>& outputs() const { return outputs_; }
  const Shape& shape(int tensor) const { return shapes_.at(static_cast<size_t>(tensor)); }
  const std::string& input_name(size_t i) const { return input_names_.at(i); }
  // The layer that made an output tensor (null for a graph input).
  const Layer* producer(int tensor) const;
  // The node that made a tensor (-1 for a graph input).
  int producer_node(int tensor) const { return producer_.at(static_cast<size_t>(tensor)); }
  // The layers that take a tensor as an input (a graph input feeding an Embedding holds ids).
  std::vector<const Layer*> Consumers(int tensor) const;
  const std::vector<std::unique_ptr<Layer>>& layers() const { return layers_; }
  size_t num_nodes() const { return nodes_.size(); }
  // Node i as it was called (executor.h's NodeSpec): its layer, its input and output tensors,
  // which inputs take a gradient, its fixed training mode.
  using NodeSpec = graph::NodeSpec;
  const NodeSpec& node(size_t i) const { return nodes_.at(i); }
  const std::vector<NodeSpec>& nodes() const { return nodes_; }

  // Runs every node on the CPU (the executor over the CPU backend: the layers' own passes) on
  // batch tensors (batch first) for the graph's inputs, which must stay alive and unchanged
  // until Backward has run.
  void Forward(const std::vector<const Tensor*>& inputs, const CallContext& ctx);
  const Tensor& output(size_t k) const { return *value(outputs_[k]); }
  const Tensor* output_mask(size_t k) const;
  const Tensor* value(int tensor) const;

  // dL/d(output k) for each output (null: that output has no loss). Zeroes and fills Grads().
  using GradsReady = std::function<void(size_t first, size_t count)>;
  void Backward(const std::vector<const Tensor*>& doutputs, const GradsReady& ready = nullptr);

  // The weight regularizers' penalty at the current weights, plus the activity regularizers'
  // on the last Forward's outputs (Backward adds both gradients).
  double RegularizationLoss();

  std::vector<Tensor*> Params();
  std::vector<Tensor*> Grads();
  std::vector<Weight*> State();
  // Every weight, trainable or not, in layer order: (layer, weight) pairs.
  std::vector<std::pair<Layer*, Weight*>> AllWeights();
  int64_t NumParams();

 private:
  struct CpuRun;  // the CPU backend and its executor (graph.cc), made at the first Forward
  CpuRun& Run();

  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<Layer*> call_order_;  // layers by first call
  std::vector<NodeSpec> nodes_;
  std::vector<int> inputs_, outputs_;
  std::vector<std::string> input_names_;
  std::vector<Shape> shapes_;
  std::vector<int> producer_;  // tensor -> node (-1 for inputs)
  std::vector<bool> requires_grad_;
  std::unique_ptr<CpuRun> run_;  // reset by every change of the graph
};

}  // namespace lockstep::trainer::graph
