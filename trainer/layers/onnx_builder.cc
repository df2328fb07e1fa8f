#include "trainer/layers/onnx_builder.h"

#include "trainer/layers/registry.h"

namespace lockstep::trainer::layers {
namespace {

constexpr int64_t kOpset = 17;
constexpr int64_t kIrVersion = 8;

}  // namespace

Tensor Permute(const Tensor& t, const std::vector<size_t>& perm) {
  const Shape& in = t.shape();
  const size_t r = in.size();
  Shape out(r);
  for (size_t j = 0; j < r; ++j) out[j] = in[perm[j]];
  std::vector<int64_t> in_stride(r, 1);
  for (size_t k = r - 1; k-- > 0;) in_stride[k] = in_stride[k + 1] * in[k + 1];
  Tensor o(out);
  std::vector<int64_t> idx(r, 0);
  for (int64_t n = 0; n < o.size(); ++n) {
    int64_t src = 0;
    for (size_t j = 0; j < r; ++j) src += idx[j] * in_stride[perm[j]];
    o[n] = t[src];
    for (size_t j = r; j-- > 0;) {
      if (++idx[j] < out[j]) break;
      idx[j] = 0;
    }
  }
  return o;
}

absl::Status OnnxBuilder::Build(const std::string& name, onnx::ModelProto* model) {
  model->set_ir_version(kIrVersion);
  model->set_producer_name("lockstep-trainer");
  model->set_doc_string("A Keras model trained by Lockstep, as its inference graph.");
  onnx::OperatorSetIdProto* opset = model->add_opset_import();
  opset->set_domain("");
  opset->set_version(kOpset);
  graph_ = model->mutable_graph();
  graph_->set_name(name.empty() ? "model" : name);
  values_.assign(static_cast<size_t>(TensorCount()), "");
  for (size_t i = 0; i < g_.num_inputs(); ++i) {
    const int in = g_.inputs()[i];
    const std::string n = InputName(i);
    values_[static_cast<size_t>(in)] = n;
    Declare(graph_->add_input(), n, g_.shape(in));
  }
  for (size_t i = 0; i < g_.num_nodes(); ++i) {
    const graph::NodeSpec& n = g_.node(i);
    std::vector<std::string> ins;
    for (int t : n.inputs) ins.push_back(values_[static_cast<size_t>(t)]);
    absl::StatusOr<std::vector<std::string>> outs =
        Export(*n.layer, OnnxWeights{n.layer, ""}, ins, n.inputs, n.outputs);
    if (!outs.ok()) return outs.status();
    if (outs->size() != n.outputs.size()) {
      return absl::InternalError("layer '" + n.layer->name() + "': exported " +
                                 std::to_string(outs->size()) + " outputs of " +
                                 std::to_string(n.outputs.size()));
    }
    for (size_t k = 0; k < outs->size(); ++k) {
      values_[static_cast<size_t>(n.outputs[k])] = (*outs)[k];
    }
  }
  for (size_t k = 0; k < g_.outputs().size(); ++k) {
    const int out = g_.outputs()[k];
    const std::string n = OutputName(k);
    Op("Identity", {values_[static_cast<size_t>(out)]}, {}, n);
    Declare(graph_->add_output(), n, g_.shape(out));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> OnnxBuilder::Export(const graph::Layer& l,
                                                             const OnnxWeights& w,
                                                             const std::vector<std::string>& in,
                                                             const std::vector<int>& in_t,
                                                             const std::vector<int>& out_t) {
  absl::StatusOr<const OnnxExporter*> e = Registry::Get().OnnxOf(l);
  if (!e.ok()) return e.status();
  return (**e)(*this, OnnxArgs{.layer = l, .weights = w, .in = in, .in_t = in_t, .out_t = out_t});
}

// A TimeDistributed's inner layer on one step's shapes: exported through a scratch tensor
// numbering so its shape lookups see the step's shapes.
absl::StatusOr<std::vector<std::string>> OnnxBuilder::InnerStep(const graph::Layer& inner,
                                                                const OnnxWeights& w,
                                                                const std::string& x,
                                                                const Shape& in, const Shape& out) {
  step_shapes_ = {in, out};
  absl::StatusOr<std::vector<std::string>> y = Export(inner, w, {x}, {-1}, {-2});
  step_shapes_.clear();
  return y;
}

}  // namespace lockstep::trainer::layers
