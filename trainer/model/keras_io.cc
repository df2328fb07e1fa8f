#include "trainer/model/keras_io.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "trainer/keras/weights_file.h"
#include "trainer/model/graph_model.h"

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
                             absl::Status (*write)(const keras::KerasModel&, const std::string&),
                             const keras::KerasModel& m) {
  const std::string tmp = (dir / ("." + name + ".tmp." + std::to_string(getpid()))).string();
  if (absl::Status s = write(m, tmp); !s.ok()) {
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

absl::StatusOr<std::vector<std::string>> ExportModel(Model& model, const std::string& dir) {
  absl::StatusOr<GraphModel*> g = KerasForm(model, "the model export (--model-dir)");
  if (!g.ok()) return g.status();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return absl::InternalError("cannot create the model directory " + dir + ": " + ec.message());
  const std::filesystem::path d(dir);
  const keras::KerasModel& m = (*g)->keras();
  if (absl::Status s = WriteAtomically(d, "model.keras", keras::WriteKerasArchive, m); !s.ok()) {
    return s;
  }
  if (absl::Status s = WriteAtomically(d, "model.h5", keras::WriteKeras2Weights, m); !s.ok()) {
    return s;
  }
  return std::vector<std::string>{(d / "model.keras").string(), (d / "model.h5").string()};
}

absl::Status LoadInitialWeights(Model& model, const std::string& path) {
  absl::StatusOr<GraphModel*> g = KerasForm(model, "--initial-weights");
  if (!g.ok()) return g.status();
  return keras::ReadKerasWeights(path, &(*g)->keras());
}

}  // namespace lockstep::trainer
