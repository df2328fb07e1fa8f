#include "trainer/layers/pooling/pooling.h"

#include <algorithm>
#include <cmath>

#include "trainer/kernels/cpu/simd.h"
#include "trainer/kernels/cpu/threads.h"
#include "trainer/layers/convolutional/spatial_dims.h"

namespace lockstep::trainer::graph {
namespace {

// y = max(y, x) over c channels, arg[j] the index (base + j) of the input that holds it: by
// selects, not a branch per element (which mispredicted on half of them, 28% of the cnn's
// step), so the loop vectorises; the first of equal maxima keeps the gradient.
LOCKSTEP_SIMD_CLONES void MaxInto(const float* __restrict x, int64_t c, int64_t base,
                                  float* __restrict y, int64_t* __restrict arg) {
  for (int64_t j = 0; j < c; ++j) {
    const bool larger = x[j] > y[j];
    y[j] = larger ? x[j] : y[j];
    arg[j] = larger ? base + j : arg[j];
  }
}

class Pooling final : public Layer, public HasOptions<PoolOptions> {
 public:
  PoolOptions options() const override { return o_; }
  std::type_index options_type() const override { return typeid(PoolOptions); }
  Pooling(std::string name, PoolOptions o)
      : Layer(std::move(name),
              RankClass(o.mode == PoolMode::kMax ? "MaxPooling" : "AveragePooling", o.rank)),
        o_(std::move(o)) {}

  absl::StatusOr<std::vector<Shape>> Build(const std::vector<Shape>& in,
                                           const BuildContext&) override {
    if (absl::Status st = CheckRank(*this, in, o_.rank); !st.ok()) return st;
    Shape out;
    for (int a = 0; a < o_.rank; ++a) {
      const auto i = static_cast<size_t>(a);
      const AxisGeometry ax = WindowAxis(in[0][i], o_.pool_size[i], o_.strides[i], 1, o_.padding);
      if (in[0][i] >= 0 && ax.out <= 0) {
        return LayerError(*this, "input " + ShapeString(in[0]) + " is smaller than pool_size " +
                                     ShapeString(o_.pool_size));
      }
      out.push_back(ax.out);
    }
    out.push_back(in[0].back());
    built_ = true;
    return std::vector<Shape>{out};
  }

  void Forward(const Args& in, std::vector<Tensor>* out, Saved* s,
               const CallContext& ctx) override {
    const Tensor& x = *in.x[0];
    const Geo g = GeoOf(x.shape());
    Tensor& y = (*out)[0];
    y.Resize(OutShape(g));
    if (g.empty() && g.in.n > 0) {
      ctx.Report("layer '" + name() + "' (" + class_name() + "): input " + ShapeString(x.shape()) +
                 " is smaller than pool_size " + ShapeString(o_.pool_size));
      return;
    }
    const int64_t c = g.in.c;
    const float* xp = x.data();
    float* yp = y.data();
    // Examples are independent: split over the kernels' threads (a window reads k inputs).
    const int64_t cost = g.out.size() * c * g.k[0] * g.k[1] * g.k[2];
    if (o_.mode == PoolMode::kMax) {
      s->i.resize(static_cast<size_t>(y.size()));
      int64_t* arg = s->i.data();
      cpu::ParallelFor(g.in.n, cost, [&](int64_t n0, int64_t n1) {
        ForEachWindow(g, n0, n1, [&](int64_t o, const int64_t* lo, const int64_t* hi) {
          float* yr = yp + o * c;
          int64_t* ar = arg + o * c;
          bool first = true;
          ForEachIn(g, lo, hi, [&](int64_t i) {
            const float* xr = xp + i * c;
            if (first) {
              std::copy_n(xr, c, yr);
              for (int64_t j = 0; j < c; ++j) ar[j] = i * c + j;
              first = false;
              return;
            }
            MaxInto(xr, c, i * c, yr, ar);
          });
        });
      });
    } else {
      cpu::ParallelFor(g.in.n, cost, [&](int64_t n0, int64_t n1) {
        ForEachWindow(g, n0, n1, [&](int64_t o, const int64_t* lo, const int64_t* hi) {
          float* yr = yp + o * c;
          std::fill_n(yr, c, 0.0f);
          ForEachIn(g, lo, hi, [&](int64_t i) {
            const float* xr = xp + i * c;
            for (int64_t j = 0; j < c; ++j) yr[j] += xr[j];
          });
          const float inv = 1.0f / static_cast<float>(Count(lo, hi));
          for (int64_t j = 0; j < c; ++j) yr[j] *= inv;
        });
      });
    }
  }

  void Backward(const Args& in, const std::vector<Tensor>&, const std::vector<const Tensor*>& dout,
                const std::vector<bool>& need, std::vector<Tensor>* din, Saved* s) override {
    if (!need[0]) return;
    const Tensor& x = *in.x[0];
    const Geo g = GeoOf(x.shape());
    Tensor& dx = (*din)[0];
    dx.Resize(x.shape());
    if (g.empty()) {
      dx.Fill(0.0f);
      return;
    }
    const float* dy = dout[0]->data();
    float* dxp = dx.data();
    // Each example's gradient lands in its own input: split over the kernels' threads, each
    // range zeroing its examples' inputs first.
    const int64_t c = g.in.c, per_example = g.out.size() * c;
    const int64_t in_per_example = g.in.size() * c;
    auto zero = [&](int64_t n0, int64_t n1) {
      std::fill(dxp + n0 * in_per_example, dxp + n1 * in_per_example, 0.0f);
    };
    if (o_.mode == PoolMode::kMax) {
      const int64_t* arg = s->i.data();
      cpu::ParallelFor(g.in.n, per_example + in_per_example, [&](int64_t n0, int64_t n1) {
        zero(n0, n1);
        for (int64_t k = n0 * per_example; k < n1 * per_example; ++k) dxp[arg[k]] += dy[k];
      });
      return;
    }
    cpu::ParallelFor(g.in.n, per_example * g.k[0] * g.k[1] * g.k[2], [&](int64_t n0, int64_t n1) {
      zero(n0, n1);
      ForEachWindow(g, n0, n1, [&](int64_t o, const int64_t* lo, const int64_t* hi) {
        const float* dyr = dy + o * c;
        const float inv = 1.0f / static_cast<float>(Count(lo, hi));
        ForEachIn(g, lo, hi, [&](int64_t i) {
          float* dxr = dxp + i * c;
          for (int64_t j = 0; j < c; ++j) dxr[j] += dyr[j] * inv;
        });
      });
    });
  }

  const Tensor* OutputMask(const Args&, const Saved&) const override { return nullptr; }

 private:
  struct Geo {
    Dims in, out;
    int64_t k[kSpatialAxes] = {1, 1, 1}, st[kSpatialAxes] = {1, 1, 1},
            pad[kSpatialAxes] = {0, 0, 0};
    bool empty() const { return out.s[0] <= 0 || out.s[1] <= 0 || out.s[2] <= 0; }
  };

  Geo GeoOf(const Shape& x) const {
    Geo g;
    g.in = DimsOf(x, o_.rank);
    g.out = g.in;
    for (int a = 0; a < o_.rank; ++a) {
      const int ga = kSpatialAxes - o_.rank + a;
      const auto i = static_cast<size_t>(a);
      g.k[ga] = o_.pool_size[i];
      g.st[ga] = o_.strides[i];
      const AxisGeometry ax = WindowAxis(g.in.s[ga], g.k[ga], g.st[ga], 1, o_.padding);
      g.out.s[ga] = std::max<int64_t>(ax.out, 0);
      g.pad[ga] = ax.pad_before;
    }
    return g;
  }

  Shape OutShape(const Geo& g) const { return ShapeOf(g.out, o_.rank); }

  static int64_t Count(const int64_t* lo, const int64_t* hi) {
    return (hi[0] - lo[0]) * (hi[1] - lo[1]) * (hi[2] - lo[2]);
  }

  // f(o, lo, hi) per output position o (flat over the batch) of the examples [n0, n1), with
  // the window's input range [lo, hi) per axis, clipped to the input (positions in the padding
  // excluded).
  template <typename F>
  static void ForEachWindow(const Geo& g, int64_t n0, int64_t n1, F&& f) {
    int64_t o = n0 * g.out.size();
    int64_t lo[kSpatialAxes + 1], hi[kSpatialAxes + 1];
    for (int64_t n = n0; n < n1; ++n) {
      lo[kSpatialAxes] = n;  // the example, for ForEachIn
      for (int64_t o0 = 0; o0 < g.out.s[0]; ++o0) {
        Clip(g, 0, o0, lo, hi);
        for (int64_t o1 = 0; o1 < g.out.s[1]; ++o1) {
          Clip(g, 1, o1, lo, hi);
          for (int64_t o2 = 0; o2 < g.out.s[2]; ++o2, ++o) {
            Clip(g, 2, o2, lo, hi);
            f(o, lo, hi);
          }
        }
      }
    }
  }

  static void Clip(const Geo& g, int a, int64_t o, int64_t* lo, int64_t* hi) {
    const int64_t start = o * g.st[a] - g.pad[a];
    lo[a] = std::max<int64_t>(start, 0);
    hi[a] = std::min(start + g.k[a], g.in.s[a]);
  }

  // f(i) per input position i (flat over the batch) in the window.
  template <typename F>
  static void ForEachIn(const Geo& g, const int64_t* lo, const int64_t* hi, F&& f) {
    const int64_t base = lo[kSpatialAxes] * g.in.size();
    for (int64_t i0 = lo[0]; i0 < hi[0]; ++i0) {
      for (int64_t i1 = lo[1]; i1 < hi[1]; ++i1) {
        for (int64_t i2 = lo[2]; i2 < hi[2]; ++i2) {
          f(base + (i0 * g.in.s[1] + i1) * g.in.s[2] + i2);
        }
      }
    }
  }

  PoolOptions o_;
};

class GlobalPooling final : public Layer, public HasOptions<GlobalPoolOptions> {
 public:
  GlobalPoolOptions options() const override { return {rank_, mode_, keepdims_}; }
  std::type_index options_type() const override { return typeid(GlobalPoolOptions); }
  GlobalPooling(std::string name, int rank, PoolMode mode, bool keepdims)
      : Layer(
            std::move(name),
            RankClass(mode == PoolMode::kMax ? "GlobalMaxPooling" : "GlobalAveragePooling", rank)),
        rank_(rank),
        mode_(mode),
        keepdims_(keepdims) {}

  absl::StatusOr<std::vector<Shape>> Build(const std::vector<Shape>& in,
                                           const BuildContext&) override {
    if (absl::Status st = CheckRank(*this, in, rank_); !st.ok()) return st;
    Shape out = keepdims_ ? Shape(static_cast<size_t>(rank_), 1) : Shape{};
    out.push_back(in[0].back());
    built_ = true;
    return std::vector<Shape>{out};
  }

  void Forward(const Args& in, std::vector<Tensor>* out, Saved* s, const CallContext&) override {
    const Tensor& x = *in.x[0];
    const int64_t n = x.dim(0), c = x.shape().back(), steps = n > 0 ? x.size() / (n * c) : 0;
    Tensor& y = (*out)[0];
    Shape os{n};
    if (keepdims_) os.insert(os.end(), static_cast<size_t>(rank_), 1);
    os.push_back(c);
    y.Resize(os);
    y.Fill(0.0f);
    const float* xp = x.data();
    float* yp = y.data();
    if (mode_ == PoolMode::kMax) {
      s->i.resize(static_cast<size_t>(n * c));
      for (int64_t b = 0; b < n; ++b) {
        float* yr = yp + b * c;
        int64_t* ar = s->i.data() + b * c;
        for (int64_t t = 0; t < steps; ++t) {
          const float* xr = xp + (b * steps + t) * c;
          for (int64_t j = 0; j < c; ++j) {
            if (t == 0 || xr[j] > yr[j]) {
              yr[j] = xr[j];
              ar[j] = (b * steps + t) * c + j;
            }
          }
        }
      }
      return;
    }
    const Tensor* mask = Mask(in, n, steps);
    s->t.resize(1);
    Tensor& scale = s->t[0];  // per (example, step): what its value is multiplied by
    scale.Resize({n, steps});
    for (int64_t b = 0; b < n; ++b) {
      float count = static_cast<float>(steps);
      if (mask != nullptr) {
        count = 0;
        for (int64_t t = 0; t < steps; ++t) count += (*mask)[b * steps + t] != 0 ? 1.0f : 0.0f;
      }
      for (int64_t t = 0; t < steps; ++t) {
        const bool on = mask == nullptr || (*mask)[b * steps + t] != 0;
        scale[b * steps + t] = on && count > 0 ? 1.0f / count : 0.0f;
      }
      float* yr = yp + b * c;
      for (int64_t t = 0; t < steps; ++t) {
        const float w = scale[b * steps + t];
        if (w == 0) continue;
        const float* xr = xp + (b * steps + t) * c;
        for (int64_t j = 0; j < c; ++j) yr[j] += xr[j] * w;
      }
    }
  }

  void Backward(const Args& in, const std::vector<Tensor>&, const std::vector<const Tensor*>& dout,
                const std::vector<bool>& need, std::vector<Tensor>* din, Saved* s) override {
    if (!need[0]) return;
    const Tensor& x = *in.x[0];
    const int64_t n = x.dim(0), c = x.shape().back(), steps = n > 0 ? x.size() / (n * c) : 0;
    Tensor& dx = (*din)[0];
    dx.Resize(x.shape());
    dx.Fill(0.0f);
    const float* dy = dout[0]->data();
    if (steps == 0) return;
    if (mode_ == PoolMode::kMax) {
      for (int64_t k = 0; k < n * c; ++k) dx[s->i[static_cast<size_t>(k)]] += dy[k];
      return;
    }
    const Tensor& scale = s->t[0];
    for (int64_t b = 0; b < n; ++b) {
      for (int64_t t = 0; t < steps; ++t) {
        const float w = scale[b * steps + t];
        float* dxr = dx.data() + (b * steps + t) * c;
        for (int64_t j = 0; j < c; ++j) dxr[j] = dy[b * c + j] * w;
      }
    }
  }

  const Tensor* OutputMask(const Args&, const Saved&) const override { return nullptr; }

 private:
  // A [batch, steps] mask GlobalAveragePooling1D honours (null otherwise).
  const Tensor* Mask(const Args& in, int64_t n, int64_t steps) const {
    const Tensor* m = in.mask0();
    if (rank_ != 1 || m == nullptr || m->size() != n * steps) return nullptr;
    return m;
  }

  int rank_;
  PoolMode mode_;
  bool keepdims_;
};

}  // namespace

cpu::ConvGeometry PoolGeometry(const PoolOptions& p, const Shape& x) {
  cpu::ConvGeometry g;
  g.rank = p.rank;
  g.n = x[0];
  g.c_in = g.c_out = x.back();
  for (int a = 0; a < g.rank; ++a) {
    const auto i = static_cast<size_t>(a);
    const AxisGeometry ax = WindowAxis(x[i + 1], p.pool_size[i], p.strides[i], 1, p.padding);
    g.in[i] = x[i + 1];
    g.out[i] = ax.out;
    g.kernel[i] = p.pool_size[i];
    g.stride[i] = p.strides[i];
    g.dilation[i] = 1;
    g.pad_before[i] = ax.pad_before;
  }
  return g;
}

std::unique_ptr<Layer> MakePooling(std::string name, PoolOptions o) {
  return std::make_unique<Pooling>(std::move(name), std::move(o));
}
std::unique_ptr<Layer> MakeGlobalPooling(std::string name, int rank, PoolMode mode, bool keepdims) {
  return std::make_unique<GlobalPooling>(std::move(name), rank, mode, keepdims);
}

}  // namespace lockstep::trainer::graph
