#include "trainer/layers/normalization/normalization.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "trainer/kernels/cpu/simd.h"
#include "trainer/kernels/cpu/threads.h"

namespace lockstep::trainer::graph {
namespace {

// Keras 3's masked moments divide by sum(mask) + this (backend.epsilon()).
constexpr double kMaskEpsilon = 1e-7;

// BatchNormalization's passes over [rows, c] data, compiled for each vector width and split
// over the kernels' threads by rows. Sums run in float over blocks of kSumBlock rows (which
// lets the inner loops vectorise) and gather in double in block order, whichever thread summed
// a block: exact enough, and the same bits at every thread count.
constexpr int64_t kSumBlock = 64;

int64_t Blocks(int64_t rows) { return (rows + kSumBlock - 1) / kSumBlock; }

// Adds the per-block sums `part` ([blocks, c]) into out in block order.
void Gather(const std::vector<float>& part, int64_t c, double* out) {
  for (size_t b = 0; b < part.size(); b += static_cast<size_t>(c)) {
    for (int64_t j = 0; j < c; ++j) out[j] += part[b + static_cast<size_t>(j)];
  }
}

// part[b, j] = sum over the rows of blocks [b0, b1) of m_r (x[r, j] - center[j]) (squared
// when `square`), m_r the mask's weight of row r (1 without a mask; rows of weight 0 skipped);
// center null means 0.
LOCKSTEP_SIMD_CLONES void BlockSums(const float* x, int64_t rows, int64_t c, const Tensor* mask,
                                    const float* center, bool square, int64_t b0, int64_t b1,
                                    float* part) {
  for (int64_t blk = b0; blk < b1; ++blk) {
    float* __restrict s = part + blk * c;
    std::fill_n(s, c, 0.0f);
    const int64_t r0 = blk * kSumBlock;
    for (int64_t r = r0; r < std::min(rows, r0 + kSumBlock); ++r) {
      const float m = mask == nullptr ? 1.0f : (*mask)[r];
      if (m == 0) continue;
      const float* __restrict xr = x + r * c;
      if (center == nullptr) {
        for (int64_t j = 0; j < c; ++j) s[j] += m * xr[j];
      } else if (square) {
        for (int64_t j = 0; j < c; ++j) {
          const float v = xr[j] - center[j];
          s[j] += m * v * v;
        }
      } else {
        for (int64_t j = 0; j < c; ++j) s[j] += xr[j] - center[j];
      }
    }
  }
}

// out[j] += the sums of BlockSums over all rows.
void ChannelSums(const float* x, int64_t rows, int64_t c, const Tensor* mask, const float* center,
                 double* out, bool square = true) {
  std::vector<float> part(static_cast<size_t>(Blocks(rows) * c));
  cpu::ParallelFor(Blocks(rows), kSumBlock * c * 3, [&](int64_t b0, int64_t b1) {
    BlockSums(x, rows, c, mask, center, square, b0, b1, part.data());
  });
  Gather(part, c, out);
}

// y = x * scale + shift per channel, rows [r0, r1).
LOCKSTEP_SIMD_CLONES void ScaleShiftRows(const float* x, int64_t r0, int64_t r1, int64_t c,
                                         const float* scale, const float* shift, float* y) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* __restrict xr = x + r * c;
    float* __restrict yr = y + r * c;
    for (int64_t j = 0; j < c; ++j) yr[j] = xr[j] * scale[j] + shift[j];
  }
}

void ScaleShift(const float* x, int64_t rows, int64_t c, const float* scale, const float* shift,
                float* y) {
  cpu::ParallelFor(rows, c * 2,
                   [&](int64_t r0, int64_t r1) { ScaleShiftRows(x, r0, r1, c, scale, shift, y); });
}

// pa[b, j] = sum dy, pb[b, j] = sum dy (x - mean) over the rows of blocks [b0, b1).
LOCKSTEP_SIMD_CLONES void BlockGradSums(const float* x, const float* dy, int64_t rows, int64_t c,
                                        const float* mean, int64_t b0, int64_t b1, float* pa,
                                        float* pb) {
  for (int64_t blk = b0; blk < b1; ++blk) {
    float* __restrict sa = pa + blk * c;
    float* __restrict sb = pb + blk * c;
    std::fill_n(sa, c, 0.0f);
    std::fill_n(sb, c, 0.0f);
    const int64_t r0 = blk * kSumBlock;
    for (int64_t r = r0; r < std::min(rows, r0 + kSumBlock); ++r) {
      const float* __restrict xr = x + r * c;
      const float* __restrict gr = dy + r * c;
      for (int64_t j = 0; j < c; ++j) {
        sa[j] += gr[j];
        sb[j] += gr[j] * (xr[j] - mean[j]);
      }
    }
  }
}

// a[j] += sum dy, b[j] += sum dy (x - mean).
void GradSums(const float* x, const float* dy, int64_t rows, int64_t c, const float* mean,
              double* a, double* b) {
  std::vector<float> pa(static_cast<size_t>(Blocks(rows) * c)), pb(pa.size());
  cpu::ParallelFor(Blocks(rows), kSumBlock * c * 4, [&](int64_t b0, int64_t b1) {
    BlockGradSums(x, dy, rows, c, mean, b0, b1, pa.data(), pb.data());
  });
  Gather(pa, c, a);
  Gather(pb, c, b);
}

// dx = dy gr_scale + m (k0 + k1 (x - mean)), m the row's mask weight (0 in inference), rows
// [r0, r1).
LOCKSTEP_SIMD_CLONES void InputGradRows(const float* x, const float* dy, int64_t r0, int64_t r1,
                                        int64_t c, bool batch, const Tensor* mask,
                                        const float* mean, const float* gr_scale, const float* k0,
                                        const float* k1, float* dx) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* __restrict xr = x + r * c;
    const float* __restrict g = dy + r * c;
    float* __restrict dr = dx + r * c;
    const float m = !batch ? 0.0f : mask == nullptr ? 1.0f : (*mask)[r];
    for (int64_t j = 0; j < c; ++j)
      dr[j] = g[j] * gr_scale[j] + m * (k0[j] + k1[j] * (xr[j] - mean[j]));
  }
}

void InputGrad(const float* x, const float* dy, int64_t rows, int64_t c, bool batch,
               const Tensor* mask, const float* mean, const float* gr_scale, const float* k0,
               const float* k1, float* dx) {
  cpu::ParallelFor(rows, c * 5, [&](int64_t r0, int64_t r1) {
    InputGradRows(x, dy, r0, r1, c, batch, mask, mean, gr_scale, k0, k1, dx);
  });
}

class BatchNorm final : public Layer, public HasOptions<BatchNormOptions> {
 public:
  BatchNormOptions options() const override { return o_; }
  std::type_index options_type() const override { return typeid(BatchNormOptions); }
  BatchNorm(std::string name, BatchNormOptions o)
      : Layer(std::move(name), "BatchNormalization"), o_(std::move(o)) {}

  absl::StatusOr<std::vector<Shape>> Build(const std::vector<Shape>& in,
                                           const BuildContext& ctx) override {
    if (in.size() != 1 || in[0].empty()) return LayerError(*this, "takes one input of rank >= 2");
    const auto rank = static_cast<int64_t>(in[0].size());  // without the batch axis
    if (o_.axis != -1 && o_.axis != rank) {
      return LayerError(*this, "axis " + std::to_string(o_.axis) +
                                   " is not the last axis of input " + ShapeString(in[0]) +
                                   " (only channels-last normalization is supported)");
    }
    const int64_t c = in[0].back();
    if (c <= 0) return LayerError(*this, "the last axis of its input must be known");
    if (!built_) {
      if (o_.scale) {
        Weight& g = AddWeight("gamma", Initialize(o_.gamma_initializer, {c}, ctx.rng));
        g.l1 = o_.gamma_l1;
        g.l2 = o_.gamma_l2;
      }
      if (o_.center) {
        Weight& b = AddWeight("beta", Initialize(o_.beta_initializer, {c}, ctx.rng));
        b.l1 = o_.beta_l1;
        b.l2 = o_.beta_l2;
      }
      AddWeight("moving_mean", Initialize(o_.moving_mean_initializer, {c}, ctx.rng), false);
      AddWeight("moving_variance", Initialize(o_.moving_variance_initializer, {c}, ctx.rng), false);
      c_ = c;
      built_ = true;
    } else if (c != c_) {
      return LayerError(*this, "called on inputs of " + std::to_string(c) +
                                   " channels, built for " + std::to_string(c_));
    }
    return in;
  }

  void Forward(const Args& in, std::vector<Tensor>* out, Saved* s,
               const CallContext& ctx) override {
    const Tensor& x = *in.x[0];
    const int64_t c = c_, rows = x.size() / c;
    const bool batch = ctx.training && trainable();
    const Tensor* mask = batch ? Mask(in, rows) : nullptr;
    s->t.resize(3);
    s->i.assign({batch ? 1 : 0});
    Tensor& mean = s->t[0];
    Tensor& rstd = s->t[1];
    Tensor& denom = s->t[2];  // the statistics' divisor
    mean.Resize({c});
    rstd.Resize({c});
    denom.Resize({1});
    const float* xp = x.data();
    if (batch) {
      std::vector<double> sum(static_cast<size_t>(c), 0.0), sq(static_cast<size_t>(c), 0.0);
      double d = static_cast<double>(rows);
      if (mask != nullptr) {
        d = kMaskEpsilon;
        for (int64_t r = 0; r < rows; ++r) d += (*mask)[r];
      }
      ChannelSums(xp, rows, c, mask, nullptr, sum.data());
      for (int64_t j = 0; j < c; ++j) mean[j] = static_cast<float>(sum[static_cast<size_t>(j)] / d);
      ChannelSums(xp, rows, c, mask, mean.data(), sq.data());
      Tensor& mm = Moving(0);
      Tensor& mv = Moving(1);
      const float mo = o_.momentum;
      for (int64_t j = 0; j < c; ++j) {
        const auto var = static_cast<float>(sq[static_cast<size_t>(j)] / d);
        rstd[j] = 1.0f / std::sqrt(var + o_.epsilon);
        mm[j] = mm[j] * mo + mean[j] * (1 - mo);
        mv[j] = mv[j] * mo + var * (1 - mo);
      }
      denom[0] = static_cast<float>(d);
    } else {
      const Tensor& mm = Moving(0);
      const Tensor& mv = Moving(1);
      for (int64_t j = 0; j < c; ++j) {
        mean[j] = mm[j];
        rstd[j] = 1.0f / std::sqrt(mv[j] + o_.epsilon);
      }
    }
    // y = x * scale + shift per channel.
    std::vector<float> scale(static_cast<size_t>(c)), shift(static_cast<size_t>(c));
    for (int64_t j = 0; j < c; ++j) {
      const auto u = static_cast<size_t>(j);
      scale[u] = rstd[j] * (o_.scale ? Gamma()[j] : 1.0f);
      shift[u] = (o_.center ? Beta()[j] : 0.0f) - mean[j] * scale[u];
    }
    Tensor& y = (*out)[0];
    y.Resize(x.shape());
    ScaleShift(xp, rows, c, scale.data(), shift.data(), y.data());
  }

  void Backward(const Args& in, const std::vector<Tensor>&, const std::vector<const Tensor*>& dout,
                const std::vector<bool>& need, std::vector<Tensor>* din, Saved* s) override {
    const Tensor& x = *in.x[0];
    const Tensor& dy = *dout[0];
    const int64_t c = c_, rows = x.size() / c;
    const bool batch = s->i[0] != 0;
    const Tensor* mask = batch ? Mask(in, rows) : nullptr;
    const Tensor& mean = s->t[0];
    const Tensor& rstd = s->t[1];
    const float* xp = x.data();
    const float* gp = dy.data();
    // Per channel: A = sum dy, B = sum dy (x - mean), Q = sum m (x - mean).
    std::vector<double> a(static_cast<size_t>(c), 0.0), b(a), q(a);
    GradSums(xp, gp, rows, c, mean.data(), a.data(), b.data());
    if (mask != nullptr) ChannelSums(xp, rows, c, mask, mean.data(), q.data(), /*square=*/false);
    if (trainable()) {
      size_t w = 0;
      if (o_.scale && weights()[w].trainable) {
        float* dg = weights()[w].grad.data();
        for (int64_t j = 0; j < c; ++j) {
          dg[j] += static_cast<float>(b[static_cast<size_t>(j)]) * rstd[j];
        }
      }
      if (o_.scale) ++w;
      if (o_.center && weights()[w].trainable) {
        float* db = weights()[w].grad.data();
        for (int64_t j = 0; j < c; ++j) db[j] += static_cast<float>(a[static_cast<size_t>(j)]);
      }
    }
    if (!need[0]) return;
    Tensor& dx = (*din)[0];
    dx.Resize(x.shape());
    float* dxp = dx.data();
    // dx = g r + m (dmean + 2 dvar (x - mean)) / D with g = dy gamma; in inference only g r.
    std::vector<float> gr_scale(static_cast<size_t>(c)), k0(gr_scale), k1(gr_scale);
    const double d = batch ? s->t[2][0] : 1.0;
    for (int64_t j = 0; j < c; ++j) {
      const auto u = static_cast<size_t>(j);
      const double gamma = o_.scale ? Gamma()[j] : 1.0f;
      const double r = rstd[j];
      gr_scale[u] = static_cast<float>(gamma * r);
      if (batch) {
        const double dvar = -0.5 * r * r * r * gamma * b[u];
        const double dmean = -r * gamma * a[u] - 2.0 * dvar * q[u] / d;
        k0[u] = static_cast<float>(dmean / d);
        k1[u] = static_cast<float>(2.0 * dvar / d);
      }
    }
    InputGrad(xp, gp, rows, c, batch, mask, mean.data(), gr_scale.data(), k0.data(), k1.data(),
              dxp);
  }

 private:
  // A [batch, time] mask over the rows (null when absent or shaped otherwise).
  static const Tensor* Mask(const Args& in, int64_t rows) {
    const Tensor* m = in.mask0();
    return m != nullptr && m->size() == rows ? m : nullptr;
  }
  const Tensor& Gamma() const { return weights()[0].value; }
  const Tensor& Beta() const { return weights()[o_.scale ? 1 : 0].value; }
  // 0: moving_mean, 1: moving_variance.
  Tensor& Moving(size_t k) { return weights()[(o_.scale ? 1 : 0) + (o_.center ? 1 : 0) + k].value; }

  BatchNormOptions o_;
  int64_t c_ = 0;
};

class LayerNorm final : public Layer, public HasOptions<LayerNormOptions> {
 public:
  LayerNormOptions options() const override { return o_; }
  std::type_index options_type() const override { return typeid(LayerNormOptions); }
  LayerNorm(std::string name, LayerNormOptions o)
      : Layer(std::move(name), "LayerNormalization"), o_(std::move(o)) {}

  absl::StatusOr<std::vector<Shape>> Build(const std::vector<Shape>& in,
                                           const BuildContext& ctx) override {
    if (in.size() != 1 || in[0].empty()) return LayerError(*this, "takes one input of rank >= 2");
    const auto rank = static_cast<int64_t>(in[0].size()) + 1;  // with the batch axis
    std::vector<int64_t> axes;
    for (int64_t a : o_.axes) axes.push_back(a < 0 ? a + rank : a);
    bool trailing = !axes.empty() && static_cast<int64_t>(axes.size()) < rank;
    for (size_t i = 0; i < axes.size(); ++i) {
      trailing = trailing && axes[i] == rank - static_cast<int64_t>(axes.size() - i);
    }
    if (!trailing) {
      return LayerError(*this, "axis " + ShapeString(o_.axes) + " of input " + ShapeString(in[0]) +
                                   " is not supported (the axes must be the trailing ones, "
                                   "in order)");
    }
    Shape group(in[0].end() - static_cast<int64_t>(axes.size()), in[0].end());
    if (std::any_of(group.begin(), group.end(), [](int64_t d) { return d <= 0; })) {
      return LayerError(*this,
                        "the normalized axes of input " + ShapeString(in[0]) + " must be known");
    }
    if (!built_) {
      if (o_.scale) {
        Weight& g = AddWeight("gamma", Initialize(o_.gamma_initializer, group, ctx.rng));
        g.l1 = o_.gamma_l1;
        g.l2 = o_.gamma_l2;
      }
      if (o_.center) {
        Weight& b = AddWeight("beta", Initialize(o_.beta_initializer, group, ctx.rng));
        b.l1 = o_.beta_l1;
        b.l2 = o_.beta_l2;
      }
      group_ = group;
      built_ = true;
    } else if (group != group_) {
      return LayerError(*this, "called on input " + ShapeString(in[0]) + ", built for axes of " +
                                   ShapeString(group_));
    }
    return in;
  }

  void Forward(const Args& in, std::vector<Tensor>* out, Saved* s, const CallContext&) override {
    const Tensor& x = *in.x[0];
    const int64_t g = NumElements(group_), rows = x.size() / g;
    s->t.resize(2);
    Tensor& mean = s->t[0];
    Tensor& rstd = s->t[1];
    mean.Resize({rows});
    rstd.Resize({rows});
    Tensor& y = (*out)[0];
    y.Resize(x.shape());
    const float* gamma = o_.scale ? weights()[0].value.data() : nullptr;
    const float* beta = o_.center ? weights()[o_.scale ? 1 : 0].value.data() : nullptr;
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x.data() + r * g;
      float* yr = y.data() + r * g;
      double sum = 0;
      for (int64_t j = 0; j < g; ++j) sum += xr[j];
      const auto mu = static_cast<float>(sum / static_cast<double>(g));
      double sq = 0;
      for (int64_t j = 0; j < g; ++j) {
        const double v = xr[j] - mu;
        sq += v * v;
      }
      const auto rs = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(g) + o_.epsilon));
      mean[r] = mu;
      rstd[r] = rs;
      for (int64_t j = 0; j < g; ++j) {
        float v = (xr[j] - mu) * rs;
        if (gamma != nullptr) v *= gamma[j];
        if (beta != nullptr) v += beta[j];
        yr[j] = v;
      }
    }
  }

  void Backward(const Args& in, const std::vector<Tensor>&, const std::vector<const Tensor*>& dout,
                const std::vector<bool>& need, std::vector<Tensor>* din, Saved* s) override {
    const Tensor& x = *in.x[0];
    const Tensor& dy = *dout[0];
    const int64_t g = NumElements(group_), rows = x.size() / g;
    const Tensor& mean = s->t[0];
    const Tensor& rstd = s->t[1];
    const float* gamma = o_.scale ? weights()[0].value.data() : nullptr;
    float* dgamma = o_.scale && weights()[0].trainable ? weights()[0].grad.data() : nullptr;
    const size_t bi = o_.scale ? 1 : 0;
    float* dbeta = o_.center && weights()[bi].trainable ? weights()[bi].grad.data() : nullptr;
    if (need[0]) (*din)[0].Resize(x.shape());
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x.data() + r * g;
      const float* gr = dy.data() + r * g;
      const float mu = mean[r], rs = rstd[r];
      double sg = 0, sgx = 0;  // sums of gamma dy and of gamma dy xhat
      for (int64_t j = 0; j < g; ++j) {
        const float xhat = (xr[j] - mu) * rs;
        const float gj = gamma != nullptr ? gr[j] * gamma[j] : gr[j];
        sg += gj;
        sgx += static_cast<double>(gj) * xhat;
        if (dgamma != nullptr) dgamma[j] += gr[j] * xhat;
        if (dbeta != nullptr) dbeta[j] += gr[j];
      }
      if (!need[0]) continue;
      const auto mg = static_cast<float>(sg / static_cast<double>(g));
      const auto mgx = static_cast<float>(sgx / static_cast<double>(g));
      float* dr = (*din)[0].data() + r * g;
      for (int64_t j = 0; j < g; ++j) {
        const float xhat = (xr[j] - mu) * rs;
        const float gj = gamma != nullptr ? gr[j] * gamma[j] : gr[j];
        dr[j] = rs * (gj - mg - xhat * mgx);
      }
    }
  }

 private:
  LayerNormOptions o_;
  Shape group_;
};
}  // namespace

std::unique_ptr<Layer> MakeBatchNormalization(std::string name, BatchNormOptions o) {
  return std::make_unique<BatchNorm>(std::move(name), std::move(o));
}
std::unique_ptr<Layer> MakeLayerNormalization(std::string name, LayerNormOptions o) {
  return std::make_unique<LayerNorm>(std::move(name), std::move(o));
}

}  // namespace lockstep::trainer::graph
