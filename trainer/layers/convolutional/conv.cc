// Conv1D/2D/3D and Conv1D/2D/3DTranspose on the CPU (layers/convolutional/convolutional.h), and
// the window geometry every windowed layer shares.
#include <algorithm>
#include <atomic>
#include <cmath>

#include "trainer/layers/convolutional/window_layer.h"

namespace lockstep::trainer::graph {

namespace {
std::atomic<ConvBackend> conv_backend{ConvBackend::kOneDnn};
std::atomic<int64_t> onednn_refusals{0};
}  // namespace

namespace conv_detail {
void CountOneDnnRefusal() { ++onednn_refusals; }
}  // namespace conv_detail

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

using namespace conv_detail;

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

}  // namespace

absl::StatusOr<cpu::ConvGeometry> CallGeometry(const Layer& l, const Shape& x) {
  if (const auto* w = dynamic_cast<const conv_detail::WindowLayer*>(&l); w != nullptr)
    return w->Geometry(x);
  return LayerError(l, "is not a windowed layer");
}

std::unique_ptr<Layer> MakeConv(std::string name, ConvOptions o) {
  return std::make_unique<Conv>(std::move(name), std::move(o));
}
std::unique_ptr<Layer> MakeConvTranspose(std::string name, ConvTransposeOptions o) {
  return std::make_unique<ConvTranspose>(std::move(name), std::move(o));
}

}  // namespace lockstep::trainer::graph
