#include "trainer/graph/layers/conv.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>

#include "common/log.h"
#include "trainer/graph/layers/pooling.h"
#include "trainer/kernels/cpu/column_sums.h"
#include "trainer/kernels/cpu/dnnl_conv.h"
#include "trainer/kernels/cpu/gemm.h"

namespace lockstep::trainer::graph {

namespace {
std::atomic<ConvBackend> conv_backend{ConvBackend::kOneDnn};
std::atomic<int64_t> onednn_refusals{0};
}  // namespace

void SetConvBackend(ConvBackend b) { conv_backend.store(b); }
ConvBackend GetConvBackend() { return conv_backend.load(); }
int64_t OneDnnRefusals() { return onednn_refusals.load(); }

AxisGeometry WindowAxis(int64_t in, int64_t kernel, int64_t stride, int64_t dilation, Padding p) {
  if (in < 0) return {-1, 0};
  const int64_t span = (kernel - 1) * dilation + 1;
  switch (p) {
    case Padding::kValid:
      return {in >= span ? (in - span) / stride + 1 : 0, 0};
    case Padding::kSame: {
      const int64_t out = (in + stride - 1) / stride;
      const int64_t total = std::max<int64_t>((out - 1) * stride + span - in, 0);
      return {out, total / 2};
    }
    case Padding::kCausal:
      return {(in + stride - 1) / stride, span - 1};
  }
  return {0, 0};
}

AxisGeometry TransposeAxis(int64_t in, int64_t kernel, int64_t stride, Padding p,
                           std::optional<int64_t> output_padding) {
  if (in < 0) return {-1, 0};
  const int64_t k = kernel, s = stride;
  int64_t out;
  if (!output_padding) {
    out = p == Padding::kSame ? in * s : in * s + std::max<int64_t>(k - s, 0);
  } else {
    const int64_t pad = p == Padding::kSame ? k / 2 : 0;
    out = (in - 1) * s + k - 2 * pad + *output_padding;
  }
  const int64_t before = p == Padding::kSame ? std::max<int64_t>((in - 1) * s + k - out, 0) / 2 : 0;
  return {out, before};
}

namespace {

// The patch matrix of one GEMM stays under this many floats (4 MiB); larger batches run in
// chunks of examples. Small enough that the patches Im2Col writes are still in the cache when
// the GEMM packs them (and the GEMM's patch gradients when Col2Im reads them), large enough
// that a GEMM still has thousands of rows: ResNet-20's step at batch 64 took 409 ms with the
// whole batch in one matrix (38 MiB in its first stage) and 289 ms in chunks of 4 MiB.
constexpr int64_t kColCap = int64_t{1} << 20;

// A windowed operation over channels-last data with 1 to 3 spatial axes, padded to 3 (the
// missing leading axes have length 1): input [n, in0, in1, in2, c], output positions
// [n, out0, out1, out2], kernel taps (k0, k1, k2).
struct Geo {
  int64_t n = 0, c = 0;
  int64_t in[kSpatialAxes] = {1, 1, 1}, out[kSpatialAxes] = {1, 1, 1}, k[kSpatialAxes] = {1, 1, 1};
  int64_t s[kSpatialAxes] = {1, 1, 1}, d[kSpatialAxes] = {1, 1, 1}, pad[kSpatialAxes] = {0, 0, 0};
  int64_t in_size() const { return in[0] * in[1] * in[2]; }
  int64_t out_size() const { return out[0] * out[1] * out[2]; }
  int64_t taps() const { return k[0] * k[1] * k[2]; }
  int64_t patch() const { return taps() * c; }
  bool empty() const { return out[0] <= 0 || out[1] <= 0 || out[2] <= 0; }
  // A 1x1 window at stride 1 without padding: the patch matrix is the input itself.
  bool pointwise() const {
    for (int a = 0; a < kSpatialAxes; ++a) {
      if (k[a] != 1 || s[a] != 1 || pad[a] != 0) return false;
    }
    return true;
  }
  // Examples per GEMM so the patch matrix stays under kColCap.
  int64_t chunk() const {
    const int64_t per = std::max<int64_t>(out_size() * patch(), 1);
    return std::max<int64_t>(kColCap / per, 1);
  }
};

// Calls f(o, t, i) for each output position o (flat over the batch, examples [n0, n1)), each
// kernel tap t, and the input position i (flat over the batch) the tap reads, -1 in padding.
template <typename F>
void ForEachTap(const Geo& g, int64_t n0, int64_t n1, F&& f) {
  int64_t o = n0 * g.out_size();
  for (int64_t n = n0; n < n1; ++n) {
    const int64_t base = n * g.in_size();
    for (int64_t o0 = 0; o0 < g.out[0]; ++o0) {
      for (int64_t o1 = 0; o1 < g.out[1]; ++o1) {
        for (int64_t o2 = 0; o2 < g.out[2]; ++o2, ++o) {
          int64_t t = 0;
          for (int64_t k0 = 0; k0 < g.k[0]; ++k0) {
            const int64_t i0 = o0 * g.s[0] - g.pad[0] + k0 * g.d[0];
            const bool v0 = i0 >= 0 && i0 < g.in[0];
            for (int64_t k1 = 0; k1 < g.k[1]; ++k1) {
              const int64_t i1 = o1 * g.s[1] - g.pad[1] + k1 * g.d[1];
              const bool v1 = v0 && i1 >= 0 && i1 < g.in[1];
              for (int64_t k2 = 0; k2 < g.k[2]; ++k2, ++t) {
                const int64_t i2 = o2 * g.s[2] - g.pad[2] + k2 * g.d[2];
                const bool v = v1 && i2 >= 0 && i2 < g.in[2];
                f(o, t, v ? base + (i0 * g.in[1] + i1) * g.in[2] + i2 : int64_t{-1});
              }
            }
          }
        }
      }
    }
  }
}

// Calls f(o, t, i, len) for each output position o (flat over the batch, examples [n0, n1)) and
// each run of the last axis's taps: `len` taps from tap t that read the input from position i
// on (flat over the batch; the taps of a run read consecutive positions), or fall in padding
// (i = -1). Without dilation along the last axis a run is every in-range tap of one kernel row,
// so its patch is one contiguous span of the input; with dilation every tap is a run of one.
template <typename F>
void ForEachTapRun(const Geo& g, int64_t n0, int64_t n1, F&& f) {
  const int64_t k2 = g.k[2];
  int64_t o = n0 * g.out_size();
  for (int64_t n = n0; n < n1; ++n) {
    const int64_t base = n * g.in_size();
    for (int64_t o0 = 0; o0 < g.out[0]; ++o0) {
      for (int64_t o1 = 0; o1 < g.out[1]; ++o1) {
        for (int64_t o2 = 0; o2 < g.out[2]; ++o2, ++o) {
          const int64_t i2s = o2 * g.s[2] - g.pad[2];
          // Taps [lo, hi) of a kernel row fall inside the last axis (dilation 1).
          const int64_t lo = std::clamp<int64_t>(-i2s, 0, k2);
          const int64_t hi = std::clamp<int64_t>(g.in[2] - i2s, lo, k2);
          int64_t t = 0;
          for (int64_t k0 = 0; k0 < g.k[0]; ++k0) {
            const int64_t i0 = o0 * g.s[0] - g.pad[0] + k0 * g.d[0];
            const bool v0 = i0 >= 0 && i0 < g.in[0];
            for (int64_t k1 = 0; k1 < g.k[1]; ++k1, t += k2) {
              const int64_t i1 = o1 * g.s[1] - g.pad[1] + k1 * g.d[1];
              const int64_t row = base + (i0 * g.in[1] + i1) * g.in[2];
              if (!(v0 && i1 >= 0 && i1 < g.in[1])) {
                f(o, t, int64_t{-1}, k2);
              } else if (g.d[2] == 1) {
                if (lo > 0) f(o, t, int64_t{-1}, lo);
                if (hi > lo) f(o, t + lo, row + i2s + lo, hi - lo);
                if (hi < k2) f(o, t + hi, int64_t{-1}, k2 - hi);
              } else {
                for (int64_t k = 0; k < k2; ++k) {
                  const int64_t i2 = i2s + k * g.d[2];
                  f(o, t + k, i2 >= 0 && i2 < g.in[2] ? row + i2 : int64_t{-1}, int64_t{1});
                }
              }
            }
          }
        }
      }
    }
  }
}

// col [rows of examples n0..n1, taps * c] from x.
void Im2Col(const Geo& g, const float* x, int64_t n0, int64_t n1, float* col) {
  const int64_t c = g.c, taps = g.taps(), first = n0 * g.out_size();
  ForEachTapRun(g, n0, n1, [&](int64_t o, int64_t t, int64_t i, int64_t len) {
    float* dst = col + ((o - first) * taps + t) * c;
    if (i >= 0) {
      std::copy_n(x + i * c, len * c, dst);
    } else {
      std::fill_n(dst, len * c, 0.0f);
    }
  });
}

// x += the patches of col scattered back (x zeroed by the caller).
void Col2Im(const Geo& g, const float* col, int64_t n0, int64_t n1, float* x) {
  const int64_t c = g.c, taps = g.taps(), first = n0 * g.out_size();
  ForEachTapRun(g, n0, n1, [&](int64_t o, int64_t t, int64_t i, int64_t len) {
    if (i < 0) return;
    const float* __restrict src = col + ((o - first) * taps + t) * c;
    float* __restrict dst = x + i * c;
    for (int64_t j = 0, m = len * c; j < m; ++j) dst[j] += src[j];
  });
}

// y[o, c * m + j] += x[i, c] * w[t, c, j] over the taps (y zeroed by the caller).
void DepthwiseForward(const Geo& g, int64_t mult, const float* x, const float* w, float* y) {
  const int64_t c = g.c, cm = c * mult;
  ForEachTap(g, 0, g.n, [&](int64_t o, int64_t t, int64_t i) {
    if (i < 0) return;
    const float* xr = x + i * c;
    const float* wt = w + t * cm;
    float* yr = y + o * cm;
    if (mult == 1) {
      for (int64_t j = 0; j < c; ++j) yr[j] += xr[j] * wt[j];
    } else {
      for (int64_t j = 0; j < c; ++j) {
        const float xv = xr[j];
        for (int64_t m = 0; m < mult; ++m) yr[j * mult + m] += xv * wt[j * mult + m];
      }
    }
  });
}

// dx (zeroed by the caller; may be null) and dw (accumulated; may be null) from dy.
void DepthwiseBackward(const Geo& g, int64_t mult, const float* x, const float* w, const float* dy,
                       float* dx, float* dw) {
  const int64_t c = g.c, cm = c * mult;
  ForEachTap(g, 0, g.n, [&](int64_t o, int64_t t, int64_t i) {
    if (i < 0) return;
    const float* dyr = dy + o * cm;
    if (dx != nullptr) {
      const float* wt = w + t * cm;
      float* dxr = dx + i * c;
      if (mult == 1) {
        for (int64_t j = 0; j < c; ++j) dxr[j] += dyr[j] * wt[j];
      } else {
        for (int64_t j = 0; j < c; ++j) {
          float acc = 0;
          for (int64_t m = 0; m < mult; ++m) acc += dyr[j * mult + m] * wt[j * mult + m];
          dxr[j] += acc;
        }
      }
    }
    if (dw != nullptr) {
      const float* xr = x + i * c;
      float* dwt = dw + t * cm;
      if (mult == 1) {
        for (int64_t j = 0; j < c; ++j) dwt[j] += xr[j] * dyr[j];
      } else {
        for (int64_t j = 0; j < c; ++j) {
          const float xv = xr[j];
          for (int64_t m = 0; m < mult; ++m) dwt[j * mult + m] += xv * dyr[j * mult + m];
        }
      }
    }
  });
}

void AddBias(const float* b, int64_t rows, int64_t f, float* z) {
  for (int64_t r = 0; r < rows; ++r) {
    float* zr = z + r * f;
    for (int64_t j = 0; j < f; ++j) zr[j] += b[j];
  }
}

void AddTo(const std::vector<float>& from, float* to) {
  const float* __restrict f = from.data();
  float* __restrict t = to;
  for (size_t j = 0; j < from.size(); ++j) t[j] += f[j];
}

// What the windowed convolution layers share: the geometry of a call, the shape checks, the
// activation after the linear part.
class WindowLayer : public Layer {
 public:
  WindowLayer(std::string name, std::string cls, int rank, std::vector<int64_t> kernel,
              std::vector<int64_t> strides, std::vector<int64_t> dilation, Padding padding,
              Activation act, bool use_bias)
      : Layer(std::move(name), std::move(cls)),
        rank_(rank),
        kernel_(std::move(kernel)),
        strides_(std::move(strides)),
        dilation_(std::move(dilation)),
        padding_(padding),
        act_(act),
        use_bias_(use_bias) {}

  // Input masks ([batch, time]) do not survive a convolution (Keras's conv layers do not
  // support masking).
  const Tensor* OutputMask(const Args&, const Saved&) const override { return nullptr; }
  const Activation* output_activation() const override { return &act_; }

 protected:
  // Checks one input of rank `rank_ + 1` (without the batch) with known channels; fills the
  // per-example output shape's spatial part.
  absl::Status CheckInput(const std::vector<Shape>& in, Shape* spatial_out) const {
    if (in.size() != 1 || in[0].size() != static_cast<size_t>(rank_) + 1) {
      return LayerError(*this, "takes one input of rank " + std::to_string(rank_ + 2) +
                                   " (batch, " + (rank_ == 1 ? "steps" : "spatial axes") +
                                   ", channels), got per-example shape " +
                                   ShapeString(in.empty() ? Shape{} : in[0]));
    }
    if (in[0].back() <= 0) return LayerError(*this, "the channel axis of its input must be known");
    spatial_out->clear();
    for (int a = 0; a < rank_; ++a) {
      const auto i = static_cast<size_t>(a);
      const AxisGeometry ax = Axis(a, in[0][i]);
      if (in[0][i] >= 0 && ax.out <= 0) {
        return LayerError(*this, "input " + ShapeString(in[0]) + " is smaller than the window " +
                                     ShapeString(kernel_) + " (dilation " + ShapeString(dilation_) +
                                     ")");
      }
      spatial_out->push_back(ax.out);
    }
    return absl::OkStatus();
  }

  virtual AxisGeometry Axis(int a, int64_t in) const {
    const auto i = static_cast<size_t>(a);
    return WindowAxis(in, kernel_[i], strides_[i], dilation_[i], padding_);
  }

  // The window over an input [n, spatial..., c].
  Geo InputGeo(const Shape& x) const {
    Geo g;
    g.n = x[0];
    g.c = x.back();
    for (int a = 0; a < rank_; ++a) {
      const int ga = kSpatialAxes - rank_ + a;
      const auto i = static_cast<size_t>(a);
      g.in[ga] = x[i + 1];
      g.k[ga] = kernel_[i];
      g.s[ga] = strides_[i];
      g.d[ga] = dilation_[i];
      const AxisGeometry ax = Axis(a, x[i + 1]);
      g.out[ga] = std::max<int64_t>(ax.out, 0);
      g.pad[ga] = ax.pad_before;
    }
    return g;
  }

  Shape OutShape(const Geo& g, int64_t channels) const {
    Shape s{g.n};
    for (int a = 0; a < rank_; ++a) s.push_back(g.out[kSpatialAxes - rank_ + a]);
    s.push_back(channels);
    return s;
  }

  bool linear() const { return act_.kind == Act::kLinear; }
  // The tensor the linear part writes: the output itself when there is no activation.
  Tensor& PreActivation(std::vector<Tensor>* out, Saved* s) {
    if (s->t.size() < 4) s->t.resize(4);
    return linear() ? (*out)[0] : s->t[0];
  }
  void Activate(std::vector<Tensor>* out, Saved* s) {
    if (!linear()) ActivationForward(act_, s->t[0], &(*out)[0]);
  }
  // dL/d(pre-activation).
  const Tensor* PreActivationGrad(const std::vector<Tensor>& out,
                                  const std::vector<const Tensor*>& dout, Saved* s) {
    if (linear()) return dout[0];
    if (s->t.size() < 4) s->t.resize(4);
    ActivationBackward(act_, s->t[0], out[0], *dout[0], &s->t[2]);
    return &s->t[2];
  }
  void ReportEmpty(const Geo& g, const Shape& x, const CallContext& ctx) const {
    if (g.empty() && g.n > 0) {
      ctx.Report("layer '" + name() + "' (" + class_name() + "): input " + ShapeString(x) +
                 " is smaller than the window " + ShapeString(kernel_));
    }
  }
  void SetRegularizers(Weight& w, float l1, float l2) {
    w.l1 = l1;
    w.l2 = l2;
  }

  // oneDNN's primitives for a call's geometry, made on the first call of each input shape; null
  // where the loops run (the backend is kLoops, the window is empty, or oneDNN has no
  // implementation for it).
  cpu::DnnlConv* Dnnl(const Geo& g, int64_t c_out, bool depthwise, bool bias) {
    if (GetConvBackend() != ConvBackend::kOneDnn || g.empty() || g.n <= 0) return nullptr;
    const std::vector<int64_t> key{g.n, g.in[0], g.in[1], g.in[2], g.c};
    auto it = dnnl_.find(key);
    if (it == dnnl_.end()) {
      // Inputs of ever-new shapes (sequences of any length) keep a bounded set.
      if (dnnl_.size() >= 8) dnnl_.clear();
      absl::StatusOr<std::unique_ptr<cpu::DnnlConv>> made =
          cpu::DnnlConv::Make(ToConvGeometry(g, c_out, depthwise), bias);
      if (!made.ok()) {
        ++onednn_refusals;
        common::LogWarning("graph", "layer '", name(), "' (", class_name(), ") on input ",
                           ShapeString(Shape{g.n, g.in[0], g.in[1], g.in[2], g.c}),
                           ": runs without oneDNN (", made.status().message(), ")");
      }
      it = dnnl_.emplace(key, made.ok() ? std::move(*made) : nullptr).first;
    }
    return it->second.get();
  }

  // y = conv(x, weights()[0]) (+ weights()[1] when `bias`) through oneDNN; false where the
  // loops must run.
  bool DnnlForward(const Geo& g, int64_t c_out, bool depthwise, bool bias, const float* x,
                   float* y) {
    cpu::DnnlConv* d = Dnnl(g, c_out, depthwise, bias);
    if (d == nullptr) return false;
    d->Forward(x, weights()[0].value.data(), bias ? weights()[1].value.data() : nullptr, y);
    return true;
  }

  // The backward pass of DnnlForward: the weights' gradients (when the kernel is trainable)
  // and dx (when not null, sized as x). oneDNN overwrites its outputs, so the weights'
  // gradients go through scratch and are added: a shared layer's calls sum theirs.
  bool DnnlBackward(const Geo& g, int64_t c_out, bool depthwise, bool bias, const float* x,
                    const float* dz, float* dx) {
    cpu::DnnlConv* d = Dnnl(g, c_out, depthwise, bias);
    if (d == nullptr) return false;
    Weight& kernel = weights()[0];
    if (kernel.trainable) {
      dw_.resize(static_cast<size_t>(kernel.grad.size()));
      db_.resize(bias ? static_cast<size_t>(weights()[1].grad.size()) : 0);
      d->BackwardWeights(x, dz, dw_.data(), bias ? db_.data() : nullptr);
      AddTo(dw_, kernel.grad.data());
      if (bias) AddTo(db_, weights()[1].grad.data());
    }
    if (dx != nullptr) d->BackwardData(dz, kernel.value.data(), dx);
    return true;
  }

  cpu::ConvGeometry ToConvGeometry(const Geo& g, int64_t c_out, bool depthwise) const {
    cpu::ConvGeometry cg;
    cg.rank = rank_;
    cg.n = g.n;
    cg.c_in = g.c;
    cg.c_out = c_out;
    cg.depthwise = depthwise;
    for (int a = 0; a < rank_; ++a) {
      const int ga = kSpatialAxes - rank_ + a;
      const auto i = static_cast<size_t>(a);
      cg.in[i] = g.in[ga];
      cg.out[i] = g.out[ga];
      cg.kernel[i] = g.k[ga];
      cg.stride[i] = g.s[ga];
      cg.dilation[i] = g.d[ga];
      cg.pad_before[i] = g.pad[ga];
    }
    return cg;
  }

 public:
  // CallGeometry's answer for this layer.
  virtual cpu::ConvGeometry Geometry(const Shape& x) const = 0;

 protected:
  int rank_;
  std::vector<int64_t> kernel_, strides_, dilation_;
  Padding padding_;
  Activation act_;
  bool use_bias_;
  int64_t cin_ = 0;
  std::vector<float> col_;  // the patch matrix (or its gradient), reused across calls
  std::map<std::vector<int64_t>, std::unique_ptr<cpu::DnnlConv>> dnnl_;
  std::vector<float> dw_, db_;  // oneDNN's weight gradients before they are added
};

std::string ConvClass(const char* base, int rank, const char* suffix = "") {
  return std::string(base) + std::to_string(rank) + "D" + suffix;
}

class Conv final : public WindowLayer, public HasOptions<ConvOptions> {
 public:
  ConvOptions options() const override { return o_; }
  std::type_index options_type() const override { return typeid(ConvOptions); }
  cpu::ConvGeometry Geometry(const Shape& x) const override {
    return ToConvGeometry(InputGeo(x), o_.filters, false);
  }
  explicit Conv(std::string name, ConvOptions o)
      : WindowLayer(std::move(name), ConvClass("Conv", o.rank), o.rank, o.kernel_size, o.strides,
                    o.dilation_rate, o.padding, o.activation, o.use_bias),
        o_(std::move(o)) {}

  absl::StatusOr<std::vector<Shape>> Build(const std::vector<Shape>& in,
                                           const BuildContext& ctx) override {
    Shape out;
    if (absl::Status st = CheckInput(in, &out); !st.ok()) return st;
    const int64_t cin = in[0].back();
    if (!built_) {
      Shape ks = o_.kernel_size;
      ks.push_back(cin);
      ks.push_back(o_.filters);
      SetRegularizers(AddWeight("kernel", Initialize(o_.kernel_initializer, ks, ctx.rng)),
                      o_.kernel_l1, o_.kernel_l2);
      if (use_bias_) {
        SetRegularizers(AddWeight("bias", Initialize(o_.bias_initializer, {o_.filters}, ctx.rng)),
                        o_.bias_l1, o_.bias_l2);
      }
      cin_ = cin;
      built_ = true;
    } else if (cin != cin_) {
      return LayerError(*this, "called on inputs of " + std::to_string(cin) +
                                   " channels, built for " + std::to_string(cin_));
    }
    out.push_back(o_.filters);
    return std::vector<Shape>{out};
  }

  void Forward(const Args& in, std::vector<Tensor>* out, Saved* s,
               const CallContext& ctx) override {
    const Tensor& x = *in.x[0];
    const Geo g = InputGeo(x.shape());
    ReportEmpty(g, x.shape(), ctx);
    const int64_t f = o_.filters, rows = g.out_size(), patch = g.patch();
    Tensor& z = PreActivation(out, s);
    z.Resize(OutShape(g, f));
    const float* w = weights()[0].value.data();
    if (DnnlForward(g, f, false, use_bias_, x.data(), z.data())) {
      Activate(out, s);
      return;
    }
    const int64_t chunk = g.chunk();
    if (!g.empty()) {
      for (int64_t n0 = 0; n0 < g.n; n0 += chunk) {
        const int64_t n1 = std::min(g.n, n0 + chunk);
        const float* a = x.data() + n0 * g.in_size() * g.c;
        if (!g.pointwise()) {
          col_.resize(static_cast<size_t>((n1 - n0) * rows * patch));
          Im2Col(g, x.data(), n0, n1, col_.data());
          a = col_.data();
        }
        cpu::Gemm(false, false, (n1 - n0) * rows, f, patch, 1.0f, a, w, 0.0f,
                  z.data() + n0 * rows * f);
      }
    }
    if (use_bias_) AddBias(weights()[1].value.data(), g.n * rows, f, z.data());
    Activate(out, s);
  }

  void Backward(const Args& in, const std::vector<Tensor>& out,
                const std::vector<const Tensor*>& dout, const std::vector<bool>& need,
                std::vector<Tensor>* din, Saved* s) override {
    const Tensor& x = *in.x[0];
    const Geo g = InputGeo(x.shape());
    const Tensor* dz = PreActivationGrad(out, dout, s);
    const int64_t f = o_.filters, rows = g.out_size(), patch = g.patch();
    const bool wgrad = weights()[0].trainable;
    if (need[0]) (*din)[0].Resize(x.shape());
    if (DnnlBackward(g, f, false, use_bias_, x.data(), dz->data(),
                     need[0] ? (*din)[0].data() : nullptr)) {
      return;
    }
    if (wgrad && use_bias_) cpu::AddColumnSums(dz->data(), g.n * rows, f, weights()[1].grad.data());
    if (need[0]) {
      (*din)[0].Resize(x.shape());
      (*din)[0].Fill(0.0f);
    }
    if (g.empty()) return;
    const float* w = weights()[0].value.data();
    const int64_t chunk = g.chunk();
    for (int64_t n0 = 0; n0 < g.n; n0 += chunk) {
      const int64_t n1 = std::min(g.n, n0 + chunk), m = (n1 - n0) * rows;
      const float* dzc = dz->data() + n0 * rows * f;
      const int64_t xoff = n0 * g.in_size() * g.c;
      if (g.pointwise()) {
        if (wgrad) {
          cpu::Gemm(true, false, patch, f, m, 1.0f, x.data() + xoff, dzc, 1.0f,
                    weights()[0].grad.data());
        }
        if (need[0]) {
          cpu::Gemm(false, true, m, patch, f, 1.0f, dzc, w, 0.0f, (*din)[0].data() + xoff);
        }
        continue;
      }
      col_.resize(static_cast<size_t>(m * patch));
      if (wgrad) {
        Im2Col(g, x.data(), n0, n1, col_.data());
        cpu::Gemm(true, false, patch, f, m, 1.0f, col_.data(), dzc, 1.0f, weights()[0].grad.data());
      }
      if (need[0]) {
        cpu::Gemm(false, true, m, patch, f, 1.0f, dzc, w, 0.0f, col_.data());
        Col2Im(g, col_.data(), n0, n1, (*din)[0].data());
      }
    }
  }

 private:
  ConvOptions o_;
};

// The transpose runs a convolution's geometry backwards: the convolution's input is this
// layer's output (length `out`), its output this layer's input.
class ConvTranspose final : public WindowLayer, public HasOptions<ConvTransposeOptions> {
 public:
  ConvTransposeOptions options() const override { return o_; }
  std::type_index options_type() const override { return typeid(ConvTransposeOptions); }
  cpu::ConvGeometry Geometry(const Shape& x) const override {
    return ToConvGeometry(TransposeGeo(x), x.back(), false);
  }
  explicit ConvTranspose(std::string name, ConvTransposeOptions o)
      : WindowLayer(std::move(name), ConvClass("Conv", o.rank, "Transpose"), o.rank, o.kernel_size,
                    o.strides, std::vector<int64_t>(o.kernel_size.size(), 1), o.padding,
                    o.activation, o.use_bias),
        o_(std::move(o)) {}

  absl::StatusOr<std::vector<Shape>> Build(const std::vector<Shape>& in,
                                           const BuildContext& ctx) override {
    if (in.size() != 1 || in[0].size() != static_cast<size_t>(rank_) + 1) {
      return LayerError(*this, "takes one input of rank " + std::to_string(rank_ + 2) +
                                   ", got per-example shape " +
                                   ShapeString(in.empty() ? Shape{} : in[0]));
    }
    const int64_t cin = in[0].back();
    if (cin <= 0) return LayerError(*this, "the channel axis of its input must be known");
    Shape out;
    for (int a = 0; a < rank_; ++a) {
      const int64_t li = in[0][static_cast<size_t>(a)];
      if (li == 0) return LayerError(*this, "input " + ShapeString(in[0]) + " is empty");
      int64_t pad = 0;
      const int64_t lo = OutLength(a, li, &pad);
      if (li > 0 && lo <= 0) {
        return LayerError(*this, "output_padding " + ShapeString(*o_.output_padding) +
                                     " gives an empty output for input " + ShapeString(in[0]));
      }
      out.push_back(lo);
    }
    if (!built_) {
      Shape ks = o_.kernel_size;
      ks.push_back(o_.filters);
      ks.push_back(cin);
      SetRegularizers(AddWeight("kernel", Initialize(o_.kernel_initializer, ks, ctx.rng)),
                      o_.kernel_l1, o_.kernel_l2);
      if (use_bias_) {
        SetRegularizers(AddWeight("bias", Initialize(o_.bias_initializer, {o_.filters}, ctx.rng)),
                        o_.bias_l1, o_.bias_l2);
      }
      cin_ = cin;
      built_ = true;
    } else if (cin != cin_) {
      return LayerError(*this, "called on inputs of " + std::to_string(cin) +
                                   " channels, built for " + std::to_string(cin_));
    }
    out.push_back(o_.filters);
    return std::vector<Shape>{out};
  }

  void Forward(const Args& in, std::vector<Tensor>* out, Saved* s, const CallContext&) override {
    const Tensor& x = *in.x[0];
    const Geo g = TransposeGeo(x.shape());
    const int64_t f = o_.filters, cin = x.shape().back(), m_per = g.out_size();
    Tensor& z = PreActivation(out, s);
    z.Resize(OutShape(g));
    z.Fill(0.0f);
    const float* w = weights()[0].value.data();
    const int64_t chunk = g.chunk(), patch = g.patch();
    for (int64_t n0 = 0; n0 < g.n; n0 += chunk) {
      const int64_t n1 = std::min(g.n, n0 + chunk), m = (n1 - n0) * m_per;
      if (m == 0) continue;
      col_.resize(static_cast<size_t>(m * patch));
      cpu::Gemm(false, true, m, patch, cin, 1.0f, x.data() + n0 * m_per * cin, w, 0.0f,
                col_.data());
      Col2Im(g, col_.data(), n0, n1, z.data());
    }
    if (use_bias_) AddBias(weights()[1].value.data(), z.size() / f, f, z.data());
    Activate(out, s);
  }

  void Backward(const Args& in, const std::vector<Tensor>& out,
                const std::vector<const Tensor*>& dout, const std::vector<bool>& need,
                std::vector<Tensor>* din, Saved* s) override {
    const Tensor& x = *in.x[0];
    const Geo g = TransposeGeo(x.shape());
    const Tensor* dz = PreActivationGrad(out, dout, s);
    const int64_t f = o_.filters, cin = x.shape().back(), m_per = g.out_size();
    const bool wgrad = weights()[0].trainable;
    if (wgrad && use_bias_)
      cpu::AddColumnSums(dz->data(), dz->size() / f, f, weights()[1].grad.data());
    if (need[0]) (*din)[0].Resize(x.shape());
    if (!wgrad && !need[0]) return;
    const float* w = weights()[0].value.data();
    const int64_t chunk = g.chunk(), patch = g.patch();
    for (int64_t n0 = 0; n0 < g.n; n0 += chunk) {
      const int64_t n1 = std::min(g.n, n0 + chunk), m = (n1 - n0) * m_per;
      if (m == 0) continue;
      col_.resize(static_cast<size_t>(m * patch));
      Im2Col(g, dz->data(), n0, n1, col_.data());
      if (need[0]) {
        cpu::Gemm(false, false, m, cin, patch, 1.0f, col_.data(), w, 0.0f,
                  (*din)[0].data() + n0 * m_per * cin);
      }
      if (wgrad) {
        cpu::Gemm(true, false, patch, cin, m, 1.0f, col_.data(), x.data() + n0 * m_per * cin, 1.0f,
                  weights()[0].grad.data());
      }
    }
  }

 private:
  // Keras's deconv_output_length (dilation 1) and the padding TensorFlow's transposed
  // convolution derives from the lengths: same pads max((in - 1) * s + k - out, 0), half
  // before; valid pads nothing.
  int64_t OutLength(int a, int64_t in, int64_t* pad_before) const {
    const auto i = static_cast<size_t>(a);
    const AxisGeometry g = TransposeAxis(
        in, o_.kernel_size[i], o_.strides[i], o_.padding,
        o_.output_padding ? std::optional<int64_t>((*o_.output_padding)[i]) : std::nullopt);
    *pad_before = g.pad_before;
    return g.out;
  }

  // The convolution geometry: its input is this layer's output (channels = filters), its
  // output positions are this layer's input positions.
  Geo TransposeGeo(const Shape& x) const {
    Geo g;
    g.n = x[0];
    g.c = o_.filters;
    for (int a = 0; a < rank_; ++a) {
      const int ga = kSpatialAxes - rank_ + a;
      const auto i = static_cast<size_t>(a);
      g.out[ga] = x[i + 1];
      g.in[ga] = std::max<int64_t>(OutLength(a, x[i + 1], &g.pad[ga]), 0);
      g.k[ga] = o_.kernel_size[i];
      g.s[ga] = o_.strides[i];
    }
    return g;
  }

  Shape OutShape(const Geo& g) const {
    Shape s{g.n};
    for (int a = 0; a < rank_; ++a) s.push_back(g.in[kSpatialAxes - rank_ + a]);
    s.push_back(o_.filters);
    return s;
  }

  ConvTransposeOptions o_;
};

class DepthwiseConv final : public WindowLayer, public HasOptions<DepthwiseOptions> {
 public:
  DepthwiseOptions options() const override { return o_; }
  std::type_index options_type() const override { return typeid(DepthwiseOptions); }
  cpu::ConvGeometry Geometry(const Shape& x) const override {
    return ToConvGeometry(InputGeo(x), x.back() * o_.depth_multiplier, true);
  }
  explicit DepthwiseConv(std::string name, DepthwiseOptions o)
      : WindowLayer(std::move(name), ConvClass("DepthwiseConv", o.rank), o.rank, o.kernel_size,
                    o.strides, o.dilation_rate, o.padding, o.activation, o.use_bias),
        o_(std::move(o)) {}

  absl::StatusOr<std::vector<Shape>> Build(const std::vector<Shape>& in,
                                           const BuildContext& ctx) override {
    Shape out;
    if (absl::Status st = CheckInput(in, &out); !st.ok()) return st;
    const int64_t cin = in[0].back(), mult = o_.depth_multiplier;
    if (!built_) {
      Shape ks = o_.kernel_size;
      ks.push_back(cin);
      ks.push_back(mult);
      SetRegularizers(
          AddWeight("depthwise_kernel", Initialize(o_.depthwise_initializer, ks, ctx.rng)),
          o_.depthwise_l1, o_.depthwise_l2);
      if (use_bias_) {
        SetRegularizers(AddWeight("bias", Initialize(o_.bias_initializer, {cin * mult}, ctx.rng)),
                        o_.bias_l1, o_.bias_l2);
      }
      cin_ = cin;
      built_ = true;
    } else if (cin != cin_) {
      return LayerError(*this, "called on inputs of " + std::to_string(cin) +
                                   " channels, built for " + std::to_string(cin_));
    }
    out.push_back(cin * mult);
    return std::vector<Shape>{out};
  }

  void Forward(const Args& in, std::vector<Tensor>* out, Saved* s,
               const CallContext& ctx) override {
    const Tensor& x = *in.x[0];
    const Geo g = InputGeo(x.shape());
    ReportEmpty(g, x.shape(), ctx);
    const int64_t cm = g.c * o_.depth_multiplier;
    Tensor& z = PreActivation(out, s);
    z.Resize(OutShape(g, cm));
    if (DnnlForward(g, cm, true, use_bias_, x.data(), z.data())) {
      Activate(out, s);
      return;
    }
    z.Fill(0.0f);
    DepthwiseForward(g, o_.depth_multiplier, x.data(), weights()[0].value.data(), z.data());
    if (use_bias_) AddBias(weights()[1].value.data(), z.size() / cm, cm, z.data());
    Activate(out, s);
  }

  void Backward(const Args& in, const std::vector<Tensor>& out,
                const std::vector<const Tensor*>& dout, const std::vector<bool>& need,
                std::vector<Tensor>* din, Saved* s) override {
    const Tensor& x = *in.x[0];
    const Geo g = InputGeo(x.shape());
    const Tensor* dz = PreActivationGrad(out, dout, s);
    const int64_t cm = g.c * o_.depth_multiplier;
    const bool wgrad = weights()[0].trainable;
    if (need[0]) (*din)[0].Resize(x.shape());
    if (DnnlBackward(g, cm, true, use_bias_, x.data(), dz->data(),
                     need[0] ? (*din)[0].data() : nullptr)) {
      return;
    }
    if (wgrad && use_bias_)
      cpu::AddColumnSums(dz->data(), dz->size() / cm, cm, weights()[1].grad.data());
    float* dx = nullptr;
    if (need[0]) {
      (*din)[0].Resize(x.shape());
      (*din)[0].Fill(0.0f);
      dx = (*din)[0].data();
    }
    DepthwiseBackward(g, o_.depth_multiplier, x.data(), weights()[0].value.data(), dz->data(), dx,
                      wgrad ? weights()[0].grad.data() : nullptr);
  }

 private:
  DepthwiseOptions o_;
};

class SeparableConv final : public WindowLayer, public HasOptions<SeparableOptions> {
 public:
  SeparableOptions options() const override { return o_; }
  std::type_index options_type() const override { return typeid(SeparableOptions); }
  cpu::ConvGeometry Geometry(const Shape& x) const override {
    return ToConvGeometry(InputGeo(x), x.back() * o_.depth_multiplier, true);
  }
  explicit SeparableConv(std::string name, SeparableOptions o)
      : WindowLayer(std::move(name), ConvClass("SeparableConv", o.rank), o.rank, o.kernel_size,
                    o.strides, o.dilation_rate, o.padding, o.activation, o.use_bias),
        o_(std::move(o)) {}

  absl::StatusOr<std::vector<Shape>> Build(const std::vector<Shape>& in,
                                           const BuildContext& ctx) override {
    Shape out;
    if (absl::Status st = CheckInput(in, &out); !st.ok()) return st;
    const int64_t cin = in[0].back(), mult = o_.depth_multiplier;
    if (!built_) {
      Shape ks = o_.kernel_size;
      ks.push_back(cin);
      ks.push_back(mult);
      SetRegularizers(
          AddWeight("depthwise_kernel", Initialize(o_.depthwise_initializer, ks, ctx.rng)),
          o_.depthwise_l1, o_.depthwise_l2);
      Shape ps(static_cast<size_t>(rank_), 1);
      ps.push_back(cin * mult);
      ps.push_back(o_.filters);
      SetRegularizers(
          AddWeight("pointwise_kernel", Initialize(o_.pointwise_initializer, ps, ctx.rng)),
          o_.pointwise_l1, o_.pointwise_l2);
      if (use_bias_) {
        SetRegularizers(AddWeight("bias", Initialize(o_.bias_initializer, {o_.filters}, ctx.rng)),
                        o_.bias_l1, o_.bias_l2);
      }
      cin_ = cin;
      built_ = true;
    } else if (cin != cin_) {
      return LayerError(*this, "called on inputs of " + std::to_string(cin) +
                                   " channels, built for " + std::to_string(cin_));
    }
    out.push_back(o_.filters);
    return std::vector<Shape>{out};
  }

  void Forward(const Args& in, std::vector<Tensor>* out, Saved* s,
               const CallContext& ctx) override {
    const Tensor& x = *in.x[0];
    const Geo g = InputGeo(x.shape());
    ReportEmpty(g, x.shape(), ctx);
    const int64_t cm = g.c * o_.depth_multiplier, f = o_.filters;
    Tensor& z = PreActivation(out, s);
    Tensor& mid = s->t[1];
    mid.Resize(OutShape(g, cm));
    if (!DnnlForward(g, cm, true, false, x.data(), mid.data())) {
      mid.Fill(0.0f);
      DepthwiseForward(g, o_.depth_multiplier, x.data(), weights()[0].value.data(), mid.data());
    }
    z.Resize(OutShape(g, f));
    const int64_t rows = mid.size() / cm;
    if (rows > 0) {
      cpu::Gemm(false, false, rows, f, cm, 1.0f, mid.data(), weights()[1].value.data(), 0.0f,
                z.data());
    }
    if (use_bias_) AddBias(weights()[2].value.data(), rows, f, z.data());
    Activate(out, s);
  }

  void Backward(const Args& in, const std::vector<Tensor>& out,
                const std::vector<const Tensor*>& dout, const std::vector<bool>& need,
                std::vector<Tensor>* din, Saved* s) override {
    const Tensor& x = *in.x[0];
    const Geo g = InputGeo(x.shape());
    const Tensor* dz = PreActivationGrad(out, dout, s);
    const int64_t cm = g.c * o_.depth_multiplier, f = o_.filters;
    const Tensor& mid = s->t[1];
    const int64_t rows = mid.size() / cm;
    const bool wgrad = weights()[0].trainable;
    if (wgrad && use_bias_) cpu::AddColumnSums(dz->data(), rows, f, weights()[2].grad.data());
    float* dx = nullptr;
    if (need[0]) {
      (*din)[0].Resize(x.shape());
      (*din)[0].Fill(0.0f);
      dx = (*din)[0].data();
    }
    if (rows == 0) return;
    if (wgrad) {
      cpu::Gemm(true, false, cm, f, rows, 1.0f, mid.data(), dz->data(), 1.0f,
                weights()[1].grad.data());
    }
    Tensor& dmid = s->t[3];
    dmid.Resize(mid.shape());
    cpu::Gemm(false, true, rows, cm, f, 1.0f, dz->data(), weights()[1].value.data(), 0.0f,
              dmid.data());
    if (DnnlBackward(g, cm, true, false, x.data(), dmid.data(), dx)) return;
    DepthwiseBackward(g, o_.depth_multiplier, x.data(), weights()[0].value.data(), dmid.data(), dx,
                      wgrad ? weights()[0].grad.data() : nullptr);
  }

 private:
  SeparableOptions o_;
};

}  // namespace

absl::StatusOr<cpu::ConvGeometry> CallGeometry(const Layer& l, const Shape& x) {
  if (const auto* w = dynamic_cast<const WindowLayer*>(&l); w != nullptr) return w->Geometry(x);
  const std::optional<PoolOptions> p = OptionsOf<PoolOptions>(l);
  if (!p) return LayerError(l, "is not a windowed layer");
  cpu::ConvGeometry g;
  g.rank = p->rank;
  g.n = x[0];
  g.c_in = g.c_out = x.back();
  for (int a = 0; a < g.rank; ++a) {
    const auto i = static_cast<size_t>(a);
    const AxisGeometry ax = WindowAxis(x[i + 1], p->pool_size[i], p->strides[i], 1, p->padding);
    g.in[i] = x[i + 1];
    g.out[i] = ax.out;
    g.kernel[i] = p->pool_size[i];
    g.stride[i] = p->strides[i];
    g.dilation[i] = 1;
    g.pad_before[i] = ax.pad_before;
  }
  return g;
}

std::unique_ptr<Layer> MakeConv(std::string name, ConvOptions o) {
  return std::make_unique<Conv>(std::move(name), std::move(o));
}
std::unique_ptr<Layer> MakeConvTranspose(std::string name, ConvTransposeOptions o) {
  return std::make_unique<ConvTranspose>(std::move(name), std::move(o));
}
std::unique_ptr<Layer> MakeDepthwiseConv(std::string name, DepthwiseOptions o) {
  return std::make_unique<DepthwiseConv>(std::move(name), std::move(o));
}
std::unique_ptr<Layer> MakeSeparableConv(std::string name, SeparableOptions o) {
  return std::make_unique<SeparableConv>(std::move(name), std::move(o));
}

}  // namespace lockstep::trainer::graph
