#include "trainer/model/keras_io.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <functional>

#include "trainer/keras/weights_file.h"
#include "trainer/model/graph_model.h"
#include "trainer/model/onnx_export.h"

namespace lockstep::trainer {
namespace {

absl::StatusOr<GraphModel*> KerasForm(Model& model, const std::string& what) {
  auto* g = dynamic_cast<GraphModel*>(&model);
  if (g == nullptr) {
    return absl::FailedPreconditionError(
        what +
        " needs a model given as a Keras model file (--model=FILE.json or .keras); the "
        "built-in models have none (examples/models/ holds their Keras configs)");
  }
  return g;
}

// Writes through `write` to DIR/.NAME.tmp.PID, then renames it to DIR/NAME.
absl::Status WriteAtomically(const std::filesystem::path& dir, const std::string& name,
                             const std::function<absl::Status(const std::string&)>& write) {
  const std::string tmp = (dir / ("." + name + ".tmp." + std::to_string(getpid()))).string();
  if (absl::Status s = write(tmp); !s.ok()) {
    std::remove(tmp.c_str());
    return s;
  }
  std::error_code ec;
  std::filesystem::rename(tmp, dir / name, ec);
  if (ec) {
    std::remove(tmp.c_str());
    return absl::InternalError("cannot rename " + tmp + " to " + (dir / name).string() + ": " +
                               ec.message());
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ExportedModel> ExportModel(Model& model, const std::string& dir) {
  absl::StatusOr<GraphModel*> g = KerasForm(model, "the model export (--model-dir)");
  if (!g.ok()) return g.status();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return absl::InternalError("cannot create the model directory " + dir + ": " + ec.message());
  const std::filesystem::path d(dir);
  const keras::KerasModel& m = (*g)->keras();
  ExportedModel out;
  auto keras_file = [&](const std::string& name, auto write) -> absl::Status {
    if (absl::Status s =
            WriteAtomically(d, name, [&](const std::string& p) { return write(m, p); });
        !s.ok()) {
      return s;
    }
    out.files.push_back((d / name).string());
    return absl::OkStatus();
  };
  if (absl::Status s = keras_file("model.keras", keras::WriteKerasArchive); !s.ok()) return s;
  if (absl::Status s = keras_file("model.h5", keras::WriteKeras2Weights); !s.ok()) return s;
  absl::Status onnx = WriteAtomically(
      d, "model.onnx", [&](const std::string& p) { return WriteOnnx(*m.graph, m.name, p); });
  if (absl::IsUnimplemented(onnx)) {
    out.onnx_skipped = std::string(onnx.message());
  } else if (!onnx.ok()) {
    return onnx;
  } else {
    out.files.push_back((d / "model.onnx").string());
  }
  return out;
}

absl::Status LoadInitialWeights(Model& model, const std::string& path) {
  absl::StatusOr<GraphModel*> g = KerasForm(model, "--initial-weights");
  if (!g.ok()) return g.status();
  return keras::ReadKerasWeights(path, &(*g)->keras());
}

}  // namespace lockstep::trainer
