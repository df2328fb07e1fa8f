#pragma once
// The layer registry: what the engine knows of each kind of layer, registered by the layer's
// family (one folder per family under trainer/layers/, listed in trainer/layers/CMakeLists.txt)
// and looked up by the engine's parts, so that no switch outside a family names its layers:
//   - Keras: the factory that builds a layer from a Keras class's config, by class name;
//   - GPU: whether a built layer runs on the GPU (known in every build, so the trainer places
//     a model before it starts a GPU) and, in CUDA builds, the device op it becomes there;
//   - ONNX: the exporter that writes its inference nodes.
// The GPU and ONNX entries are keyed by the layer's options type (graph::Layer::options_type):
// one entry serves every Keras class made from that record (Conv1D/2D/3D, Add/Multiply...).
// A layer a backend or exporter lacks is refused through the registry, naming the layer.
// See trainer/layers/README.md for how a family registers itself.
// Thread-safety: filled once at first use (Get), read-only after.

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <typeindex>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/graph/layer.h"
#include "trainer/keras/layer_factory.h"

namespace lockstep::trainer::layers {

class DeviceOp;     // gpu_op.h (CUDA builds)
struct GpuOpArgs;   // gpu_op.h
class OnnxBuilder;  // onnx_builder.h
struct OnnxArgs;    // onnx_builder.h

// What the GPU check of one node sees besides its layer.
struct GpuNode {
  size_t inputs = 1, outputs = 1;
  bool input_masked = false;  // its first input carries a mask
};

// A kind of layer on the GPU.
struct GpuEntry {
  // OK, or why this layer does not run there (GpuRefusal). Null: every layer of the kind runs.
  std::function<absl::Status(const graph::Layer&, const GpuNode&)> check;
  // The layer's device op (set in CUDA builds by the family's GPU source).
  std::function<absl::StatusOr<std::unique_ptr<DeviceOp>>(const GpuOpArgs&)> make;
  bool multiple_outputs = false;  // a node may have several outputs (a recurrent layer's states)
};

// A layer's inference nodes: its outputs' value names.
using OnnxExporter =
    std::function<absl::StatusOr<std::vector<std::string>>(OnnxBuilder&, const OnnxArgs&)>;

class Registry {
 public:
  // Every family's registrations (the list generated from trainer/layers/CMakeLists.txt).
  static const Registry& Get();

  keras::LayerFactories& keras() { return keras_; }
  const keras::LayerFactories& keras() const { return keras_; }

  // The GPU entry of layers made from an `Options` record: Supports from the family's layer
  // source (every build), GpuOp from its GPU source (CUDA builds).
  template <typename Options>
  void SupportsGpu(std::function<absl::Status(const graph::Layer&, const GpuNode&)> check = nullptr,
                   bool multiple_outputs = false) {
    GpuEntry& e = gpu_[typeid(Options)];
    e.check = std::move(check);
    e.multiple_outputs = multiple_outputs;
  }
  template <typename Options>
  void GpuOp(std::function<absl::StatusOr<std::unique_ptr<DeviceOp>>(const GpuOpArgs&)> make) {
    gpu_[typeid(Options)].make = std::move(make);
  }
  template <typename Options>
  void Onnx(OnnxExporter e) {
    onnx_[typeid(Options)] = std::move(e);
  }

  // The layer's GPU entry, or FailedPrecondition naming the layer (GpuRefusal).
  absl::StatusOr<const GpuEntry*> Gpu(const graph::Layer& l) const;
  // OK when the layer runs on the GPU as node `n`: it has an entry and the entry's check
  // passes.
  absl::Status GpuSupported(const graph::Layer& l, const GpuNode& n) const;
  // The layer's exporter, or Unimplemented naming the layer.
  absl::StatusOr<const OnnxExporter*> OnnxOf(const graph::Layer& l) const;
  // How many kinds of layer run on the GPU (tests check the GPU test models cover them all).
  size_t gpu_kinds() const { return gpu_.size(); }
  // Kinds with a check but no device op: empty in a CUDA build (a family forgot its GPU source).
  std::vector<std::string> GpuOpsMissing() const;

 private:
  keras::LayerFactories keras_;
  std::map<std::type_index, GpuEntry> gpu_;
  std::map<std::type_index, OnnxExporter> onnx_;
};

// FailedPrecondition "layer 'name' (Class) has no GPU implementation yet: why".
absl::Status GpuRefusal(const graph::Layer& l, const std::string& why);
// Unimplemented "layer 'name' (Class) has no ONNX export: why".
absl::Status OnnxRefusal(const graph::Layer& l, const std::string& why);

// Calls every family's registration (generated: families.cc).
void RegisterFamilies(Registry& r);

}  // namespace lockstep::trainer::layers
