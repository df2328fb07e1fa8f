// Embedding: rows of a table by integer id (layers/core/core.h).
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "trainer/layers/core/core.h"

namespace lockstep::trainer::graph {
namespace {

// An id as Python prints a float ("12.0", "2.5", "nan").
std::string FormatId(float v) {
  char buf[64];
  if (std::isfinite(v) && v == std::floor(v) && std::abs(v) < 1e15f) {
    std::snprintf(buf, sizeof buf, "%.1f", static_cast<double>(v));
  } else {
    std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
  }
  return buf;
}

// The index of flat element `i` of a tensor of `shape`, as "[b, t]".
std::string Position(const Shape& shape, int64_t i) {
  std::vector<int64_t> idx(shape.size());
  for (size_t a = shape.size(); a-- > 0;) {
    idx[a] = i % shape[a];
    i /= shape[a];
  }
  std::string out = "[";
  for (size_t a = 0; a < idx.size(); ++a) out += (a ? ", " : "") + std::to_string(idx[a]);
  return out + "]";
}

class Embedding final : public Layer, public HasOptions<EmbeddingOptions> {
 public:
  EmbeddingOptions options() const override { return o_; }
  std::type_index options_type() const override { return typeid(EmbeddingOptions); }
  Embedding(std::string name, EmbeddingOptions o)
      : Layer(std::move(name), "Embedding"), o_(std::move(o)) {}

  absl::StatusOr<std::vector<Shape>> Build(const std::vector<Shape>& in,
                                           const BuildContext& ctx) override {
    if (in.size() != 1) return LayerError(*this, "takes one input (the ids)");
    const Shape& s = in[0];
    if (!o_.input_length.empty()) {
      bool ok = o_.input_length.size() == s.size();
      for (size_t a = 0; ok && a < s.size(); ++a) {
        ok = o_.input_length[a] <= 0 || s[a] <= 0 || o_.input_length[a] == s[a];
      }
      if (!ok) {
        return LayerError(*this, "input_length " + ShapeString(o_.input_length) +
                                     " does not match its input " + ShapeString(s));
      }
    }
    if (!built_) {
      Weight& w = AddWeight("embeddings", Initialize(o_.embeddings_initializer,
                                                     {o_.input_dim, o_.output_dim}, ctx.rng));
      w.l1 = o_.l1;
      w.l2 = o_.l2;
      built_ = true;
    }
    Shape out = s;
    out.push_back(o_.output_dim);
    return std::vector<Shape>{out};
  }

  void Forward(const Args& in, std::vector<Tensor>* out, Saved* s,
               const CallContext& ctx) override {
    const Tensor& x = *in.x[0];
    const int64_t d = o_.output_dim;
    Shape shape = x.shape();
    shape.push_back(d);
    Tensor& y = (*out)[0];
    y.Resize(shape);
    const float* table = weights()[0].value.data();
    for (int64_t i = 0; i < x.size(); ++i) {
      const int64_t id = Id(x[i]);
      float* row = y.data() + i * d;
      if (id >= 0) {
        std::copy_n(table + id * d, d, row);
        continue;
      }
      std::fill_n(row, d, 0.0f);
      const float v = x[i];
      const bool integral = std::isfinite(v) && v == std::floor(v);
      ctx.Report("layer '" + name() + "' (Embedding): id " + FormatId(v) + " at position " +
                 Position(x.shape(), i) +
                 (integral ? " is outside [0, " : " is not an integer in [0, ") +
                 std::to_string(o_.input_dim) + ")");
    }
    if (o_.mask_zero) {
      s->mask.Resize(x.shape());
      for (int64_t i = 0; i < x.size(); ++i) s->mask[i] = x[i] != 0.0f ? 1.0f : 0.0f;
    }
  }

  void Backward(const Args& in, const std::vector<Tensor>&, const std::vector<const Tensor*>& dout,
                const std::vector<bool>&, std::vector<Tensor>*, Saved*) override {
    Weight& w = weights()[0];
    if (!w.trainable) return;
    const Tensor& x = *in.x[0];
    const int64_t d = o_.output_dim;
    const float* g = dout[0]->data();
    float* dw = w.grad.data();
    for (int64_t i = 0; i < x.size(); ++i) {
      const int64_t id = Id(x[i]);
      if (id < 0) continue;
      float* row = dw + id * d;
      const float* gr = g + i * d;
      for (int64_t j = 0; j < d; ++j) row[j] += gr[j];
    }
  }

  const Tensor* OutputMask(const Args&, const Saved& s) const override {
    return o_.mask_zero ? &s.mask : nullptr;
  }
  bool Differentiable(size_t) const override { return false; }
  int64_t IdBound(size_t) const override { return o_.input_dim; }

 private:
  // The row of id `v`, or -1 when it is not an integer in [0, input_dim).
  int64_t Id(float v) const {
    if (!(v >= 0.0f) || v >= static_cast<float>(o_.input_dim) || v != std::floor(v)) return -1;
    return static_cast<int64_t>(v);
  }

  EmbeddingOptions o_;
};

}  // namespace

std::unique_ptr<Layer> MakeEmbedding(std::string name, EmbeddingOptions o) {
  return std::make_unique<Embedding>(std::move(name), std::move(o));
}

}  // namespace lockstep::trainer::graph
