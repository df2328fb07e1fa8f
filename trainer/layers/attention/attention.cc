#include "trainer/layers/attention/attention.h"

#include <algorithm>
#include <cmath>

#include "trainer/kernels/cpu/column_sums.h"
#include "trainer/kernels/cpu/gemm.h"

namespace lockstep::trainer::graph {
namespace {

// [B, T, H, K] <-> [B, H, T, K].
void ToHeads(const float* src, int64_t b, int64_t t, int64_t h, int64_t k, float* dst) {
  for (int64_t i = 0; i < b; ++i) {
    for (int64_t s = 0; s < t; ++s) {
      for (int64_t j = 0; j < h; ++j) {
        std::copy_n(src + ((i * t + s) * h + j) * k, k, dst + ((i * h + j) * t + s) * k);
      }
    }
  }
}
void FromHeads(const float* src, int64_t b, int64_t t, int64_t h, int64_t k, float* dst) {
  for (int64_t i = 0; i < b; ++i) {
    for (int64_t s = 0; s < t; ++s) {
      for (int64_t j = 0; j < h; ++j) {
        std::copy_n(src + ((i * h + j) * t + s) * k, k, dst + ((i * t + s) * h + j) * k);
      }
    }
  }
}

// What a call keeps in Saved::t.
enum Slot : size_t {
  kQ,      // [B, H, T, kd] projected queries
  kK,      // [B, H, S, kd]
  kV,      // [B, H, S, vd]
  kP,      // [B, H, T, S] attention probabilities
  kDrop,   // [B, H, T, S] dropout mask (scaled), empty when none
  kO,      // [B*T, H*vd] the heads' outputs before the output projection
  kAllow,  // [B, T, S] 1 where query t may attend to key s
  kT1,     // scratch
  kT2,     // scratch
  kT3,     // scratch
  kSlots,
};

class MultiHeadAttention final : public Layer, public HasOptions<MultiHeadAttentionOptions> {
 public:
  MultiHeadAttentionOptions options() const override { return o_; }
  std::type_index options_type() const override { return typeid(MultiHeadAttentionOptions); }
  void set_causal(bool causal) { o_.use_causal_mask = causal; }
  MultiHeadAttention(std::string name, MultiHeadAttentionOptions o)
      : Layer(std::move(name), "MultiHeadAttention"), o_(std::move(o)) {
    if (o_.value_dim <= 0) o_.value_dim = o_.key_dim;
  }

  absl::StatusOr<std::vector<Shape>> Build(const std::vector<Shape>& in,
                                           const BuildContext& ctx) override {
    if (in.size() != 2 && in.size() != 3) {
      return LayerError(*this, "takes [query, value] or [query, value, key], got " +
                                   std::to_string(in.size()) + " inputs");
    }
    const Shape& q = in[0];
    const Shape& v = in[1];
    const Shape& k = in.size() == 3 ? in[2] : in[1];
    if (q.size() < 2 || v.size() != q.size() || k.size() != q.size()) {
      return LayerError(*this,
                        "takes query, value and key of one rank >= 3 (batch, ..., "
                        "features), got " +
                            ShapeString(q) + ", " + ShapeString(v) + " and " + ShapeString(k));
    }
    for (size_t a = 0; a + 1 < v.size(); ++a) {
      if (v[a] > 0 && k[a] > 0 && v[a] != k[a]) {
        return LayerError(*this, "value " + ShapeString(v) + " and key " + ShapeString(k) +
                                     " differ outside their last axis");
      }
    }
    if (q.back() <= 0 || v.back() <= 0 || k.back() <= 0) {
      return LayerError(*this, "the feature axes of its inputs must be known");
    }
    // Keras numbers the axes of the projected [batch, ..., heads, dim] tensor; the default is
    // every axis but the batch and the features: 1 .. rank - 2 (rank with the batch).
    const auto rank = static_cast<int64_t>(q.size()) + 1;
    if (!o_.attention_axes.empty()) {
      std::vector<int64_t> axes;
      for (int64_t a : o_.attention_axes) axes.push_back(a < 0 ? a + rank : a);
      std::sort(axes.begin(), axes.end());
      std::vector<int64_t> all;
      for (int64_t a = 1; a <= rank - 2; ++a) all.push_back(a);
      if (axes != all) {
        return LayerError(*this, "attention_axes " + ShapeString(o_.attention_axes) +
                                     " over inputs " + ShapeString(q) +
                                     " is not supported (only attention over every axis "
                                     "between the batch and the features)");
      }
    }
    const int64_t h = o_.num_heads, kd = o_.key_dim, vd = o_.value_dim;
    if (!built_) {
      auto kernel = [&](const char* n, Shape s) {
        Weight& w = AddWeight(n, Initialize(o_.kernel_initializer, s, ctx.rng));
        w.l1 = o_.kernel_l1;
        w.l2 = o_.kernel_l2;
      };
      auto bias = [&](const char* n, Shape s) {
        if (!o_.use_bias) return;
        Weight& w = AddWeight(n, Initialize(o_.bias_initializer, s, ctx.rng));
        w.l1 = o_.bias_l1;
        w.l2 = o_.bias_l2;
      };
      kernel("query/kernel", {q.back(), h, kd});
      bias("query/bias", {h, kd});
      kernel("key/kernel", {k.back(), h, kd});
      bias("key/bias", {h, kd});
      kernel("value/kernel", {v.back(), h, vd});
      bias("value/bias", {h, vd});
      kernel("attention_output/kernel", {h, vd, q.back()});
      bias("attention_output/bias", {q.back()});
      dq_ = q.back();
      dk_ = k.back();
      dv_ = v.back();
      built_ = true;
    } else if (q.back() != dq_ || k.back() != dk_ || v.back() != dv_) {
      return LayerError(*this, "called on inputs of other widths than it was built for");
    }
    return std::vector<Shape>{q};
  }

  void Forward(const Args& in, std::vector<Tensor>* out, Saved* s,
               const CallContext& ctx) override {
    const Tensor& query = *in.x[0];
    const Tensor& value = *in.x[1];
    const Tensor& key = in.x.size() > 2 ? *in.x[2] : value;
    const int64_t b = query.dim(0), t = query.size() / (b * dq_), sl = value.size() / (b * dv_);
    const int64_t h = o_.num_heads, kd = o_.key_dim, vd = o_.value_dim;
    const float scale = 1.0f / std::sqrt(static_cast<float>(kd));
    s->t.resize(kSlots);
    auto& st = s->t;

    // Projections, then head-major copies.
    Tensor& tmp = st[kT1];
    Project(query, W(kWq), B(kWq), t * b, dq_, h * kd, &tmp);
    st[kQ].Resize({b, h, t, kd});
    ToHeads(tmp.data(), b, t, h, kd, st[kQ].data());
    Project(key, W(kWk), B(kWk), sl * b, dk_, h * kd, &tmp);
    st[kK].Resize({b, h, sl, kd});
    ToHeads(tmp.data(), b, sl, h, kd, st[kK].data());
    Project(value, W(kWv), B(kWv), sl * b, dv_, h * vd, &tmp);
    st[kV].Resize({b, h, sl, vd});
    ToHeads(tmp.data(), b, sl, h, vd, st[kV].data());

    // Which keys each query may attend to.
    Tensor& allow = st[kAllow];
    allow.Resize({b, t, sl});
    const Tensor* qm = MaskOf(in, 0, b * t, ctx);
    const Tensor* vm = MaskOf(in, 1, b * sl, ctx);
    const Tensor* km = MaskOf(in, 2, b * sl, ctx);
    for (int64_t i = 0; i < b; ++i) {
      for (int64_t r = 0; r < t; ++r) {
        const bool row = qm == nullptr || (*qm)[i * t + r] != 0;
        for (int64_t c = 0; c < sl; ++c) {
          const bool ok = row && (vm == nullptr || (*vm)[i * sl + c] != 0) &&
                          (km == nullptr || (*km)[i * sl + c] != 0) &&
                          (!o_.use_causal_mask || c <= r);
          allow[(i * t + r) * sl + c] = ok ? 1.0f : 0.0f;
        }
      }
    }

    // Scores and probabilities per (batch, head).
    Tensor& p = st[kP];
    p.Resize({b, h, t, sl});
    const bool drop = ctx.training && o_.dropout > 0 && o_.dropout < 1 && ctx.rng != nullptr;
    Tensor& dm = st[kDrop];
    dm.Resize(drop ? Shape{b, h, t, sl} : Shape{0});
    if (drop) {
      std::bernoulli_distribution keep(1.0 - static_cast<double>(o_.dropout));
      const float inv = 1.0f / (1.0f - o_.dropout);
      for (float& m : dm.values()) m = keep(*ctx.rng) ? inv : 0.0f;
    }
    Tensor& oh = st[kT2];
    oh.Resize({b, h, t, vd});
    Tensor& pd = st[kT3];
    pd.Resize({t, sl});
    for (int64_t i = 0; i < b; ++i) {
      for (int64_t j = 0; j < h; ++j) {
        const int64_t bh = i * h + j;
        float* ps = p.data() + bh * t * sl;
        cpu::Gemm(false, true, t, sl, kd, scale, st[kQ].data() + bh * t * kd,
                  st[kK].data() + bh * sl * kd, 0.0f, ps);
        const float* al = allow.data() + i * t * sl;
        for (int64_t r = 0; r < t; ++r) {
          float* row = ps + r * sl;
          float mx = -3.4e38f;
          for (int64_t c = 0; c < sl; ++c) {
            if (al[r * sl + c] == 0) row[c] += -1e9f;  // Keras's additive mask
            mx = std::max(mx, row[c]);
          }
          float sum = 0;
          for (int64_t c = 0; c < sl; ++c) sum += (row[c] = std::exp(row[c] - mx));
          for (int64_t c = 0; c < sl; ++c) row[c] /= sum;
        }
        const float* pv = ps;
        if (drop) {
          const float* mk = dm.data() + bh * t * sl;
          for (int64_t e = 0; e < t * sl; ++e) pd[e] = ps[e] * mk[e];
          pv = pd.data();
        }
        cpu::Gemm(false, false, t, vd, sl, 1.0f, pv, st[kV].data() + bh * sl * vd, 0.0f,
                  oh.data() + bh * t * vd);
      }
    }
    Tensor& o = st[kO];
    o.Resize({b * t, h * vd});
    FromHeads(oh.data(), b, t, h, vd, o.data());
    Tensor& y = (*out)[0];
    y.Resize(query.shape());
    Project(o, W(kWo), B(kWo), b * t, h * vd, dq_, &y);
  }

  void Backward(const Args& in, const std::vector<Tensor>&, const std::vector<const Tensor*>& dout,
                const std::vector<bool>& need, std::vector<Tensor>* din, Saved* s) override {
    const Tensor& query = *in.x[0];
    const Tensor& value = *in.x[1];
    const bool has_key = in.x.size() > 2;
    const Tensor& key = has_key ? *in.x[2] : value;
    const int64_t b = query.dim(0), t = query.size() / (b * dq_), sl = value.size() / (b * dv_);
    const int64_t h = o_.num_heads, kd = o_.key_dim, vd = o_.value_dim;
    const float scale = 1.0f / std::sqrt(static_cast<float>(kd));
    auto& st = s->t;
    const Tensor& p = st[kP];
    const Tensor& dm = st[kDrop];
    const Tensor& allow = st[kAllow];
    const bool drop = dm.size() > 0;
    const bool train = weights()[0].trainable;
    const float* dy = dout[0]->data();

    // Output projection.
    if (train) {
      cpu::Gemm(true, false, h * vd, dq_, b * t, 1.0f, st[kO].data(), dy, 1.0f, G(kWo));
      if (o_.use_bias) cpu::AddColumnSums(dy, b * t, dq_, GB(kWo));
    }
    Tensor& d_o = st[kT1];
    d_o.Resize({b * t, h * vd});
    cpu::Gemm(false, true, b * t, h * vd, dq_, 1.0f, dy, W(kWo), 0.0f, d_o.data());
    Tensor& doh = st[kT2];
    doh.Resize({b, h, t, vd});
    ToHeads(d_o.data(), b, t, h, vd, doh.data());

    // Attention, per (batch, head): dQ, dK, dV in head-major layout.
    Tensor dq({b, h, t, kd}), dk({b, h, sl, kd}), dv({b, h, sl, vd});
    Tensor& dp = st[kT3];
    dp.Resize({t, sl});
    Tensor pd({t, sl});
    for (int64_t i = 0; i < b; ++i) {
      for (int64_t j = 0; j < h; ++j) {
        const int64_t bh = i * h + j;
        const float* ps = p.data() + bh * t * sl;
        const float* go = doh.data() + bh * t * vd;
        const float* mk = drop ? dm.data() + bh * t * sl : nullptr;
        const float* pv = ps;
        if (drop) {
          for (int64_t e = 0; e < t * sl; ++e) pd[e] = ps[e] * mk[e];
          pv = pd.data();
        }
        // dV = P'^T dO; dP' = dO V^T.
        cpu::Gemm(true, false, sl, vd, t, 1.0f, pv, go, 0.0f, dv.data() + bh * sl * vd);
        cpu::Gemm(false, true, t, sl, vd, 1.0f, go, st[kV].data() + bh * sl * vd, 0.0f, dp.data());
        // Through the dropout and the softmax; masked scores get nothing.
        const float* al = allow.data() + i * t * sl;
        for (int64_t r = 0; r < t; ++r) {
          float* g = dp.data() + r * sl;
          const float* pr = ps + r * sl;
          if (drop) {
            for (int64_t c = 0; c < sl; ++c) g[c] *= mk[r * sl + c];
          }
          float dot = 0;
          for (int64_t c = 0; c < sl; ++c) dot += pr[c] * g[c];
          for (int64_t c = 0; c < sl; ++c) {
            g[c] = al[r * sl + c] != 0 ? pr[c] * (g[c] - dot) : 0.0f;
          }
        }
        // dQ = scale dS K; dK = scale dS^T Q.
        cpu::Gemm(false, false, t, kd, sl, scale, dp.data(), st[kK].data() + bh * sl * kd, 0.0f,
                  dq.data() + bh * t * kd);
        cpu::Gemm(true, false, sl, kd, t, scale, dp.data(), st[kQ].data() + bh * t * kd, 0.0f,
                  dk.data() + bh * sl * kd);
      }
    }

    // The input projections.
    Tensor flat;
    flat.Resize({b * t, h * kd});
    FromHeads(dq.data(), b, t, h, kd, flat.data());
    ProjectBackward(query, flat, kWq, b * t, dq_, h * kd, train, need[0], &(*din)[0], false);
    flat.Resize({b * sl, h * vd});
    FromHeads(dv.data(), b, sl, h, vd, flat.data());
    ProjectBackward(value, flat, kWv, b * sl, dv_, h * vd, train, need[1], &(*din)[1], false);
    flat.Resize({b * sl, h * kd});
    FromHeads(dk.data(), b, sl, h, kd, flat.data());
    if (has_key) {
      ProjectBackward(key, flat, kWk, b * sl, dk_, h * kd, train, need[2], &(*din)[2], false);
    } else {
      ProjectBackward(key, flat, kWk, b * sl, dk_, h * kd, train, need[1], &(*din)[1], true);
    }
  }

 private:
  // The weights' positions: kernel at 2 * which (or `which` without biases), bias after it.
  enum Which : size_t { kWq = 0, kWk = 1, kWv = 2, kWo = 3 };
  size_t KernelIndex(Which w) const { return o_.use_bias ? 2 * w : w; }
  const float* W(Which w) { return weights()[KernelIndex(w)].value.data(); }
  const float* B(Which w) {
    return o_.use_bias ? weights()[KernelIndex(w) + 1].value.data() : nullptr;
  }
  float* G(Which w) { return weights()[KernelIndex(w)].grad.data(); }
  float* GB(Which w) { return weights()[KernelIndex(w) + 1].grad.data(); }

  // y [rows, n] = x [rows, k] kernel [k, n] + bias.
  static void Project(const Tensor& x, const float* kernel, const float* bias, int64_t rows,
                      int64_t k, int64_t n, Tensor* y) {
    if (y->size() != rows * n) y->Resize({rows, n});
    if (bias != nullptr) {
      for (int64_t r = 0; r < rows; ++r) std::copy_n(bias, n, y->data() + r * n);
    }
    if (rows > 0) {
      cpu::Gemm(false, false, rows, n, k, 1.0f, x.data(), kernel, bias != nullptr ? 1.0f : 0.0f,
                y->data());
    }
  }

  // From dL/d(projection) [rows, n]: the kernel's and bias's gradients, and the input's
  // (added into `dx` when `add`).
  void ProjectBackward(const Tensor& x, const Tensor& dy, Which w, int64_t rows, int64_t k,
                       int64_t n, bool train, bool need, Tensor* dx, bool add) {
    if (train) {
      cpu::Gemm(true, false, k, n, rows, 1.0f, x.data(), dy.data(), 1.0f, G(w));
      if (o_.use_bias) cpu::AddColumnSums(dy.data(), rows, n, GB(w));
    }
    if (!need) return;
    if (!add) dx->Resize(x.shape());
    cpu::Gemm(false, true, rows, k, n, 1.0f, dy.data(), W(w), add ? 1.0f : 0.0f, dx->data());
  }

  // Input i's mask when it has one of `size` values ([batch, time]).
  const Tensor* MaskOf(const Args& in, size_t i, int64_t size, const CallContext& ctx) const {
    if (i >= in.mask.size() || in.mask[i] == nullptr) return nullptr;
    if (in.mask[i]->size() == size) return in.mask[i];
    ctx.Report("layer '" + name() + "' (MultiHeadAttention): the mask of input " +
               std::to_string(i) + " has shape " + ShapeString(in.mask[i]->shape()) +
               ", which does not fit its input " + ShapeString(in.x[i]->shape()));
    return nullptr;
  }

  MultiHeadAttentionOptions o_;
  int64_t dq_ = 0, dk_ = 0, dv_ = 0;
};

}  // namespace

std::unique_ptr<Layer> MakeMultiHeadAttention(std::string name, MultiHeadAttentionOptions o) {
  return std::make_unique<MultiHeadAttention>(std::move(name), std::move(o));
}

bool SetCausalMask(Layer& l, bool causal) {
  auto* mha = dynamic_cast<MultiHeadAttention*>(&l);
  if (mha == nullptr) return false;
  mha->set_causal(causal);
  return true;
}

}  // namespace lockstep::trainer::graph
