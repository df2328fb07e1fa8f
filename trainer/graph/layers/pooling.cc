#include "trainer/graph/layers/pooling.h"

#include <algorithm>
#include <cmath>

namespace lockstep::trainer::graph {
namespace {

std::string RankClass(const char* base, int rank) {
  return std::string(base) + std::to_string(rank) + "D";
}

// Checks one input [spatial (rank axes)..., channels] with known channels.
absl::Status CheckRank(const Layer& l, const std::vector<Shape>& in, int rank) {
  if (in.size() != 1 || in[0].size() != static_cast<size_t>(rank) + 1) {
    return LayerError(l, "takes one input of rank " + std::to_string(rank + 2) + " (batch, " +
                             (rank == 1 ? "steps" : "spatial axes") +
                             ", channels), got per-example shape " +
                             ShapeString(in.empty() ? Shape{} : in[0]));
  }
  return absl::OkStatus();
}

// A channels-last batch with its spatial axes padded to three (leading axes of length 1).
struct Dims {
  int64_t n = 0, c = 0;
  int64_t s[kSpatialAxes] = {1, 1, 1};
  int64_t size() const { return s[0] * s[1] * s[2]; }
};

Dims DimsOf(const Shape& x, int rank) {
  Dims d;
  d.n = x[0];
  d.c = x.back();
  for (int a = 0; a < rank; ++a) d.s[kSpatialAxes - rank + a] = x[static_cast<size_t>(a) + 1];
  return d;
}

Shape ShapeOf(const Dims& d, int rank) {
  Shape s{d.n};
  for (int a = 0; a < rank; ++a) s.push_back(d.s[kSpatialAxes - rank + a]);
  s.push_back(d.c);
  return s;
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
    if (o_.mode == PoolMode::kMax) {
      s->i.resize(static_cast<size_t>(y.size()));
      int64_t* arg = s->i.data();
      ForEachWindow(g, [&](int64_t o, const int64_t* lo, const int64_t* hi) {
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
          for (int64_t j = 0; j < c; ++j) {
            if (xr[j] > yr[j]) {
              yr[j] = xr[j];
              ar[j] = i * c + j;
            }
          }
        });
      });
    } else {
      ForEachWindow(g, [&](int64_t o, const int64_t* lo, const int64_t* hi) {
        float* yr = yp + o * c;
        std::fill_n(yr, c, 0.0f);
        ForEachIn(g, lo, hi, [&](int64_t i) {
          const float* xr = xp + i * c;
          for (int64_t j = 0; j < c; ++j) yr[j] += xr[j];
        });
        const float inv = 1.0f / static_cast<float>(Count(lo, hi));
        for (int64_t j = 0; j < c; ++j) yr[j] *= inv;
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
    dx.Fill(0.0f);
    if (g.empty()) return;
    const float* dy = dout[0]->data();
    float* dxp = dx.data();
    if (o_.mode == PoolMode::kMax) {
      const int64_t n = dout[0]->size();
      for (int64_t k = 0; k < n; ++k) dxp[s->i[static_cast<size_t>(k)]] += dy[k];
      return;
    }
    const int64_t c = g.in.c;
    ForEachWindow(g, [&](int64_t o, const int64_t* lo, const int64_t* hi) {
      const float* dyr = dy + o * c;
      const float inv = 1.0f / static_cast<float>(Count(lo, hi));
      ForEachIn(g, lo, hi, [&](int64_t i) {
        float* dxr = dxp + i * c;
        for (int64_t j = 0; j < c; ++j) dxr[j] += dyr[j] * inv;
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

  // f(o, lo, hi) per output position o (flat over the batch) with the window's input range
  // [lo, hi) per axis, clipped to the input (positions in the padding excluded).
  template <typename F>
  static void ForEachWindow(const Geo& g, F&& f) {
    int64_t o = 0;
    int64_t lo[kSpatialAxes + 1], hi[kSpatialAxes + 1];
    for (int64_t n = 0; n < g.in.n; ++n) {
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

// Copies between a small box and the same-sized box at `off` inside a big one, per example:
// to_big: big[n, off + p] = small[n, p] (src is small, dst big); else small[n, p] =
// big[n, off + p] (src is big, dst small).
void BoxCopy(const Dims& big, const Dims& small, const int64_t* off, bool to_big, const float* src,
             float* dst) {
  const int64_t c = small.c, run = small.s[2] * c;
  for (int64_t n = 0; n < small.n; ++n) {
    for (int64_t i0 = 0; i0 < small.s[0]; ++i0) {
      for (int64_t i1 = 0; i1 < small.s[1]; ++i1) {
        const int64_t srow = ((n * small.s[0] + i0) * small.s[1] + i1) * small.s[2] * c;
        const int64_t brow =
            (((n * big.s[0] + i0 + off[0]) * big.s[1] + i1 + off[1]) * big.s[2] + off[2]) * c;
        if (to_big) {
          std::copy_n(src + srow, run, dst + brow);
        } else {
          std::copy_n(src + brow, run, dst + srow);
        }
      }
    }
  }
}

// ZeroPadding (grow) and Cropping (shrink).
class PadCrop final : public Layer, public HasOptions<PadCropOptions> {
 public:
  PadCropOptions options() const override { return {rank_, pairs_, pad_}; }
  std::type_index options_type() const override { return typeid(PadCropOptions); }
  PadCrop(std::string name, int rank, AxisPairs pairs, bool pad)
      : Layer(std::move(name), RankClass(pad ? "ZeroPadding" : "Cropping", rank)),
        rank_(rank),
        pairs_(std::move(pairs)),
        pad_(pad) {}

  absl::StatusOr<std::vector<Shape>> Build(const std::vector<Shape>& in,
                                           const BuildContext&) override {
    if (absl::Status st = CheckRank(*this, in, rank_); !st.ok()) return st;
    Shape out = in[0];
    for (int a = 0; a < rank_; ++a) {
      const auto i = static_cast<size_t>(a);
      if (out[i] < 0) continue;
      out[i] = Length(a, out[i]);
      if (out[i] <= 0) {
        return LayerError(*this, "cropping removes every position of axis " +
                                     std::to_string(a + 1) + " of input " + ShapeString(in[0]));
      }
    }
    built_ = true;
    return std::vector<Shape>{out};
  }

  void Forward(const Args& in, std::vector<Tensor>* out, Saved*, const CallContext& ctx) override {
    const Tensor& x = *in.x[0];
    Dims xd = DimsOf(x.shape(), rank_), yd = xd;
    int64_t off[kSpatialAxes] = {0, 0, 0};
    bool ok = true;
    for (int a = 0; a < rank_; ++a) {
      const int ga = kSpatialAxes - rank_ + a;
      yd.s[ga] = Length(a, xd.s[ga]);
      off[ga] = pairs_[static_cast<size_t>(a)].first;
      if (yd.s[ga] <= 0) {
        yd.s[ga] = 0;
        ok = false;
      }
    }
    Tensor& y = (*out)[0];
    y.Resize(ShapeOf(yd, rank_));
    if (!ok) {
      ctx.Report("layer '" + name() + "' (" + class_name() + "): cropping removes every position" +
                 " of input " + ShapeString(x.shape()));
      return;
    }
    if (pad_) {
      y.Fill(0.0f);
      BoxCopy(yd, xd, off, true, x.data(), y.data());
    } else {
      BoxCopy(xd, yd, off, false, x.data(), y.data());
    }
  }

  void Backward(const Args& in, const std::vector<Tensor>&, const std::vector<const Tensor*>& dout,
                const std::vector<bool>& need, std::vector<Tensor>* din, Saved*) override {
    if (!need[0]) return;
    const Tensor& x = *in.x[0];
    const Tensor& dy = *dout[0];
    Dims xd = DimsOf(x.shape(), rank_), yd = DimsOf(dy.shape(), rank_);
    int64_t off[kSpatialAxes] = {0, 0, 0};
    for (int a = 0; a < rank_; ++a)
      off[kSpatialAxes - rank_ + a] = pairs_[static_cast<size_t>(a)].first;
    Tensor& dx = (*din)[0];
    dx.Resize(x.shape());
    if (yd.size() == 0) {
      dx.Fill(0.0f);
      return;
    }
    if (pad_) {
      BoxCopy(yd, xd, off, false, dy.data(), dx.data());
    } else {
      dx.Fill(0.0f);
      BoxCopy(xd, yd, off, true, dy.data(), dx.data());
    }
  }

  const Tensor* OutputMask(const Args&, const Saved&) const override { return nullptr; }

 private:
  int64_t Length(int a, int64_t in) const {
    const auto& p = pairs_[static_cast<size_t>(a)];
    return pad_ ? in + p.first + p.second : in - p.first - p.second;
  }

  int rank_;
  AxisPairs pairs_;
  bool pad_;
};

class UpSampling final : public Layer, public HasOptions<UpSamplingOptions> {
 public:
  UpSamplingOptions options() const override { return {rank_, size_, interp_}; }
  std::type_index options_type() const override { return typeid(UpSamplingOptions); }
  UpSampling(std::string name, int rank, std::vector<int64_t> size, Interpolation interp)
      : Layer(std::move(name), RankClass("UpSampling", rank)),
        rank_(rank),
        size_(std::move(size)),
        interp_(interp) {}

  absl::StatusOr<std::vector<Shape>> Build(const std::vector<Shape>& in,
                                           const BuildContext&) override {
    if (absl::Status st = CheckRank(*this, in, rank_); !st.ok()) return st;
    Shape out = in[0];
    for (int a = 0; a < rank_; ++a) {
      const auto i = static_cast<size_t>(a);
      if (out[i] >= 0) out[i] *= size_[i];
    }
    built_ = true;
    return std::vector<Shape>{out};
  }

  void Forward(const Args& in, std::vector<Tensor>* out, Saved*, const CallContext&) override {
    const Tensor& x = *in.x[0];
    const Dims xd = DimsOf(x.shape(), rank_);
    const Dims yd = Up(xd);
    Tensor& y = (*out)[0];
    y.Resize(ShapeOf(yd, rank_));
    const int64_t c = xd.c;
    if (interp_ == Interpolation::kBilinear) {
      Bilinear(xd, yd, x.data(), y.data(), true);
      return;
    }
    const float* xp = x.data();
    float* yp = y.data();
    int64_t o = 0;
    for (int64_t n = 0; n < yd.n; ++n) {
      for (int64_t o0 = 0; o0 < yd.s[0]; ++o0) {
        for (int64_t o1 = 0; o1 < yd.s[1]; ++o1) {
          const int64_t row = ((n * xd.s[0] + o0 / Sz(0)) * xd.s[1] + o1 / Sz(1)) * xd.s[2];
          for (int64_t o2 = 0; o2 < yd.s[2]; ++o2, ++o) {
            std::copy_n(xp + (row + o2 / Sz(2)) * c, c, yp + o * c);
          }
        }
      }
    }
  }

  void Backward(const Args& in, const std::vector<Tensor>&, const std::vector<const Tensor*>& dout,
                const std::vector<bool>& need, std::vector<Tensor>* din, Saved*) override {
    if (!need[0]) return;
    const Tensor& x = *in.x[0];
    const Dims xd = DimsOf(x.shape(), rank_);
    const Dims yd = Up(xd);
    Tensor& dx = (*din)[0];
    dx.Resize(x.shape());
    dx.Fill(0.0f);
    const int64_t c = xd.c;
    if (interp_ == Interpolation::kBilinear) {
      Bilinear(xd, yd, dout[0]->data(), dx.data(), false);
      return;
    }
    const float* dy = dout[0]->data();
    float* dxp = dx.data();
    int64_t o = 0;
    for (int64_t n = 0; n < yd.n; ++n) {
      for (int64_t o0 = 0; o0 < yd.s[0]; ++o0) {
        for (int64_t o1 = 0; o1 < yd.s[1]; ++o1) {
          const int64_t row = ((n * xd.s[0] + o0 / Sz(0)) * xd.s[1] + o1 / Sz(1)) * xd.s[2];
          for (int64_t o2 = 0; o2 < yd.s[2]; ++o2, ++o) {
            float* d = dxp + (row + o2 / Sz(2)) * c;
            const float* g = dy + o * c;
            for (int64_t j = 0; j < c; ++j) d[j] += g[j];
          }
        }
      }
    }
  }

  const Tensor* OutputMask(const Args&, const Saved&) const override { return nullptr; }

 private:
  // The repeat count of padded axis a (1 for the padding axes).
  int64_t Sz(int a) const {
    const int la = a - (kSpatialAxes - rank_);
    return la < 0 ? 1 : size_[static_cast<size_t>(la)];
  }
  Dims Up(const Dims& x) const {
    Dims y = x;
    for (int a = 0; a < kSpatialAxes; ++a) y.s[a] *= Sz(a);
    return y;
  }

  // One axis of TensorFlow's half-pixel bilinear resize: source = (o + 0.5) / scale - 0.5,
  // lower = max(floor(source), 0), upper = min(ceil(source), in - 1), weight of upper =
  // source - floor(source).
  struct Lerp {
    int64_t lo, hi;
    float w;
  };
  static std::vector<Lerp> Axis(int64_t in, int64_t out) {
    std::vector<Lerp> l(static_cast<size_t>(out));
    const float scale = static_cast<float>(in) / static_cast<float>(out);
    for (int64_t o = 0; o < out; ++o) {
      const float src = (static_cast<float>(o) + 0.5f) * scale - 0.5f;
      const float fl = std::floor(src);
      Lerp& e = l[static_cast<size_t>(o)];
      e.lo = std::max<int64_t>(static_cast<int64_t>(fl), 0);
      e.hi = std::min<int64_t>(static_cast<int64_t>(std::ceil(src)), in - 1);
      e.w = src - fl;
    }
    return l;
  }

  // forward: b = resize(a); else a += resize^T(b) (a is dx, b is dy).
  void Bilinear(const Dims& xd, const Dims& yd, const float* src, float* dst, bool forward) const {
    const std::vector<Lerp> ly = Axis(xd.s[1], yd.s[1]), lx = Axis(xd.s[2], yd.s[2]);
    const int64_t c = xd.c;
    for (int64_t n = 0; n < yd.n; ++n) {
      const int64_t xb = n * xd.s[1] * xd.s[2];
      for (int64_t oy = 0; oy < yd.s[1]; ++oy) {
        const Lerp& ey = ly[static_cast<size_t>(oy)];
        for (int64_t ox = 0; ox < yd.s[2]; ++ox) {
          const Lerp& ex = lx[static_cast<size_t>(ox)];
          const int64_t o = (n * yd.s[1] + oy) * yd.s[2] + ox;
          const int64_t i00 = (xb + ey.lo * xd.s[2] + ex.lo) * c;
          const int64_t i01 = (xb + ey.lo * xd.s[2] + ex.hi) * c;
          const int64_t i10 = (xb + ey.hi * xd.s[2] + ex.lo) * c;
          const int64_t i11 = (xb + ey.hi * xd.s[2] + ex.hi) * c;
          const float w00 = (1 - ey.w) * (1 - ex.w), w01 = (1 - ey.w) * ex.w;
          const float w10 = ey.w * (1 - ex.w), w11 = ey.w * ex.w;
          if (forward) {
            float* y = dst + o * c;
            for (int64_t j = 0; j < c; ++j) {
              y[j] =
                  w00 * src[i00 + j] + w01 * src[i01 + j] + w10 * src[i10 + j] + w11 * src[i11 + j];
            }
          } else {
            const float* g = src + o * c;
            for (int64_t j = 0; j < c; ++j) {
              dst[i00 + j] += w00 * g[j];
              dst[i01 + j] += w01 * g[j];
              dst[i10 + j] += w10 * g[j];
              dst[i11 + j] += w11 * g[j];
            }
          }
        }
      }
    }
  }

  int rank_;
  std::vector<int64_t> size_;
  Interpolation interp_;
};

}  // namespace

std::unique_ptr<Layer> MakePooling(std::string name, PoolOptions o) {
  return std::make_unique<Pooling>(std::move(name), std::move(o));
}
std::unique_ptr<Layer> MakeGlobalPooling(std::string name, int rank, PoolMode mode, bool keepdims) {
  return std::make_unique<GlobalPooling>(std::move(name), rank, mode, keepdims);
}
std::unique_ptr<Layer> MakeZeroPadding(std::string name, int rank, AxisPairs padding) {
  return std::make_unique<PadCrop>(std::move(name), rank, std::move(padding), true);
}
std::unique_ptr<Layer> MakeCropping(std::string name, int rank, AxisPairs cropping) {
  return std::make_unique<PadCrop>(std::move(name), rank, std::move(cropping), false);
}
std::unique_ptr<Layer> MakeUpSampling(std::string name, int rank, std::vector<int64_t> size,
                                      Interpolation interpolation) {
  return std::make_unique<UpSampling>(std::move(name), rank, std::move(size), interpolation);
}

}  // namespace lockstep::trainer::graph
