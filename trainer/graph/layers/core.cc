#include "trainer/graph/layers/core.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "trainer/kernels/cpu/column_sums.h"
#include "trainer/kernels/cpu/gemm.h"
#include "trainer/tensor/random.h"

namespace lockstep::trainer::graph {
namespace {

class Dense final : public Layer, public HasOptions<DenseOptions> {
 public:
  DenseOptions options() const override { return o_; }
  std::type_index options_type() const override { return typeid(DenseOptions); }
  Dense(std::string name, DenseOptions o) : Layer(std::move(name), "Dense"), o_(std::move(o)) {}
  const Activation* output_activation() const override { return &o_.activation; }

  absl::StatusOr<std::vector<Shape>> Build(const std::vector<Shape>& in,
                                           const BuildContext& ctx) override {
    if (in.size() != 1 || in[0].empty()) return LayerError(*this, "takes one input of rank >= 2");
    const int64_t d = in[0].back();
    if (d <= 0) return LayerError(*this, "the last axis of its input must be known");
    if (!built_) {
      Weight& k = AddWeight("kernel", Initialize(o_.kernel_initializer, {d, o_.units}, ctx.rng));
      k.l1 = o_.kernel_l1;
      k.l2 = o_.kernel_l2;
      if (o_.use_bias) {
        Weight& b = AddWeight("bias", Initialize(o_.bias_initializer, {o_.units}, ctx.rng));
        b.l1 = o_.bias_l1;
        b.l2 = o_.bias_l2;
      }
      in_ = d;
      built_ = true;
    } else if (d != in_) {
      return LayerError(*this, "called on inputs of " + std::to_string(d) +
                                   " features, built for " + std::to_string(in_));
    }
    Shape out = in[0];
    out.back() = o_.units;
    return std::vector<Shape>{out};
  }

  void Forward(const Args& in, std::vector<Tensor>* out, Saved* s, const CallContext&) override {
    const Tensor& x = *in.x[0];
    const int64_t m = x.size() / in_;
    Shape shape = x.shape();
    shape.back() = o_.units;
    const bool linear = o_.activation.kind == Act::kLinear;
    if (s->t.empty()) s->t.resize(1);
    Tensor& z = linear ? (*out)[0] : s->t[0];
    z.Resize(shape);
    float* zp = z.data();
    if (o_.use_bias) {
      const float* b = weights()[1].value.data();
      for (int64_t r = 0; r < m; ++r) std::copy_n(b, o_.units, zp + r * o_.units);
    }
    cpu::Gemm(false, false, m, o_.units, in_, 1.0f, x.data(), weights()[0].value.data(),
              o_.use_bias ? 1.0f : 0.0f, zp);
    if (!linear) ActivationForward(o_.activation, z, &(*out)[0]);
  }

  void Backward(const Args& in, const std::vector<Tensor>& out,
                const std::vector<const Tensor*>& dout, const std::vector<bool>& need,
                std::vector<Tensor>* din, Saved* s) override {
    const Tensor& x = *in.x[0];
    const int64_t m = x.size() / in_;
    const Tensor* dz = dout[0];
    if (o_.activation.kind != Act::kLinear) {
      if (s->t.size() < 2) s->t.resize(2);
      ActivationBackward(o_.activation, s->t[0], out[0], *dout[0], &s->t[1]);
      dz = &s->t[1];
    }
    if (weights()[0].trainable) {
      cpu::Gemm(true, false, in_, o_.units, m, 1.0f, x.data(), dz->data(), 1.0f,
                weights()[0].grad.data());
      if (o_.use_bias) cpu::AddColumnSums(dz->data(), m, o_.units, weights()[1].grad.data());
    }
    if (need[0]) {
      (*din)[0].Resize(x.shape());
      cpu::Gemm(false, true, m, in_, o_.units, 1.0f, dz->data(), weights()[0].value.data(), 0.0f,
                (*din)[0].data());
    }
  }

 private:
  DenseOptions o_;
  int64_t in_ = 0;
};

class ActivationLayer final : public Layer, public HasOptions<Activation> {
 public:
  Activation options() const override { return a_; }
  std::type_index options_type() const override { return typeid(Activation); }
  ActivationLayer(std::string name, std::string cls, Activation a)
      : Layer(std::move(name), std::move(cls)), a_(a) {}
  const Activation* output_activation() const override { return &a_; }
  absl::StatusOr<std::vector<Shape>> Build(const std::vector<Shape>& in,
                                           const BuildContext&) override {
    if (in.size() != 1) return LayerError(*this, "takes one input");
    built_ = true;
    return in;
  }
  void Forward(const Args& in, std::vector<Tensor>* out, Saved*, const CallContext&) override {
    ActivationForward(a_, *in.x[0], &(*out)[0]);
  }
  void Backward(const Args& in, const std::vector<Tensor>& out,
                const std::vector<const Tensor*>& dout, const std::vector<bool>& need,
                std::vector<Tensor>* din, Saved*) override {
    if (!need[0]) return;
    Tensor& dz = (*din)[0];
    if (a_.kind == Act::kRelu && &dz != dout[0]) {
      // dz = dy where z > 0, as ActivationBackward computes it, but reading dy unconditionally
      // so the loop vectorises (a conditional read keeps it a branch per element, which
      // mispredicts on half of them: 9% of a ResNet-20 step).
      const Tensor& z = *in.x[0];
      dz.Resize(z.shape());
      const float* __restrict zi = z.data();
      const float* __restrict g = dout[0]->data();
      float* __restrict d = dz.data();
      for (int64_t i = 0, n = z.size(); i < n; ++i) {
        const float gi = g[i];
        d[i] = zi[i] > 0 ? gi : 0.0f;
      }
      return;
    }
    ActivationBackward(a_, *in.x[0], out[0], *dout[0], &dz);
  }

 private:
  Activation a_;
};

class ReluLayer final : public Layer, public HasOptions<ReluOptions> {
 public:
  ReluOptions options() const override { return {max_, slope_, threshold_}; }
  std::type_index options_type() const override { return typeid(ReluOptions); }
  ReluLayer(std::string name, float max_value, float slope, float threshold)
      : Layer(std::move(name), "ReLU"), max_(max_value), slope_(slope), threshold_(threshold) {}
  absl::StatusOr<std::vector<Shape>> Build(const std::vector<Shape>& in,
                                           const BuildContext&) override {
    if (in.size() != 1) return LayerError(*this, "takes one input");
    built_ = true;
    return in;
  }
  void Forward(const Args& in, std::vector<Tensor>* out, Saved*, const CallContext&) override {
    const Tensor& x = *in.x[0];
    Tensor& y = (*out)[0];
    y.Resize(x.shape());
    for (int64_t i = 0; i < x.size(); ++i) {
      const float v = x[i];
      y[i] = v >= threshold_ ? std::min(v, max_) : slope_ * (v - threshold_);
    }
  }
  void Backward(const Args& in, const std::vector<Tensor>&, const std::vector<const Tensor*>& dout,
                const std::vector<bool>& need, std::vector<Tensor>* din, Saved*) override {
    if (!need[0]) return;
    const Tensor& x = *in.x[0];
    Tensor& dx = (*din)[0];
    dx.Resize(x.shape());
    for (int64_t i = 0; i < x.size(); ++i) {
      const float v = x[i];
      dx[i] = v >= threshold_ ? (v < max_ ? (*dout[0])[i] : 0.0f) : slope_ * (*dout[0])[i];
    }
  }

 private:
  float max_, slope_, threshold_;
};

// Layers that only change the shape (Flatten, Reshape): the data is copied as is.
class ReshapeLayer final : public Layer, public HasOptions<ReshapeOptions> {
 public:
  ReshapeLayer(std::string name, std::string cls, Shape target)
      : Layer(std::move(name), std::move(cls)), target_(std::move(target)) {}
  ReshapeOptions options() const override { return {target_, class_name() == "Flatten"}; }
  std::type_index options_type() const override { return typeid(ReshapeOptions); }
  absl::StatusOr<std::vector<Shape>> Build(const std::vector<Shape>& in,
                                           const BuildContext&) override {
    if (in.size() != 1) return LayerError(*this, "takes one input");
    const Shape& s = in[0];
    const bool known = std::all_of(s.begin(), s.end(), [](int64_t d) { return d > 0; });
    Shape out;
    if (class_name() == "Flatten") {
      if (!known) return LayerError(*this, "needs every input axis known, got " + ShapeString(s));
      out = {NumElements(s)};
    } else {
      out = target_;
      const auto unknown = std::count(out.begin(), out.end(), -1);
      if (unknown > 1) return LayerError(*this, "target_shape has more than one unknown axis");
      if (!known) {
        if (unknown > 0)
          return LayerError(*this, "cannot infer an axis of input " + ShapeString(s));
      } else {
        int64_t rest = 1;
        for (int64_t d : out) rest *= d > 0 ? d : 1;
        if (unknown == 1) {
          if (rest == 0 || NumElements(s) % rest != 0) {
            return LayerError(*this,
                              "cannot reshape " + ShapeString(s) + " to " + ShapeString(target_));
          }
          *std::find(out.begin(), out.end(), -1) = NumElements(s) / rest;
        } else if (rest != NumElements(s)) {
          return LayerError(*this, "cannot reshape " + ShapeString(s) + " (" +
                                       std::to_string(NumElements(s)) + " values) to " +
                                       ShapeString(target_));
        }
      }
    }
    out_ = out;
    built_ = true;
    return std::vector<Shape>{out};
  }
  void Forward(const Args& in, std::vector<Tensor>* out, Saved*, const CallContext&) override {
    const Tensor& x = *in.x[0];
    (*out)[0] = x.Reshaped(Batched(x.dim(0), out_));
  }
  void Backward(const Args& in, const std::vector<Tensor>&, const std::vector<const Tensor*>& dout,
                const std::vector<bool>& need, std::vector<Tensor>* din, Saved*) override {
    if (need[0]) (*din)[0] = dout[0]->Reshaped(in.x[0]->shape());
  }
  // A mask of [batch, time] survives only while the time axis does.
  const Tensor* OutputMask(const Args&, const Saved&) const override { return nullptr; }

 private:
  Shape target_, out_;
};

class RepeatVector final : public Layer, public HasOptions<RepeatOptions> {
 public:
  RepeatVector(std::string name, int64_t n) : Layer(std::move(name), "RepeatVector"), n_(n) {}
  RepeatOptions options() const override { return {n_}; }
  std::type_index options_type() const override { return typeid(RepeatOptions); }
  absl::StatusOr<std::vector<Shape>> Build(const std::vector<Shape>& in,
                                           const BuildContext&) override {
    if (in.size() != 1 || in[0].size() != 1) {
      return LayerError(*this, "takes one input of rank 2 (batch, features)");
    }
    built_ = true;
    return std::vector<Shape>{{n_, in[0][0]}};
  }
  void Forward(const Args& in, std::vector<Tensor>* out, Saved*, const CallContext&) override {
    const Tensor& x = *in.x[0];
    const int64_t b = x.dim(0), d = x.dim(1);
    Tensor& y = (*out)[0];
    y.Resize({b, n_, d});
    for (int64_t i = 0; i < b; ++i) {
      for (int64_t t = 0; t < n_; ++t)
        std::copy_n(x.data() + i * d, d, y.data() + (i * n_ + t) * d);
    }
  }
  void Backward(const Args& in, const std::vector<Tensor>&, const std::vector<const Tensor*>& dout,
                const std::vector<bool>& need, std::vector<Tensor>* din, Saved*) override {
    if (!need[0]) return;
    const Tensor& x = *in.x[0];
    const int64_t b = x.dim(0), d = x.dim(1);
    Tensor& dx = (*din)[0];
    dx.Resize(x.shape());
    dx.Fill(0.0f);
    for (int64_t i = 0; i < b; ++i) {
      for (int64_t t = 0; t < n_; ++t) {
        for (int64_t j = 0; j < d; ++j) dx[i * d + j] += (*dout[0])[(i * n_ + t) * d + j];
      }
    }
  }
  const Tensor* OutputMask(const Args&, const Saved&) const override { return nullptr; }

 private:
  int64_t n_;
};

class Dropout final : public Layer, public HasOptions<DropoutOptions> {
 public:
  DropoutOptions options() const override { return {rate_, noise_}; }
  std::type_index options_type() const override { return typeid(DropoutOptions); }
  Dropout(std::string name, float rate, Shape noise)
      : Layer(std::move(name), "Dropout"), rate_(rate), noise_(std::move(noise)) {}
  absl::StatusOr<std::vector<Shape>> Build(const std::vector<Shape>& in,
                                           const BuildContext&) override {
    if (in.size() != 1) return LayerError(*this, "takes one input");
    if (!noise_.empty() && noise_.size() != in[0].size()) {
      return LayerError(*this, "noise_shape " + ShapeString(noise_) + " does not match input " +
                                   ShapeString(in[0]));
    }
    built_ = true;
    return in;
  }
  void Forward(const Args& in, std::vector<Tensor>* out, Saved* s,
               const CallContext& ctx) override {
    const Tensor& x = *in.x[0];
    Tensor& y = (*out)[0];
    if (!ctx.training || rate_ <= 0) {
      y = x;
      s->t.clear();
      return;
    }
    s->t.resize(1);
    Tensor& mask = s->t[0];
    mask.Resize(x.shape());
    std::bernoulli_distribution keep(1.0 - rate_);
    const float scale = 1.0f / (1.0f - rate_);
    if (noise_.empty()) {
      for (float& v : mask.values()) v = keep(*ctx.rng) ? scale : 0.0f;
    } else {
      // One draw per position of the noise shape, broadcast along its 1-axes.
      const Shape& xs = x.shape();
      Shape ns{xs[0]};
      for (size_t a = 0; a < noise_.size(); ++a) ns.push_back(noise_[a] == 1 ? 1 : xs[a + 1]);
      Tensor draw(ns);
      for (float& v : draw.values()) v = keep(*ctx.rng) ? scale : 0.0f;
      std::vector<int64_t> idx(xs.size(), 0);
      for (int64_t i = 0; i < x.size(); ++i) {
        int64_t j = 0;
        for (size_t a = 0; a < xs.size(); ++a) j = j * ns[a] + (ns[a] == 1 ? 0 : idx[a]);
        mask[i] = draw[j];
        for (size_t a = xs.size(); a-- > 0;) {
          if (++idx[a] < xs[a]) break;
          idx[a] = 0;
        }
      }
    }
    y.Resize(x.shape());
    for (int64_t i = 0; i < x.size(); ++i) y[i] = x[i] * mask[i];
  }
  void Backward(const Args& in, const std::vector<Tensor>&, const std::vector<const Tensor*>& dout,
                const std::vector<bool>& need, std::vector<Tensor>* din, Saved* s) override {
    if (!need[0]) return;
    Tensor& dx = (*din)[0];
    if (s->t.empty()) {
      dx = *dout[0];
      return;
    }
    dx.Resize(in.x[0]->shape());
    for (int64_t i = 0; i < dx.size(); ++i) dx[i] = (*dout[0])[i] * s->t[0][i];
  }

 private:
  float rate_;
  Shape noise_;
};

class GaussianNoise final : public Layer, public HasOptions<GaussianNoiseOptions> {
 public:
  GaussianNoiseOptions options() const override { return {stddev_}; }
  std::type_index options_type() const override { return typeid(GaussianNoiseOptions); }
  GaussianNoise(std::string name, float stddev)
      : Layer(std::move(name), "GaussianNoise"), stddev_(stddev) {}
  absl::StatusOr<std::vector<Shape>> Build(const std::vector<Shape>& in,
                                           const BuildContext&) override {
    if (in.size() != 1) return LayerError(*this, "takes one input");
    built_ = true;
    return in;
  }
  void Forward(const Args& in, std::vector<Tensor>* out, Saved*, const CallContext& ctx) override {
    Tensor& y = (*out)[0];
    y = *in.x[0];
    if (!ctx.training || stddev_ <= 0) return;
    NormalDraw<float> d(0.0f, stddev_);
    for (float& v : y.values()) v += d(*ctx.rng);
  }
  void Backward(const Args&, const std::vector<Tensor>&, const std::vector<const Tensor*>& dout,
                const std::vector<bool>& need, std::vector<Tensor>* din, Saved*) override {
    if (need[0]) (*din)[0] = *dout[0];
  }

 private:
  float stddev_;
};

class Rescaling final : public Layer, public HasOptions<RescalingOptions> {
 public:
  RescalingOptions options() const override { return {scale_, offset_}; }
  std::type_index options_type() const override { return typeid(RescalingOptions); }
  Rescaling(std::string name, std::vector<float> scale, std::vector<float> offset)
      : Layer(std::move(name), "Rescaling"), scale_(std::move(scale)), offset_(std::move(offset)) {}
  absl::StatusOr<std::vector<Shape>> Build(const std::vector<Shape>& in,
                                           const BuildContext&) override {
    if (in.size() != 1) return LayerError(*this, "takes one input");
    const int64_t c = in[0].empty() ? 1 : in[0].back();
    for (const auto* v : {&scale_, &offset_}) {
      if (v->size() != 1 && static_cast<int64_t>(v->size()) != c) {
        return LayerError(*this, std::to_string(v->size()) + " scales or offsets for " +
                                     std::to_string(c) + " channels");
      }
    }
    built_ = true;
    return in;
  }
  void Forward(const Args& in, std::vector<Tensor>* out, Saved*, const CallContext&) override {
    const Tensor& x = *in.x[0];
    Tensor& y = (*out)[0];
    y.Resize(x.shape());
    const int64_t c = x.shape().back();
    for (int64_t i = 0; i < x.size(); ++i) y[i] = x[i] * Scale(i % c) + Offset(i % c);
  }
  void Backward(const Args& in, const std::vector<Tensor>&, const std::vector<const Tensor*>& dout,
                const std::vector<bool>& need, std::vector<Tensor>* din, Saved*) override {
    if (!need[0]) return;
    Tensor& dx = (*din)[0];
    dx.Resize(in.x[0]->shape());
    const int64_t c = dx.shape().back();
    for (int64_t i = 0; i < dx.size(); ++i) dx[i] = (*dout[0])[i] * Scale(i % c);
  }

 private:
  float Scale(int64_t ch) const {
    return scale_.size() == 1 ? scale_[0] : scale_[static_cast<size_t>(ch)];
  }
  float Offset(int64_t ch) const {
    return offset_.size() == 1 ? offset_[0] : offset_[static_cast<size_t>(ch)];
  }
  std::vector<float> scale_, offset_;
};

// Broadcasting index map from an output element to an input element (size-1 axes repeat).
class Broadcast {
 public:
  Broadcast(const Shape& out, const Shape& in) : out_(out), in_(in) {}
  bool identity() const { return out_ == in_; }
  template <typename F>
  void ForEach(F f) const {  // f(out_index, in_index)
    const size_t r = out_.size();
    std::vector<int64_t> idx(r, 0), stride(r, 1);
    for (size_t a = r; a-- > 1;) stride[a - 1] = stride[a] * in_[a];
    const int64_t n = NumElements(out_);
    int64_t j = 0;
    for (int64_t i = 0; i < n; ++i) {
      f(i, j);
      for (size_t a = r; a-- > 0;) {
        if (in_[a] != 1) j += stride[a];
        if (++idx[a] < out_[a]) break;
        if (in_[a] != 1) j -= stride[a] * out_[a];
        idx[a] = 0;
      }
    }
  }

 private:
  Shape out_, in_;
};

// The element of a broadcast input that output element `i` reads.
int64_t BroadcastIndex(const Shape& out, const Shape& in, int64_t i) {
  int64_t j = 0, mul = 1;
  for (size_t a = out.size(); a-- > 0;) {
    const int64_t c = i % out[a];
    i /= out[a];
    if (in[a] != 1) j += c * mul;
    mul *= in[a];
  }
  return j;
}

// The rows of a merge whose inputs are the output's shape or one broadcast pattern of it: the
// output as [outer, mid, inner] (products of consecutive axes) where a broadcast input is
// [outer, 1, inner] (squeeze-and-excitation's [n, 1, 1, c] against [n, h, w, c], a bias-like
// [1, 1, c]). Row r of the output ([inner] floats) reads row r of a full input and row
// r / mid of a broadcast one, so every loop runs over contiguous rows.
struct MergeRows {
  int64_t rows = 1, mid = 1, inner = 1;
  std::vector<bool> full;  // per input: the output's shape (else [outer, 1, inner])

  static std::optional<MergeRows> Of(const Shape& out, const std::vector<const Tensor*>& x) {
    MergeRows m;
    const Shape* pattern = nullptr;
    for (const Tensor* t : x) {
      m.full.push_back(t->shape() == out);
      if (m.full.back()) continue;
      if (pattern != nullptr && t->shape() != *pattern) return std::nullopt;
      pattern = &t->shape();
    }
    const int64_t total = NumElements(out);
    if (pattern == nullptr) {  // all full: one row
      m.inner = total;
      return m;
    }
    // Axes [0, a) equal, [a, b) size 1 in the pattern, [b, rank) equal.
    const Shape& s = *pattern;
    const size_t r = out.size();
    size_t a = 0;
    while (a < r && s[a] == out[a] && s[a] != 1) ++a;
    size_t b = a;
    while (b < r && s[b] == 1) ++b;
    for (size_t i = b; i < r; ++i) {
      if (s[i] != out[i]) return std::nullopt;
    }
    for (size_t i = a; i < b; ++i) m.mid *= out[i];
    for (size_t i = b; i < r; ++i) m.inner *= out[i];
    if (m.inner == 0 || m.mid == 0) return std::nullopt;
    m.rows = total / m.inner;
    return m;
  }
  const float* Row(const Tensor& t, size_t k, int64_t r) const {
    return t.data() + (full[k] ? r : r / mid) * inner;
  }
};

class Merge final : public Layer, public HasOptions<MergeOp> {
 public:
  MergeOp options() const override { return op_; }
  std::type_index options_type() const override { return typeid(MergeOp); }
  Merge(std::string name, std::string cls, MergeOp op)
      : Layer(std::move(name), std::move(cls)), op_(op) {}
  absl::StatusOr<std::vector<Shape>> Build(const std::vector<Shape>& in,
                                           const BuildContext&) override {
    if (in.size() < 2) return LayerError(*this, "takes at least two inputs");
    if (op_ == MergeOp::kSubtract && in.size() != 2) {
      return LayerError(*this, "takes exactly two inputs");
    }
    Shape out = in[0];
    for (const Shape& s : in) {
      if (s.size() != out.size()) {
        return LayerError(
            *this, "inputs of different ranks: " + ShapeString(in[0]) + " and " + ShapeString(s));
      }
      for (size_t a = 0; a < s.size(); ++a) {
        if (s[a] == out[a] || s[a] == 1) continue;
        if (out[a] == 1) {
          out[a] = s[a];
        } else {
          return LayerError(*this, "inputs of incompatible shapes: " + ShapeString(in[0]) +
                                       " and " + ShapeString(s));
        }
      }
    }
    built_ = true;
    return std::vector<Shape>{out};
  }
  void Forward(const Args& in, std::vector<Tensor>* out, Saved*, const CallContext&) override {
    Shape os = in.x[0]->shape();
    for (const Tensor* t : in.x) {
      for (size_t a = 0; a < os.size(); ++a) os[a] = std::max(os[a], t->dim(a));
    }
    Tensor& y = (*out)[0];
    y.Resize(os);
    const size_t n = in.x.size();
    if (op_ != MergeOp::kMaximum && op_ != MergeOp::kMinimum) {
      if (std::optional<MergeRows> m = MergeRows::Of(os, in.x)) {
        ForwardRows(*m, in.x, &y);
        return;
      }
    }
    for (size_t k = 0; k < n; ++k) {
      const Tensor& x = *in.x[k];
      Broadcast(os, x.shape()).ForEach([&](int64_t i, int64_t j) {
        const float v = x[j];
        if (k == 0) {
          y[i] = v;
          return;
        }
        switch (op_) {
          case MergeOp::kAdd:
          case MergeOp::kAverage:
            y[i] += v;
            break;
          case MergeOp::kSubtract:
            y[i] -= v;
            break;
          case MergeOp::kMultiply:
            y[i] *= v;
            break;
          case MergeOp::kMaximum:
            y[i] = std::max(y[i], v);
            break;
          case MergeOp::kMinimum:
            y[i] = std::min(y[i], v);
            break;
        }
      });
    }
    if (op_ == MergeOp::kAverage) {
      for (float& v : y.values()) v /= static_cast<float>(n);
    }
  }
  void Backward(const Args& in, const std::vector<Tensor>& out,
                const std::vector<const Tensor*>& dout, const std::vector<bool>& need,
                std::vector<Tensor>* din, Saved*) override {
    const Tensor& y = out[0];
    const Tensor& dy = *dout[0];
    const size_t n = in.x.size();
    if (op_ != MergeOp::kMaximum && op_ != MergeOp::kMinimum) {
      if (std::optional<MergeRows> m = MergeRows::Of(y.shape(), in.x)) {
        BackwardRows(*m, in.x, dy, need, din);
        return;
      }
    }
    for (size_t k = 0; k < n; ++k) {
      if (!need[k]) continue;
      const Tensor& x = *in.x[k];
      Tensor& dx = (*din)[k];
      dx.Resize(x.shape());
      dx.Fill(0.0f);
      Broadcast(y.shape(), x.shape()).ForEach([&](int64_t i, int64_t j) {
        float g = 0;
        switch (op_) {
          case MergeOp::kAdd:
            g = dy[i];
            break;
          case MergeOp::kAverage:
            g = dy[i] / static_cast<float>(n);
            break;
          case MergeOp::kSubtract:
            g = k == 0 ? dy[i] : -dy[i];
            break;
          case MergeOp::kMultiply: {
            // The product of the others, recomputed (inputs may contain zeros).
            float p = 1;
            for (size_t o = 0; o < n; ++o) {
              if (o != k) p *= (*in.x[o])[BroadcastIndex(y.shape(), in.x[o]->shape(), i)];
            }
            g = dy[i] * p;
            break;
          }
          case MergeOp::kMaximum:
          case MergeOp::kMinimum:
            // The gradient goes to the first input holding the extreme value.
            g = 0;
            if (x[j] == y[i]) {
              bool earlier = false;
              for (size_t o = 0; o < k && !earlier; ++o) {
                earlier = (*in.x[o])[BroadcastIndex(y.shape(), in.x[o]->shape(), i)] == y[i];
              }
              if (!earlier) g = dy[i];
            }
            break;
        }
        dx[j] += g;
      });
    }
  }

 private:
  // Forward and Backward over MergeRows, in the generic loops' order of operations (so the
  // results are the same to the bit): y = x0, then y op= xk for each further input.
  void ForwardRows(const MergeRows& m, const std::vector<const Tensor*>& x, Tensor* y) const {
    const size_t n = x.size();
    const int64_t c = m.inner;
    for (int64_t r = 0; r < m.rows; ++r) {
      float* __restrict yr = y->data() + r * c;
      const float* __restrict x0 = m.Row(*x[0], 0, r);
      for (int64_t j = 0; j < c; ++j) yr[j] = x0[j];
      for (size_t k = 1; k < n; ++k) {
        const float* __restrict xr = m.Row(*x[k], k, r);
        if (op_ == MergeOp::kSubtract) {
          for (int64_t j = 0; j < c; ++j) yr[j] -= xr[j];
        } else if (op_ == MergeOp::kMultiply) {
          for (int64_t j = 0; j < c; ++j) yr[j] *= xr[j];
        } else {
          for (int64_t j = 0; j < c; ++j) yr[j] += xr[j];
        }
      }
    }
    if (op_ == MergeOp::kAverage) {
      const auto nf = static_cast<float>(n);
      for (float& v : y->values()) v /= nf;
    }
  }

  void BackwardRows(const MergeRows& m, const std::vector<const Tensor*>& x, const Tensor& dy,
                    const std::vector<bool>& need, std::vector<Tensor>* din) const {
    const size_t n = x.size();
    const int64_t c = m.inner;
    const auto nf = static_cast<float>(n);
    std::vector<float> prod;
    for (size_t k = 0; k < n; ++k) {
      if (!need[k]) continue;
      Tensor& dx = (*din)[k];
      dx.Resize(x[k]->shape());
      dx.Fill(0.0f);
      if (op_ == MergeOp::kMultiply) prod.resize(static_cast<size_t>(c));
      for (int64_t r = 0; r < m.rows; ++r) {
        const float* __restrict g = dy.data() + r * c;
        float* __restrict d = dx.data() + (m.full[k] ? r : r / m.mid) * c;
        switch (op_) {
          case MergeOp::kAdd:
            for (int64_t j = 0; j < c; ++j) d[j] += g[j];
            break;
          case MergeOp::kAverage:
            for (int64_t j = 0; j < c; ++j) d[j] += g[j] / nf;
            break;
          case MergeOp::kSubtract:
            if (k == 0) {
              for (int64_t j = 0; j < c; ++j) d[j] += g[j];
            } else {
              for (int64_t j = 0; j < c; ++j) d[j] += -g[j];
            }
            break;
          case MergeOp::kMultiply: {
            // The product of the others, recomputed (inputs may contain zeros).
            float* __restrict p = prod.data();
            std::fill_n(p, c, 1.0f);
            for (size_t o = 0; o < n; ++o) {
              if (o == k) continue;
              const float* __restrict xo = m.Row(*x[o], o, r);
              for (int64_t j = 0; j < c; ++j) p[j] *= xo[j];
            }
            for (int64_t j = 0; j < c; ++j) d[j] += g[j] * p[j];
            break;
          }
          default:
            break;
        }
      }
    }
  }

  MergeOp op_;
};

class Concatenate final : public Layer, public HasOptions<ConcatOptions> {
 public:
  ConcatOptions options() const override { return {axis_}; }
  std::type_index options_type() const override { return typeid(ConcatOptions); }
  Concatenate(std::string name, int64_t axis)
      : Layer(std::move(name), "Concatenate"), axis_(axis) {}
  absl::StatusOr<std::vector<Shape>> Build(const std::vector<Shape>& in,
                                           const BuildContext&) override {
    if (in.size() < 2) return LayerError(*this, "takes at least two inputs");
    const auto rank = static_cast<int64_t>(in[0].size()) + 1;  // with the batch axis
    a_ = axis_ < 0 ? axis_ + rank : axis_;
    if (a_ < 1 || a_ >= rank) {
      return LayerError(*this, "axis " + std::to_string(axis_) + " is out of range for inputs " +
                                   ShapeString(in[0]));
    }
    Shape out = in[0];
    const auto ax = static_cast<size_t>(a_ - 1);
    out[ax] = 0;
    for (const Shape& s : in) {
      if (s.size() != in[0].size()) return LayerError(*this, "inputs of different ranks");
      for (size_t a = 0; a < s.size(); ++a) {
        if (a != ax && s[a] != in[0][a]) {
          return LayerError(*this, "inputs " + ShapeString(in[0]) + " and " + ShapeString(s) +
                                       " differ outside the concatenation axis");
        }
      }
      out[ax] = (out[ax] < 0 || s[ax] < 0) ? -1 : out[ax] + s[ax];
    }
    built_ = true;
    return std::vector<Shape>{out};
  }
  void Forward(const Args& in, std::vector<Tensor>* out, Saved*, const CallContext&) override {
    const Shape& s0 = in.x[0]->shape();
    int64_t outer = 1, inner = 1;
    for (int64_t a = 0; a < a_; ++a) outer *= s0[static_cast<size_t>(a)];
    for (size_t a = static_cast<size_t>(a_) + 1; a < s0.size(); ++a) inner *= s0[a];
    Shape os = s0;
    os[static_cast<size_t>(a_)] = 0;
    for (const Tensor* t : in.x) os[static_cast<size_t>(a_)] += t->dim(static_cast<size_t>(a_));
    Tensor& y = (*out)[0];
    y.Resize(os);
    const int64_t row = os[static_cast<size_t>(a_)] * inner;
    int64_t offset = 0;
    for (const Tensor* t : in.x) {
      const int64_t w = t->dim(static_cast<size_t>(a_)) * inner;
      for (int64_t o = 0; o < outer; ++o)
        std::copy_n(t->data() + o * w, w, y.data() + o * row + offset);
      offset += w;
    }
  }
  void Backward(const Args& in, const std::vector<Tensor>&, const std::vector<const Tensor*>& dout,
                const std::vector<bool>& need, std::vector<Tensor>* din, Saved*) override {
    const Tensor& dy = *dout[0];
    int64_t outer = 1, inner = 1;
    for (int64_t a = 0; a < a_; ++a) outer *= dy.dim(static_cast<size_t>(a));
    for (size_t a = static_cast<size_t>(a_) + 1; a < dy.rank(); ++a) inner *= dy.dim(a);
    const int64_t row = dy.dim(static_cast<size_t>(a_)) * inner;
    int64_t offset = 0;
    for (size_t k = 0; k < in.x.size(); ++k) {
      const Tensor& x = *in.x[k];
      const int64_t w = x.dim(static_cast<size_t>(a_)) * inner;
      if (need[k]) {
        Tensor& dx = (*din)[k];
        dx.Resize(x.shape());
        for (int64_t o = 0; o < outer; ++o)
          std::copy_n(dy.data() + o * row + offset, w, dx.data() + o * w);
      }
      offset += w;
    }
  }

 private:
  int64_t axis_, a_ = 0;
};

class Compare final : public Layer, public HasOptions<CompareOptions> {
 public:
  CompareOptions options() const override { return {op_, c_}; }
  std::type_index options_type() const override { return typeid(CompareOptions); }
  Compare(std::string name, std::string cls, CompareOp op, float c)
      : Layer(std::move(name), std::move(cls)), op_(op), c_(c) {}
  absl::StatusOr<std::vector<Shape>> Build(const std::vector<Shape>& in,
                                           const BuildContext&) override {
    if (in.size() != 1) return LayerError(*this, "takes one tensor and one constant");
    built_ = true;
    return in;
  }
  void Forward(const Args& in, std::vector<Tensor>* out, Saved*, const CallContext&) override {
    const Tensor& x = *in.x[0];
    Tensor& y = (*out)[0];
    y.Resize(x.shape());
    for (int64_t i = 0; i < x.size(); ++i) {
      const float v = x[i];
      bool r = false;
      switch (op_) {
        case CompareOp::kEqual:
          r = v == c_;
          break;
        case CompareOp::kNotEqual:
          r = v != c_;
          break;
        case CompareOp::kGreater:
          r = v > c_;
          break;
        case CompareOp::kGreaterEqual:
          r = v >= c_;
          break;
        case CompareOp::kLess:
          r = v < c_;
          break;
        case CompareOp::kLessEqual:
          r = v <= c_;
          break;
      }
      y[i] = r ? 1.0f : 0.0f;
    }
  }
  void Backward(const Args&, const std::vector<Tensor>&, const std::vector<const Tensor*>&,
                const std::vector<bool>&, std::vector<Tensor>*, Saved*) override {}
  bool Differentiable(size_t) const override { return false; }
  bool ReadsAnyDtype(size_t) const override { return true; }
  const Tensor* OutputMask(const Args&, const Saved&) const override { return nullptr; }

 private:
  CompareOp op_;
  float c_;
};

class Masking final : public Layer, public HasOptions<MaskingOptions> {
 public:
  MaskingOptions options() const override { return {value_}; }
  std::type_index options_type() const override { return typeid(MaskingOptions); }
  Masking(std::string name, float value) : Layer(std::move(name), "Masking"), value_(value) {}
  absl::StatusOr<std::vector<Shape>> Build(const std::vector<Shape>& in,
                                           const BuildContext&) override {
    if (in.size() != 1 || in[0].size() < 2) {
      return LayerError(*this, "takes one input of [batch, time, features...]");
    }
    built_ = true;
    return in;
  }
  void Forward(const Args& in, std::vector<Tensor>* out, Saved* s, const CallContext&) override {
    const Tensor& x = *in.x[0];
    const int64_t b = x.dim(0), t = x.dim(1), f = x.size() / (b * t);
    s->mask.Resize({b, t});
    Tensor& y = (*out)[0];
    y.Resize(x.shape());
    for (int64_t r = 0; r < b * t; ++r) {
      const float* xr = x.data() + r * f;
      const bool keep = std::any_of(xr, xr + f, [&](float v) { return v != value_; });
      s->mask[r] = keep ? 1.0f : 0.0f;
      for (int64_t j = 0; j < f; ++j) y[r * f + j] = keep ? xr[j] : 0.0f;
    }
  }
  void Backward(const Args& in, const std::vector<Tensor>&, const std::vector<const Tensor*>& dout,
                const std::vector<bool>& need, std::vector<Tensor>* din, Saved* s) override {
    if (!need[0]) return;
    const Tensor& x = *in.x[0];
    const int64_t rows = x.dim(0) * x.dim(1), f = x.size() / rows;
    Tensor& dx = (*din)[0];
    dx.Resize(x.shape());
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < f; ++j) dx[r * f + j] = s->mask[r] * (*dout[0])[r * f + j];
    }
  }
  const Tensor* OutputMask(const Args&, const Saved& s) const override { return &s.mask; }

 private:
  float value_;
};

class MaskWith final : public Layer, public HasOptions<MaskWithOptions> {
 public:
  MaskWithOptions options() const override { return {}; }
  std::type_index options_type() const override { return typeid(MaskWithOptions); }
  explicit MaskWith(std::string name) : Layer(std::move(name), "mask") {}
  absl::StatusOr<std::vector<Shape>> Build(const std::vector<Shape>& in,
                                           const BuildContext&) override {
    if (in.size() != 2 || in[1].size() != 1) {
      return LayerError(*this, "a mask must be [batch, time]");
    }
    built_ = true;
    return std::vector<Shape>{in[0]};
  }
  void Forward(const Args& in, std::vector<Tensor>* out, Saved*, const CallContext&) override {
    (*out)[0] = *in.x[0];
  }
  void Backward(const Args&, const std::vector<Tensor>&, const std::vector<const Tensor*>& dout,
                const std::vector<bool>& need, std::vector<Tensor>* din, Saved*) override {
    if (need[0]) (*din)[0] = *dout[0];
  }
  bool Differentiable(size_t input) const override { return input == 0; }
  const Tensor* OutputMask(const Args& in, const Saved&) const override { return in.x[1]; }
};

}  // namespace

std::unique_ptr<Layer> MakeCompare(std::string name, std::string class_name, CompareOp op,
                                   float constant) {
  return std::make_unique<Compare>(std::move(name), std::move(class_name), op, constant);
}
std::unique_ptr<Layer> MakeMasking(std::string name, float value) {
  return std::make_unique<Masking>(std::move(name), value);
}
std::unique_ptr<Layer> MakeMaskWith(std::string name) {
  return std::make_unique<MaskWith>(std::move(name));
}

std::unique_ptr<Layer> MakeDense(std::string name, DenseOptions o) {
  return std::make_unique<Dense>(std::move(name), std::move(o));
}
std::unique_ptr<Layer> MakeActivation(std::string name, std::string class_name, Activation a) {
  return std::make_unique<ActivationLayer>(std::move(name), std::move(class_name), a);
}
std::unique_ptr<Layer> MakeRelu(std::string name, float max_value, float negative_slope,
                                float threshold) {
  return std::make_unique<ReluLayer>(std::move(name), max_value, negative_slope, threshold);
}
std::optional<Activation> ReluActivation(const ReluOptions& r) {
  const bool unbounded = r.max_value >= 3.0e38f;
  if (r.threshold != 0) return std::nullopt;
  if (r.negative_slope == 0 && unbounded) return Activation{Act::kRelu, 0};
  if (r.negative_slope == 0 && r.max_value == 6.0f) return Activation{Act::kRelu6, 0};
  if (unbounded) return Activation{Act::kLeakyRelu, r.negative_slope};
  return std::nullopt;
}

std::unique_ptr<Layer> MakeFlatten(std::string name) {
  return std::make_unique<ReshapeLayer>(std::move(name), "Flatten", Shape{});
}
std::unique_ptr<Layer> MakeReshape(std::string name, Shape target) {
  return std::make_unique<ReshapeLayer>(std::move(name), "Reshape", std::move(target));
}
std::unique_ptr<Layer> MakeRepeatVector(std::string name, int64_t n) {
  return std::make_unique<RepeatVector>(std::move(name), n);
}
std::unique_ptr<Layer> MakeDropout(std::string name, float rate, Shape noise_shape) {
  return std::make_unique<Dropout>(std::move(name), rate, std::move(noise_shape));
}
std::unique_ptr<Layer> MakeGaussianNoise(std::string name, float stddev) {
  return std::make_unique<GaussianNoise>(std::move(name), stddev);
}
std::unique_ptr<Layer> MakeRescaling(std::string name, std::vector<float> scale,
                                     std::vector<float> offset) {
  return std::make_unique<Rescaling>(std::move(name), std::move(scale), std::move(offset));
}
std::unique_ptr<Layer> MakeMerge(std::string name, std::string class_name, MergeOp op) {
  return std::make_unique<Merge>(std::move(name), std::move(class_name), op);
}
std::unique_ptr<Layer> MakeConcatenate(std::string name, int64_t axis) {
  return std::make_unique<Concatenate>(std::move(name), axis);
}

}  // namespace lockstep::trainer::graph
