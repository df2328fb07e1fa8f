// The spatial reshaping layers: ZeroPadding and Cropping 1D-3D, UpSampling 1D-3D.
#include <algorithm>
#include <cmath>

#include "trainer/layers/convolutional/spatial_dims.h"
#include "trainer/layers/reshaping/reshaping.h"

namespace lockstep::trainer::graph {
namespace {

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
