#include "trainer/model/onnx_export.h"

#include <fstream>

#include "trainer/layers/onnx_builder.h"

namespace lockstep::trainer {

absl::Status WriteOnnx(graph::Graph& g, const std::string& name, const std::string& path) {
  onnx::ModelProto model;
  layers::OnnxBuilder b(g);
  if (absl::Status s = b.Build(name, &model); !s.ok()) return s;
  std::string bytes;
  if (!model.SerializeToString(&bytes))
    return absl::InternalError("cannot serialise the ONNX model");
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  f.close();
  if (!f) return absl::InternalError("cannot write " + path);
  return absl::OkStatus();
}

}  // namespace lockstep::trainer
