#include "trainer/testing/onnx_check.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "trainer/model/onnx_export.h"
#include "trainer/tensor/random.h"
#include "trainer/testing/python_peer.h"

namespace lockstep::trainer::testing {
namespace {

// A float32 array as NumPy's .npy (format 1.0).
void WriteNpy(const std::string& path, const Tensor& t) {
  std::string shape = "(";
  for (int64_t d : t.shape()) shape += std::to_string(d) + ", ";
  shape += ")";
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::ofstream f(path, std::ios::binary);
  f.write("\x93NUMPY\x01\x00", 8);
  const auto n = static_cast<uint16_t>(header.size());
  f.put(static_cast<char>(n & 0xff));
  f.put(static_cast<char>(n >> 8));
  f << header;
  f.write(reinterpret_cast<const char*>(t.data()),
          static_cast<std::streamsize>(t.size() * sizeof(float)));
}

}  // namespace

std::string CheckOnnxExport(graph::Graph& g, const std::string& path, uint64_t seed) {
  std::mt19937_64 rng(seed);
  UniformDraw<float> u(-1, 1), pos(0.5f, 2.0f);
  for (auto& [layer, w] : g.AllWeights()) {
    if (w->name == "moving_mean" || w->name == "mean") {
      for (float& v : w->value.values()) v = 0.3f * u(rng);
    } else if (w->name == "moving_variance" || w->name == "variance") {
      for (float& v : w->value.values()) v = pos(rng);
    }
  }
  // A batch of 3 for each input: token ids where it feeds an Embedding or a comparison, else
  // values in [-1, 1); an axis the model leaves open gets length 5.
  std::vector<Tensor> xs;
  for (size_t i = 0; i < g.num_inputs(); ++i) {
    Shape s{3};
    for (int64_t d : g.shape(g.inputs()[i])) s.push_back(d > 0 ? d : 5);
    int64_t vocab = 0;
    for (const graph::Layer* l : g.Consumers(g.inputs()[i])) {
      if (l->IdBound(0) > 0) vocab = l->IdBound(0);
    }
    Tensor x(s);
    std::uniform_int_distribution<int64_t> ids(
        0, std::min<int64_t>(std::max<int64_t>(vocab, 1), 40) - 1);
    for (float& v : x.values()) v = vocab > 0 ? static_cast<float>(ids(rng)) : u(rng);
    xs.push_back(std::move(x));
  }
  std::vector<const Tensor*> xp;
  for (const Tensor& x : xs) xp.push_back(&x);
  std::string error;
  g.Forward(xp, graph::CallContext{false, &rng, &error});
  if (!error.empty()) return "forward: " + error;

  absl::Status wrote = WriteOnnx(g, "model", path);
  if (absl::IsUnimplemented(wrote)) return "skip: refused: " + std::string(wrote.message());
  if (!wrote.ok()) return "export: " + std::string(wrote.message());
  std::vector<std::string> args{"run", path};
  for (size_t i = 0; i < xs.size(); ++i) {
    args.push_back(path + ".input" + std::to_string(i) + ".npy");
    WriteNpy(args.back(), xs[i]);
  }
  absl::StatusOr<nlohmann::json> r = RunPythonPeer("trainer/model/testdata/onnx_peer.py", args);
  if (absl::IsUnavailable(r.status())) return "skip: " + std::string(r.status().message());
  if (!r.ok()) return "peer: " + std::string(r.status().message());
  if ((*r)["opset"] != 17) return "opset " + (*r)["opset"].dump();
  const nlohmann::json& outs = (*r)["outputs"];
  if (outs.size() != g.outputs().size()) return "outputs: " + std::to_string(outs.size());
  for (size_t k = 0; k < outs.size(); ++k) {
    const Tensor& want = g.output(k);
    const nlohmann::json& o = outs[k];
    if (o["shape"].get<std::vector<int64_t>>() != want.shape()) {
      return absl::StrCat("output ", k, " shape ", o["shape"].dump(), ", the engine's has ",
                          want.size(), " values");
    }
    for (const char* who : {"values", "onnxruntime"}) {
      if (!o.contains(who)) continue;
      const std::vector<double> got = o[who].get<std::vector<double>>();
      double worst = 0;
      int64_t at = 0;
      for (int64_t i = 0; i < want.size(); ++i) {
        const double d =
            std::abs(got[static_cast<size_t>(i)] - want[i]) / (1.0 + std::abs(want[i]));
        if (d > worst) {
          worst = d;
          at = i;
        }
      }
      if (worst > 2e-4) {
        return absl::StrCat("output ", k, " (", who, ") differs from the engine by ", worst, " at ",
                            at, ": ", got[static_cast<size_t>(at)], " vs ", want[at], " (ops ",
                            (*r)["ops"].dump(), ")");
      }
    }
  }
  return "";
}

}  // namespace lockstep::trainer::testing
