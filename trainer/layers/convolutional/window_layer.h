#pragma once
// What the convolution layers' CPU implementations share (conv.cc, depthwise.cc): the geometry
// of a windowed operation, the im2col and direct depthwise loops, and WindowLayer, their base
// (the shape checks, oneDNN or the loops, the bias and the activation after the linear part).
// Internal to the family.
// Thread-safety: one thread per layer object (graph/layer.h).

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/log.h"
#include "trainer/kernels/cpu/column_sums.h"
#include "trainer/kernels/cpu/dnnl_conv.h"
#include "trainer/kernels/cpu/gemm.h"
#include "trainer/layers/convolutional/convolutional.h"

namespace lockstep::trainer::graph::conv_detail {

// The patch matrix of one GEMM stays under this many floats (4 MiB); larger batches run in
// chunks of examples. Small enough that the patches Im2Col writes are still in the cache when
// the GEMM packs them (and the GEMM's patch gradients when Col2Im reads them), large enough
// that a GEMM still has thousands of rows: ResNet-20's step at batch 64 took 409 ms with the
// whole batch in one matrix (38 MiB in its first stage) and 289 ms in chunks of 4 MiB.
inline constexpr int64_t kColCap = int64_t{1} << 20;

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

// The patch matrix of the examples [n0, n1) (patches in (k..., in) order), and its gradient
// added back into x.
void Im2Col(const Geo& g, const float* x, int64_t n0, int64_t n1, float* col);
void Col2Im(const Geo& g, const float* col, int64_t n0, int64_t n1, float* x);
// The direct depthwise loops, channels innermost.
void DepthwiseForward(const Geo& g, int64_t mult, const float* x, const float* w, float* y);
void DepthwiseBackward(const Geo& g, int64_t mult, const float* x, const float* w, const float* dy,
                       float* dx, float* dw);
void AddBias(const float* b, int64_t rows, int64_t f, float* z);
void AddTo(const std::vector<float>& from, float* to);
// "Conv2D", "Conv1DTranspose".
std::string ConvClass(const char* base, int rank, const char* suffix = "");
// Counts a call geometry oneDNN refused (OneDnnRefusals).
void CountOneDnnRefusal();

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
        CountOneDnnRefusal();
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

}  // namespace lockstep::trainer::graph::conv_detail
