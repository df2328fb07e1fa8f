#include "trainer/layers/preprocessing/augment.h"
#include "trainer/tensor/random.h"

#include <cmath>
#include <numbers>
#include <random>

namespace lockstep::trainer::graph {
namespace {

absl::StatusOr<std::vector<Shape>> ImageShape(const Layer& l, const std::vector<Shape>& in) {
  if (in.size() != 1 || in[0].size() != 3) {
    return LayerError(l, "takes one image input [height, width, channels]");
  }
  return in;
}

class RandomFlip final : public Layer, public HasOptions<FlipOptions> {
 public:
  RandomFlip(std::string name, bool h, bool v)
      : Layer(std::move(name), "RandomFlip"), h_(h), v_(v) {}
  FlipOptions options() const override { return {h_, v_}; }
  std::type_index options_type() const override { return typeid(FlipOptions); }
  absl::StatusOr<std::vector<Shape>> Build(const std::vector<Shape>& in,
                                           const BuildContext&) override {
    built_ = true;
    return ImageShape(*this, in);
  }
  void Forward(const Args& in, std::vector<Tensor>* out, Saved* s,
               const CallContext& ctx) override {
    const Tensor& x = *in.x[0];
    const int64_t b = x.dim(0);
    s->i.assign(static_cast<size_t>(2 * b), 0);
    if (ctx.training && ctx.rng != nullptr) {
      std::bernoulli_distribution coin(0.5);
      for (int64_t n = 0; n < b; ++n) {
        s->i[static_cast<size_t>(2 * n)] = h_ && coin(*ctx.rng);
        s->i[static_cast<size_t>(2 * n + 1)] = v_ && coin(*ctx.rng);
      }
    }
    Apply(x, s->i, &(*out)[0]);
  }
  void Backward(const Args& in, const std::vector<Tensor>&, const std::vector<const Tensor*>& dout,
                const std::vector<bool>& need, std::vector<Tensor>* din, Saved* s) override {
    (void)in;
    if (need[0]) Apply(*dout[0], s->i, &(*din)[0]);  // a flip is its own inverse
  }

 private:
  static void Apply(const Tensor& x, const std::vector<int64_t>& flips, Tensor* y) {
    y->Resize(x.shape());
    const int64_t b = x.dim(0), h = x.dim(1), w = x.dim(2), c = x.dim(3);
    for (int64_t n = 0; n < b; ++n) {
      const bool fh = flips[static_cast<size_t>(2 * n)] != 0;
      const bool fv = flips[static_cast<size_t>(2 * n + 1)] != 0;
      for (int64_t r = 0; r < h; ++r) {
        const int64_t sr = fv ? h - 1 - r : r;
        for (int64_t q = 0; q < w; ++q) {
          const int64_t sq = fh ? w - 1 - q : q;
          std::copy_n(x.data() + ((n * h + sr) * w + sq) * c, c,
                      y->data() + ((n * h + r) * w + q) * c);
        }
      }
    }
  }
  bool h_, v_;
};

// The input index an out-of-range coordinate reads under a fill mode (-1: the fill value).
int64_t Fill(int64_t i, int64_t n, FillMode m) {
  if (i >= 0 && i < n) return i;
  switch (m) {
    case FillMode::kConstant:
      return -1;
    case FillMode::kNearest:
      return i < 0 ? 0 : n - 1;
    case FillMode::kWrap: {
      const int64_t r = i % n;
      return r < 0 ? r + n : r;
    }
    case FillMode::kReflect: {
      if (n == 1) return 0;
      const int64_t period = 2 * n;
      int64_t r = i % period;
      if (r < 0) r += period;
      return r < n ? r : period - 1 - r;  // edge pixels repeat: d c b a | a b c d | d c b a
    }
  }
  return -1;
}

class RandomRotation final : public Layer, public HasOptions<RotationOptions> {
 public:
  RandomRotation(std::string name, RotationOptions o)
      : Layer(std::move(name), "RandomRotation"), o_(o) {}
  RotationOptions options() const override { return o_; }
  std::type_index options_type() const override { return typeid(RotationOptions); }
  absl::StatusOr<std::vector<Shape>> Build(const std::vector<Shape>& in,
                                           const BuildContext&) override {
    built_ = true;
    return ImageShape(*this, in);
  }
  void Forward(const Args& in, std::vector<Tensor>* out, Saved* s,
               const CallContext& ctx) override {
    const Tensor& x = *in.x[0];
    const int64_t b = x.dim(0);
    s->t.resize(1);
    Tensor& angles = s->t[0];
    angles.Resize({b});
    angles.Fill(0.0f);
    Tensor& y = (*out)[0];
    if (!ctx.training || ctx.rng == nullptr || (o_.lower == 0 && o_.upper == 0)) {
      y = x;
      s->i.assign(1, 0);
      return;
    }
    s->i.assign(1, 1);
    UniformDraw<float> d(o_.lower * 2 * std::numbers::pi_v<float>,
                         o_.upper * 2 * std::numbers::pi_v<float>);
    for (int64_t n = 0; n < b; ++n) angles[n] = d(*ctx.rng);
    y.Resize(x.shape());
    y.Fill(0.0f);
    Sample(x.shape(), angles, [&](int64_t out_i, int64_t in_i, float wgt) {
      y[out_i] += wgt * (in_i < 0 ? o_.fill_value : x[in_i]);
    });
  }
  void Backward(const Args& in, const std::vector<Tensor>&, const std::vector<const Tensor*>& dout,
                const std::vector<bool>& need, std::vector<Tensor>* din, Saved* s) override {
    if (!need[0]) return;
    Tensor& dx = (*din)[0];
    if (s->i.empty() || s->i[0] == 0) {
      dx = *dout[0];
      return;
    }
    dx.Resize(in.x[0]->shape());
    dx.Fill(0.0f);
    Sample(dx.shape(), s->t[0], [&](int64_t out_i, int64_t in_i, float wgt) {
      if (in_i >= 0) dx[in_i] += wgt * (*dout[0])[out_i];
    });
  }

 private:
  // Calls f(output element, input element or -1, weight) for every tap of every output pixel.
  template <typename F>
  void Sample(const Shape& shape, const Tensor& angles, F f) const {
    const int64_t b = shape[0], h = shape[1], w = shape[2], c = shape[3];
    for (int64_t n = 0; n < b; ++n) {
      const float a = angles[n];
      const float cs = std::cos(a), sn = std::sin(a);
      const auto wf = static_cast<float>(w - 1), hf = static_cast<float>(h - 1);
      const float dx = (wf - (cs * wf - sn * hf)) / 2;
      const float dy = (hf - (sn * wf + cs * hf)) / 2;
      for (int64_t r = 0; r < h; ++r) {
        for (int64_t q = 0; q < w; ++q) {
          const float sx = cs * static_cast<float>(q) - sn * static_cast<float>(r) + dx;
          const float sy = sn * static_cast<float>(q) + cs * static_cast<float>(r) + dy;
          const int64_t base = ((n * h + r) * w + q) * c;
          auto tap = [&](int64_t yy, int64_t xx, float wgt) {
            if (wgt == 0) return;
            const int64_t fy = Fill(yy, h, o_.fill), fx = Fill(xx, w, o_.fill);
            for (int64_t k = 0; k < c; ++k) {
              f(base + k, fy < 0 || fx < 0 ? -1 : ((n * h + fy) * w + fx) * c + k, wgt);
            }
          };
          if (!o_.bilinear) {
            tap(static_cast<int64_t>(std::lround(sy)), static_cast<int64_t>(std::lround(sx)), 1);
            continue;
          }
          const auto x0 = static_cast<int64_t>(std::floor(sx));
          const auto y0 = static_cast<int64_t>(std::floor(sy));
          const float fx = sx - static_cast<float>(x0), fy = sy - static_cast<float>(y0);
          tap(y0, x0, (1 - fy) * (1 - fx));
          tap(y0, x0 + 1, (1 - fy) * fx);
          tap(y0 + 1, x0, fy * (1 - fx));
          tap(y0 + 1, x0 + 1, fy * fx);
        }
      }
    }
  }
  RotationOptions o_;
};

}  // namespace

std::unique_ptr<Layer> MakeRandomFlip(std::string name, bool horizontal, bool vertical) {
  return std::make_unique<RandomFlip>(std::move(name), horizontal, vertical);
}
std::unique_ptr<Layer> MakeRandomRotation(std::string name, RotationOptions o) {
  return std::make_unique<RandomRotation>(std::move(name), o);
}

}  // namespace lockstep::trainer::graph
