#include "trainer/layers/registry.h"

namespace lockstep::trainer::layers {

const Registry& Registry::Get() {
  static const Registry* all = [] {
    auto* r = new Registry;
    RegisterFamilies(*r);
    return r;
  }();
  return *all;
}

absl::Status GpuRefusal(const graph::Layer& l, const std::string& why) {
  return absl::FailedPreconditionError("layer '" + l.name() + "' (" + l.class_name() +
                                       ") has no GPU implementation yet: " + why);
}

absl::Status OnnxRefusal(const graph::Layer& l, const std::string& why) {
  return absl::UnimplementedError("layer '" + l.name() + "' (" + l.class_name() +
                                  ") has no ONNX export: " + why);
}

absl::StatusOr<const GpuEntry*> Registry::Gpu(const graph::Layer& l) const {
  auto it = gpu_.find(l.options_type());
  if (it == gpu_.end()) return GpuRefusal(l, "its kernels run on the CPU only in this version");
  return &it->second;
}

absl::Status Registry::GpuSupported(const graph::Layer& l, const GpuNode& n) const {
  absl::StatusOr<const GpuEntry*> e = Gpu(l);
  if (!e.ok()) return e.status();
  if (n.outputs != 1 && !(*e)->multiple_outputs) {
    return GpuRefusal(l, "it has " + std::to_string(n.outputs) + " outputs");
  }
  return (*e)->check ? (*e)->check(l, n) : absl::OkStatus();
}

absl::StatusOr<const OnnxExporter*> Registry::OnnxOf(const graph::Layer& l) const {
  auto it = onnx_.find(l.options_type());
  if (it == onnx_.end()) return OnnxRefusal(l, "no ONNX form of this layer class yet");
  return &it->second;
}

std::vector<std::string> Registry::GpuOpsMissing() const {
  std::vector<std::string> out;
  for (const auto& [type, e] : gpu_) {
    if (!e.make) out.push_back(type.name());
  }
  return out;
}

}  // namespace lockstep::trainer::layers
