#include "trainer/graph/layers/recurrent.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

#include "trainer/kernels/cpu/column_sums.h"
#include "trainer/kernels/cpu/gemm.h"

namespace lockstep::trainer::graph {
namespace {

// ---------------------------------------------------------------------------------------------
// Embedding

// An id as Python prints a float ("12.0", "2.5", "nan").
std::string FormatId(float v) {
  char buf[64];
  if (std::isfinite(v) && v == std::floor(v) && std::abs(v) < 1e15f) {
    std::snprintf(buf, sizeof buf, "%.1f", static_cast<double>(v));
  } else {
    std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
  }
  return buf;
}

// The index of flat element `i` of a tensor of `shape`, as "[b, t]".
std::string Position(const Shape& shape, int64_t i) {
  std::vector<int64_t> idx(shape.size());
  for (size_t a = shape.size(); a-- > 0;) {
    idx[a] = i % shape[a];
    i /= shape[a];
  }
  std::string out = "[";
  for (size_t a = 0; a < idx.size(); ++a) out += (a ? ", " : "") + std::to_string(idx[a]);
  return out + "]";
}

class Embedding final : public Layer, public HasOptions<EmbeddingOptions> {
 public:
  EmbeddingOptions options() const override { return o_; }
  std::type_index options_type() const override { return typeid(EmbeddingOptions); }
  Embedding(std::string name, EmbeddingOptions o)
      : Layer(std::move(name), "Embedding"), o_(std::move(o)) {}

  absl::StatusOr<std::vector<Shape>> Build(const std::vector<Shape>& in,
                                           const BuildContext& ctx) override {
    if (in.size() != 1) return LayerError(*this, "takes one input (the ids)");
    const Shape& s = in[0];
    if (!o_.input_length.empty()) {
      bool ok = o_.input_length.size() == s.size();
      for (size_t a = 0; ok && a < s.size(); ++a) {
        ok = o_.input_length[a] <= 0 || s[a] <= 0 || o_.input_length[a] == s[a];
      }
      if (!ok) {
        return LayerError(*this, "input_length " + ShapeString(o_.input_length) +
                                     " does not match its input " + ShapeString(s));
      }
    }
    if (!built_) {
      Weight& w = AddWeight("embeddings", Initialize(o_.embeddings_initializer,
                                                     {o_.input_dim, o_.output_dim}, ctx.rng));
      w.l1 = o_.l1;
      w.l2 = o_.l2;
      built_ = true;
    }
    Shape out = s;
    out.push_back(o_.output_dim);
    return std::vector<Shape>{out};
  }

  void Forward(const Args& in, std::vector<Tensor>* out, Saved* s,
               const CallContext& ctx) override {
    const Tensor& x = *in.x[0];
    const int64_t d = o_.output_dim;
    Shape shape = x.shape();
    shape.push_back(d);
    Tensor& y = (*out)[0];
    y.Resize(shape);
    const float* table = weights()[0].value.data();
    for (int64_t i = 0; i < x.size(); ++i) {
      const int64_t id = Id(x[i]);
      float* row = y.data() + i * d;
      if (id >= 0) {
        std::copy_n(table + id * d, d, row);
        continue;
      }
      std::fill_n(row, d, 0.0f);
      const float v = x[i];
      const bool integral = std::isfinite(v) && v == std::floor(v);
      ctx.Report("layer '" + name() + "' (Embedding): id " + FormatId(v) + " at position " +
                 Position(x.shape(), i) +
                 (integral ? " is outside [0, " : " is not an integer in [0, ") +
                 std::to_string(o_.input_dim) + ")");
    }
    if (o_.mask_zero) {
      s->mask.Resize(x.shape());
      for (int64_t i = 0; i < x.size(); ++i) s->mask[i] = x[i] != 0.0f ? 1.0f : 0.0f;
    }
  }

  void Backward(const Args& in, const std::vector<Tensor>&, const std::vector<const Tensor*>& dout,
                const std::vector<bool>&, std::vector<Tensor>*, Saved*) override {
    Weight& w = weights()[0];
    if (!w.trainable) return;
    const Tensor& x = *in.x[0];
    const int64_t d = o_.output_dim;
    const float* g = dout[0]->data();
    float* dw = w.grad.data();
    for (int64_t i = 0; i < x.size(); ++i) {
      const int64_t id = Id(x[i]);
      if (id < 0) continue;
      float* row = dw + id * d;
      const float* gr = g + i * d;
      for (int64_t j = 0; j < d; ++j) row[j] += gr[j];
    }
  }

  const Tensor* OutputMask(const Args&, const Saved& s) const override {
    return o_.mask_zero ? &s.mask : nullptr;
  }
  bool Differentiable(size_t) const override { return false; }
  int64_t IdBound(size_t) const override { return o_.input_dim; }

 private:
  // The row of id `v`, or -1 when it is not an integer in [0, input_dim).
  int64_t Id(float v) const {
    if (!(v >= 0.0f) || v >= static_cast<float>(o_.input_dim) || v != std::floor(v)) return -1;
    return static_cast<int64_t>(v);
  }

  EmbeddingOptions o_;
};

// ---------------------------------------------------------------------------------------------
// Activations over column blocks of row-major matrices (a gate's columns of [batch, G*units]).
// The common gate functions run in place; the others go through ActivationForward/Backward on
// a contiguous copy, so every Keras activation works.

float SigmoidF(float x) { return 1.0f / (1.0f + std::exp(-x)); }

class BlockActivation {
 public:
  // y[r, c0 + j] = f(z[r, c0 + j]) for r < rows, j < n; rows are `ld` apart.
  void Forward(const Activation& a, const float* z, float* y, int64_t rows, int64_t ld, int64_t c0,
               int64_t n) {
    for (int64_t r = 0; r < rows; ++r) {
      const float* zi = z + r * ld + c0;
      float* yi = y + r * ld + c0;
      switch (a.kind) {
        case Act::kLinear:
          std::copy_n(zi, n, yi);
          continue;
        case Act::kTanh:
          for (int64_t j = 0; j < n; ++j) yi[j] = std::tanh(zi[j]);
          continue;
        case Act::kSigmoid:
          for (int64_t j = 0; j < n; ++j) yi[j] = SigmoidF(zi[j]);
          continue;
        case Act::kHardSigmoid2:
          for (int64_t j = 0; j < n; ++j) yi[j] = std::clamp(0.2f * zi[j] + 0.5f, 0.0f, 1.0f);
          continue;
        case Act::kHardSigmoid3:
          for (int64_t j = 0; j < n; ++j) yi[j] = std::clamp(zi[j] / 6.0f + 0.5f, 0.0f, 1.0f);
          continue;
        case Act::kRelu:
          for (int64_t j = 0; j < n; ++j) yi[j] = std::max(zi[j], 0.0f);
          continue;
        default:
          break;
      }
      Generic(a, z, y, rows, ld, c0, n);
      return;
    }
  }

  // dz = f'(z) * dy over the same block (dz may be dy).
  void Backward(const Activation& a, const float* z, const float* y, const float* dy, float* dz,
                int64_t rows, int64_t ld, int64_t c0, int64_t n) {
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t o = r * ld + c0;
      const float* zi = z + o;
      const float* yi = y + o;
      const float* g = dy + o;
      float* d = dz + o;
      switch (a.kind) {
        case Act::kLinear:
          if (d != g) std::copy_n(g, n, d);
          continue;
        case Act::kTanh:
          for (int64_t j = 0; j < n; ++j) d[j] = g[j] * (1.0f - yi[j] * yi[j]);
          continue;
        case Act::kSigmoid:
          for (int64_t j = 0; j < n; ++j) d[j] = g[j] * yi[j] * (1.0f - yi[j]);
          continue;
        case Act::kHardSigmoid2:
          for (int64_t j = 0; j < n; ++j) {
            const float t = 0.2f * zi[j] + 0.5f;
            d[j] = (t > 0 && t < 1) ? 0.2f * g[j] : 0.0f;
          }
          continue;
        case Act::kHardSigmoid3:
          for (int64_t j = 0; j < n; ++j) {
            const float t = zi[j] / 6.0f + 0.5f;
            d[j] = (t > 0 && t < 1) ? g[j] / 6.0f : 0.0f;
          }
          continue;
        case Act::kRelu:
          for (int64_t j = 0; j < n; ++j) d[j] = zi[j] > 0 ? g[j] : 0.0f;
          continue;
        default:
          break;
      }
      GenericBackward(a, z, y, dy, dz, rows, ld, c0, n);
      return;
    }
  }

 private:
  void Gather(const float* src, Tensor* dst, int64_t rows, int64_t ld, int64_t c0, int64_t n) {
    dst->Resize({rows, n});
    for (int64_t r = 0; r < rows; ++r) std::copy_n(src + r * ld + c0, n, dst->data() + r * n);
  }
  void Scatter(const Tensor& src, float* dst, int64_t rows, int64_t ld, int64_t c0, int64_t n) {
    for (int64_t r = 0; r < rows; ++r) std::copy_n(src.data() + r * n, n, dst + r * ld + c0);
  }
  void Generic(const Activation& a, const float* z, float* y, int64_t rows, int64_t ld, int64_t c0,
               int64_t n) {
    Gather(z, &z_, rows, ld, c0, n);
    ActivationForward(a, z_, &y_);
    Scatter(y_, y, rows, ld, c0, n);
  }
  void GenericBackward(const Activation& a, const float* z, const float* y, const float* dy,
                       float* dz, int64_t rows, int64_t ld, int64_t c0, int64_t n) {
    Gather(z, &z_, rows, ld, c0, n);
    Gather(y, &y_, rows, ld, c0, n);
    Gather(dy, &dy_, rows, ld, c0, n);
    ActivationBackward(a, z_, y_, dy_, &dz_);
    Scatter(dz_, dz, rows, ld, c0, n);
  }

  Tensor z_, y_, dy_, dz_;
};

// Columns [c0, c0 + n) of a [rows, ld] matrix into a contiguous [rows, n] one, and back
// (added).
void CopyCols(const float* src, int64_t rows, int64_t ld, int64_t c0, int64_t n, float* dst) {
  for (int64_t r = 0; r < rows; ++r) std::copy_n(src + r * ld + c0, n, dst + r * n);
}
void AddCols(const float* src, int64_t rows, int64_t ld, int64_t c0, int64_t n, float* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* s = src + r * n;
    float* d = dst + r * ld + c0;
    for (int64_t j = 0; j < n; ++j) d[j] += s[j];
  }
}

// ---------------------------------------------------------------------------------------------
// SimpleRNN, LSTM, GRU.
//
// Forward runs in processing order s = 0..T-1 (time T-1-s when go_backwards), time-major so
// that each step's rows are contiguous: one GEMM projects every step's input ([T*B, in] x
// kernel), then each step adds h' U (one GEMM) and applies the gates. Backward walks the steps
// in reverse with one GEMM per step (dA U^T) and finishes with one GEMM each for the kernel's,
// the recurrent kernel's and the input's gradients over all steps.

// What a call keeps in Saved::t.
enum SavedSlot : size_t {
  kX,         // [T*B, in] inputs in processing order (dropout applied when one mask)
  kA,         // [T*B, G*u] gate pre-activations
  kG,         // [T*B, G*u] gate activations (SimpleRNN: the candidate h)
  kH,         // [(T+1)*B, u] hidden states, h0 first
  kC,         // [(T+1)*B, u] LSTM cell states, c0 first
  kE,         // [T*B, u] LSTM act(c); GRU reset_after h' U_h + b'_h; reset_before r * h'
  kM,         // [T*B] the mask of each step's rows (1: step taken)
  kInDrop,    // [masks, B, in] input dropout masks (scaled), empty when none
  kRDrop,     // [masks, B, u] recurrent dropout masks (scaled), empty when none
  kYc,        // [B, u] the output carried over masked steps
  kDA,        // backward: [T*B, G*u] d(pre-activations)
  kDR,        // backward: GRU reset_after [T*B, 3u] d(h' U + b')
  kGH,        // backward: [B, u] dL/dh carried back
  kGC,        // backward: [B, u] dL/dc carried back
  kGY,        // backward: [B, u] dL/d(carried output)
  kScratch1,  // scratch
  kScratch2,  // scratch
  kRnnSlots,
};

class Rnn final : public Layer, public HasOptions<RnnOptions> {
 public:
  RnnOptions options() const override { return o_; }
  std::type_index options_type() const override { return typeid(RnnOptions); }
  Rnn(std::string name, RnnCell cell, RnnOptions o)
      : Layer(std::move(name), RnnClassName(cell)), cell_(cell), o_(std::move(o)) {
    gates_ = cell == RnnCell::kLstm ? 4 : cell == RnnCell::kGru ? 3 : 1;
    states_ = cell == RnnCell::kLstm ? 2 : 1;
  }

  absl::StatusOr<std::vector<Shape>> Build(const std::vector<Shape>& in,
                                           const BuildContext& ctx) override {
    const auto states = static_cast<size_t>(states_);
    if (in.size() != 1 && in.size() != 1 + states) {
      return LayerError(*this, "takes a sequence and optionally its " + std::to_string(states) +
                                   " initial state(s), got " + std::to_string(in.size()) +
                                   " inputs");
    }
    if (in[0].size() != 2) {
      return LayerError(*this, "takes a sequence [batch, time, features], got " +
                                   ShapeString(Batched(-1, in[0])));
    }
    const int64_t d = in[0][1];
    const int64_t u = o_.units;
    if (d <= 0) return LayerError(*this, "the feature axis of its input must be known");
    for (size_t k = 1; k < in.size(); ++k) {
      if (in[k] != Shape{u}) {
        return LayerError(*this, "initial state " + std::to_string(k - 1) + " is " +
                                     ShapeString(Batched(-1, in[k])) + ", expected " +
                                     ShapeString(Batched(-1, {u})));
      }
    }
    if (!built_) {
      const int64_t gu = gates_ * u;
      Weight& k = AddWeight("kernel", Initialize(o_.kernel_initializer, {d, gu}, ctx.rng));
      k.l1 = o_.kernel_l1;
      k.l2 = o_.kernel_l2;
      Weight& r =
          AddWeight("recurrent_kernel", Initialize(o_.recurrent_initializer, {u, gu}, ctx.rng));
      r.l1 = o_.recurrent_l1;
      r.l2 = o_.recurrent_l2;
      if (o_.use_bias) {
        Tensor b;
        if (cell_ == RnnCell::kGru && o_.reset_after) {
          b = Initialize(o_.bias_initializer, {2, gu}, ctx.rng);
        } else if (cell_ == RnnCell::kLstm && o_.unit_forget_bias) {
          // Keras: [init(u), ones(u), init(2u)].
          b = Tensor({gu});
          const Tensor i = Initialize(o_.bias_initializer, {u}, ctx.rng);
          const Tensor rest = Initialize(o_.bias_initializer, {2 * u}, ctx.rng);
          std::copy_n(i.data(), u, b.data());
          std::fill_n(b.data() + u, u, 1.0f);
          std::copy_n(rest.data(), 2 * u, b.data() + 2 * u);
        } else {
          b = Initialize(o_.bias_initializer, {gu}, ctx.rng);
        }
        Weight& bw = AddWeight("bias", std::move(b));
        bw.l1 = o_.bias_l1;
        bw.l2 = o_.bias_l2;
      }
      in_ = d;
      built_ = true;
    } else if (d != in_) {
      return LayerError(*this, "called on inputs of " + std::to_string(d) +
                                   " features, built for " + std::to_string(in_));
    }
    std::vector<Shape> out;
    out.push_back(o_.return_sequences ? Shape{in[0][0], u} : Shape{u});
    if (o_.return_state) {
      for (int k = 0; k < states_; ++k) out.push_back({u});
    }
    return out;
  }

  void Forward(const Args& in, std::vector<Tensor>* out, Saved* s,
               const CallContext& ctx) override {
    const Tensor& x = *in.x[0];
    const int64_t b = x.dim(0), t = x.dim(1), d = in_, u = o_.units, gu = gates_ * u;
    s->t.resize(kRnnSlots);
    auto& st = s->t;
    Tensor& y = (*out)[0];
    y.Resize(o_.return_sequences ? Shape{b, t, u} : Shape{b, u});

    // The mask of each step's rows.
    const Tensor* mask = in.mask0();
    if (mask != nullptr && mask->size() != b * t) {
      ctx.Report("layer '" + name() + "' (" + class_name() + "): a mask of shape " +
                 ShapeString(mask->shape()) + " does not fit its input " + ShapeString(x.shape()));
      mask = nullptr;
    }
    Tensor& m = st[kM];
    m.Resize({t * b});
    for (int64_t step = 0; step < t; ++step) {
      const int64_t time = Time(step, t);
      for (int64_t r = 0; r < b; ++r) {
        m[step * b + r] = mask == nullptr || (*mask)[r * t + time] != 0.0f ? 1.0f : 0.0f;
      }
    }

    // Input dropout: one mask per sequence (per gate for implementation 0/1).
    const bool drop = ctx.training && o_.dropout > 0 && o_.dropout < 1 && ctx.rng != nullptr;
    const int64_t masks = drop ? (o_.dropout_per_gate ? gates_ : 1) : 0;
    Tensor& dm = st[kInDrop];
    dm.Resize({masks, b, d});
    if (drop) {
      std::bernoulli_distribution keep(1.0 - static_cast<double>(o_.dropout));
      const float scale = 1.0f / (1.0f - o_.dropout);
      for (float& v : dm.values()) v = keep(*ctx.rng) ? scale : 0.0f;
    }

    // Inputs in processing order, time-major.
    Tensor& xt = st[kX];
    xt.Resize({t * b, d});
    for (int64_t step = 0; step < t; ++step) {
      const int64_t time = Time(step, t);
      for (int64_t r = 0; r < b; ++r) {
        const float* src = x.data() + (r * t + time) * d;
        float* dst = xt.data() + (step * b + r) * d;
        if (masks == 1) {
          const float* mk = dm.data() + r * d;
          for (int64_t j = 0; j < d; ++j) dst[j] = src[j] * mk[j];
        } else {
          std::copy_n(src, d, dst);
        }
      }
    }

    // Every step's input projection at once.
    Tensor& a = st[kA];
    a.Resize({t * b, gu});
    const float* w = weights()[0].value.data();
    const float* bias = o_.use_bias ? weights()[2].value.data() : nullptr;
    if (bias != nullptr) {
      for (int64_t r = 0; r < t * b; ++r) std::copy_n(bias, gu, a.data() + r * gu);
    } else {
      a.Fill(0.0f);
    }
    if (t * b > 0) InputProjection(xt, dm, masks, w, &a, s);

    // Initial states.
    Tensor& h = st[kH];
    h.Resize({(t + 1) * b, u});
    if (in.x.size() > 1) {
      std::copy_n(in.x[1]->data(), b * u, h.data());
    } else {
      std::fill_n(h.data(), b * u, 0.0f);
    }
    Tensor& c = st[kC];
    if (cell_ == RnnCell::kLstm) {
      c.Resize({(t + 1) * b, u});
      if (in.x.size() > 2) {
        std::copy_n(in.x[2]->data(), b * u, c.data());
      } else {
        std::fill_n(c.data(), b * u, 0.0f);
      }
    }
    Tensor& g = st[kG];
    g.Resize({t * b, gu});
    Tensor& e = st[kE];
    if (cell_ != RnnCell::kSimpleRnn) e.Resize({t * b, u});
    Tensor& yc = st[kYc];
    yc.Resize({b, u});
    yc.Fill(0.0f);
    const bool zero_out = o_.zero_output_for_mask && o_.return_sequences;
    const float* rk = weights()[1].value.data();
    // Recurrent dropout: masks on the state each gate's recurrent product reads.
    const bool rdrop =
        ctx.training && o_.recurrent_dropout > 0 && o_.recurrent_dropout < 1 && ctx.rng != nullptr;
    Tensor& rm = st[kRDrop];
    rm.Resize({rdrop ? (o_.recurrent_dropout_per_gate ? gates_ : 1) : 0, b, u});
    if (rdrop) {
      std::bernoulli_distribution keep(1.0 - static_cast<double>(o_.recurrent_dropout));
      const float scale = 1.0f / (1.0f - o_.recurrent_dropout);
      for (float& v : rm.values()) v = keep(*ctx.rng) ? scale : 0.0f;
    }
    PrepareRecurrent(rk, rm.dim(0));
    const float* cand = CandidateMask(rm);

    for (int64_t step = 0; step < (b > 0 ? t : 0); ++step) {
      const int64_t off = step * b;
      float* as = a.data() + off * gu;
      float* gs = g.data() + off * gu;
      const float* hp = h.data() + off * u;
      float* hn = h.data() + (off + b) * u;
      const float* ms = m.data() + off;
      switch (cell_) {
        case RnnCell::kSimpleRnn:
          RecurrentProject(hp, b, 0, 1, as, gu, rm);
          act_.Forward(o_.activation, as, gs, b, u, 0, u);
          break;
        case RnnCell::kLstm: {
          RecurrentProject(hp, b, 0, gates_, as, gu, rm);
          act_.Forward(o_.recurrent_activation, as, gs, b, gu, 0, 2 * u);
          act_.Forward(o_.activation, as, gs, b, gu, 2 * u, u);
          act_.Forward(o_.recurrent_activation, as, gs, b, gu, 3 * u, u);
          const float* cp = c.data() + off * u;
          float* cn = c.data() + (off + b) * u;
          for (int64_t r = 0; r < b; ++r) {
            const float* gr = gs + r * gu;
            for (int64_t j = 0; j < u; ++j) {
              const int64_t k = r * u + j;
              cn[k] = ms[r] != 0 ? gr[u + j] * cp[k] + gr[j] * gr[2 * u + j] : cp[k];
            }
          }
          float* es = e.data() + off * u;
          act_.Forward(o_.activation, cn, es, b, u, 0, u);
          break;
        }
        case RnnCell::kGru: {
          float* es = e.data() + off * u;
          if (o_.reset_after) {
            Tensor& rr = st[kScratch1];
            rr.Resize({b, gu});
            if (bias != nullptr) {
              for (int64_t r = 0; r < b; ++r) std::copy_n(bias + gu, gu, rr.data() + r * gu);
            } else {
              rr.Fill(0.0f);
            }
            RecurrentProject(hp, b, 0, gates_, rr.data(), gu, rm);
            for (int64_t r = 0; r < b; ++r) {
              for (int64_t j = 0; j < 2 * u; ++j) as[r * gu + j] += rr[r * gu + j];
            }
            act_.Forward(o_.recurrent_activation, as, gs, b, gu, 0, 2 * u);
            for (int64_t r = 0; r < b; ++r) {
              for (int64_t j = 0; j < u; ++j) {
                const float rh = rr[r * gu + 2 * u + j];
                es[r * u + j] = rh;
                as[r * gu + 2 * u + j] += gs[r * gu + u + j] * rh;
              }
            }
          } else {
            RecurrentProject(hp, b, 0, 2, as, gu, rm);
            act_.Forward(o_.recurrent_activation, as, gs, b, gu, 0, 2 * u);
            for (int64_t r = 0; r < b; ++r) {
              for (int64_t j = 0; j < u; ++j) {
                const int64_t k = r * u + j;
                es[k] = gs[r * gu + u + j] * hp[k] * (cand != nullptr ? cand[k] : 1.0f);
              }
            }
            Tensor& t2 = st[kScratch2];
            t2.Resize({b, u});
            cpu::Gemm(false, false, b, u, u, 1.0f, es, uh_.data(), 0.0f, t2.data());
            AddCols(t2.data(), b, gu, 2 * u, u, as);
          }
          act_.Forward(o_.activation, as, gs, b, gu, 2 * u, u);
          break;
        }
      }
      // The new state and this step's output, carried over masked rows.
      for (int64_t r = 0; r < b; ++r) {
        float* yr = yc.data() + r * u;
        float* hr = hn + r * u;
        const float* hpr = hp + r * u;
        if (ms[r] == 0) {
          std::copy_n(hpr, u, hr);
          if (zero_out) std::fill_n(yr, u, 0.0f);
        } else {
          const float* gr = gs + r * gu;
          switch (cell_) {
            case RnnCell::kSimpleRnn:
              std::copy_n(gr, u, hr);
              break;
            case RnnCell::kLstm: {
              const float* er = e.data() + (off + r) * u;
              for (int64_t j = 0; j < u; ++j) hr[j] = gr[3 * u + j] * er[j];
              break;
            }
            case RnnCell::kGru:
              for (int64_t j = 0; j < u; ++j) {
                const float z = gr[j];
                hr[j] = z * hpr[j] + (1.0f - z) * gr[2 * u + j];
              }
              break;
          }
          std::copy_n(hr, u, yr);
        }
        if (o_.return_sequences) std::copy_n(yr, u, y.data() + (r * t + step) * u);
      }
    }
    if (!o_.return_sequences) std::copy_n(yc.data(), b * u, y.data());
    if (o_.return_state) {
      (*out)[1].Resize({b, u});
      std::copy_n(h.data() + t * b * u, b * u, (*out)[1].data());
      if (cell_ == RnnCell::kLstm) {
        (*out)[2].Resize({b, u});
        std::copy_n(c.data() + t * b * u, b * u, (*out)[2].data());
      }
    }
  }

  void Backward(const Args& in, const std::vector<Tensor>&, const std::vector<const Tensor*>& dout,
                const std::vector<bool>& need, std::vector<Tensor>* din, Saved* s) override {
    const Tensor& x = *in.x[0];
    const int64_t b = x.dim(0), t = x.dim(1), d = in_, u = o_.units, gu = gates_ * u;
    auto& st = s->t;
    const Tensor& a = st[kA];
    const Tensor& g = st[kG];
    const Tensor& h = st[kH];
    const Tensor& c = st[kC];
    const Tensor& e = st[kE];
    const Tensor& m = st[kM];
    const int64_t masks = st[kInDrop].dim(0);
    Tensor& da = st[kDA];
    da.Resize({t * b, gu});
    Tensor& gh = st[kGH];
    Tensor& gc = st[kGC];
    Tensor& gy = st[kGY];
    gh.Resize({b, u});
    gc.Resize({b, u});
    gy.Resize({b, u});
    if (o_.return_state) {
      std::copy_n(dout[1]->data(), b * u, gh.data());
      if (cell_ == RnnCell::kLstm) std::copy_n(dout[2]->data(), b * u, gc.data());
    } else {
      gh.Fill(0.0f);
      gc.Fill(0.0f);
    }
    if (o_.return_sequences) {
      gy.Fill(0.0f);
    } else {
      std::copy_n(dout[0]->data(), b * u, gy.data());
    }
    const float* dys = o_.return_sequences ? dout[0]->data() : nullptr;
    const bool zero_out = o_.zero_output_for_mask && o_.return_sequences;
    const float* rk = weights()[1].value.data();
    const Tensor& rm = st[kRDrop];
    PrepareRecurrent(rk, rm.dim(0));
    const float* cand = CandidateMask(rm);
    Tensor& dr = st[kDR];
    if (cell_ == RnnCell::kGru && o_.reset_after) dr.Resize({t * b, gu});
    Tensor& t1 = st[kScratch1];
    Tensor& t2 = st[kScratch2];

    for (int64_t step = b > 0 ? t : 0; step-- > 0;) {
      const int64_t off = step * b;
      const float* as = a.data() + off * gu;
      const float* gs = g.data() + off * gu;
      const float* hp = h.data() + off * u;
      const float* ms = m.data() + off;
      float* das = da.data() + off * gu;
      // dL/d(new h) of the rows that took the step; the others pass their gradients back.
      // t1 [B, u]: dL/d(new h) (0 on masked rows); gh becomes the part that skips the cell.
      t1.Resize({b, u});
      for (int64_t r = 0; r < b; ++r) {
        for (int64_t j = 0; j < u; ++j) {
          const int64_t k = r * u + j;
          const float gyt = gy[k] + (dys != nullptr ? dys[(r * t + step) * u + j] : 0.0f);
          if (ms[r] != 0) {
            t1[k] = gh[k] + gyt;
            gh[k] = 0;
            gy[k] = 0;
          } else {
            t1[k] = 0;
            gy[k] = zero_out ? 0.0f : gyt;
          }
        }
      }
      const float* gn = t1.data();
      switch (cell_) {
        case RnnCell::kSimpleRnn:
          std::copy_n(gn, b * u, das);
          act_.Backward(o_.activation, as, gs, das, das, b, u, 0, u);
          RecurrentBackInput(das, b, 0, 1, gu, rm, gh.data());
          break;
        case RnnCell::kLstm: {
          const float* cp = c.data() + off * u;
          const float* cn = c.data() + (off + b) * u;
          const float* es = e.data() + off * u;
          // t2 = dL/d act(c) = gn * o, then through act.
          t2.Resize({b, u});
          for (int64_t r = 0; r < b; ++r) {
            for (int64_t j = 0; j < u; ++j) {
              const int64_t k = r * u + j;
              t2[k] = gn[k] * gs[r * gu + 3 * u + j];
              das[r * gu + 3 * u + j] = gn[k] * es[k];
            }
          }
          act_.Backward(o_.activation, cn, es, t2.data(), t2.data(), b, u, 0, u);
          for (int64_t r = 0; r < b; ++r) {
            const float* gr = gs + r * gu;
            float* dr_ = das + r * gu;
            for (int64_t j = 0; j < u; ++j) {
              const int64_t k = r * u + j;
              if (ms[r] == 0) {
                dr_[j] = dr_[u + j] = dr_[2 * u + j] = dr_[3 * u + j] = 0;
                continue;  // gc passes back unchanged
              }
              const float dc = gc[k] + t2[k];
              dr_[j] = dc * gr[2 * u + j];
              dr_[u + j] = dc * cp[k];
              dr_[2 * u + j] = dc * gr[j];
              gc[k] = dc * gr[u + j];
            }
          }
          act_.Backward(o_.recurrent_activation, as, gs, das, das, b, gu, 0, 2 * u);
          act_.Backward(o_.activation, as, gs, das, das, b, gu, 2 * u, u);
          act_.Backward(o_.recurrent_activation, as, gs, das, das, b, gu, 3 * u, u);
          RecurrentBackInput(das, b, 0, gates_, gu, rm, gh.data());
          break;
        }
        case RnnCell::kGru: {
          const float* es = e.data() + off * u;
          for (int64_t r = 0; r < b; ++r) {
            const float* gr = gs + r * gu;
            float* dr_ = das + r * gu;
            for (int64_t j = 0; j < u; ++j) {
              const int64_t k = r * u + j;
              const float z = gr[j];
              dr_[j] = gn[k] * (hp[k] - gr[2 * u + j]);
              dr_[u + j] = 0;
              dr_[2 * u + j] = gn[k] * (1.0f - z);
              gh[k] += gn[k] * z;
            }
          }
          act_.Backward(o_.activation, as, gs, das, das, b, gu, 2 * u, u);
          if (o_.reset_after) {
            float* drs = dr.data() + off * gu;
            for (int64_t r = 0; r < b; ++r) {
              for (int64_t j = 0; j < u; ++j) {
                const float dhh = das[r * gu + 2 * u + j];
                das[r * gu + u + j] = dhh * es[r * u + j];
                drs[r * gu + 2 * u + j] = dhh * gs[r * gu + u + j];
              }
            }
            act_.Backward(o_.recurrent_activation, as, gs, das, das, b, gu, 0, 2 * u);
            for (int64_t r = 0; r < b; ++r) std::copy_n(das + r * gu, 2 * u, drs + r * gu);
            RecurrentBackInput(drs, b, 0, gates_, gu, rm, gh.data());
          } else {
            // d(r h') = dhh U_h^T.
            t2.Resize({b, u});
            Tensor& t3 = scratch_;
            t3.Resize({b, 2 * u});
            CopyCols(das, b, gu, 2 * u, u, t2.data());
            cpu::Gemm(false, true, b, u, u, 1.0f, t2.data(), uh_.data(), 0.0f, t3.data());
            for (int64_t r = 0; r < b; ++r) {
              for (int64_t j = 0; j < u; ++j) {
                const int64_t k = r * u + j;
                const float drh = t3[r * u + j];
                const float mk = cand != nullptr ? cand[k] : 1.0f;
                das[r * gu + u + j] = drh * hp[k] * mk;
                gh[k] += drh * gs[r * gu + u + j] * mk;
              }
            }
            act_.Backward(o_.recurrent_activation, as, gs, das, das, b, gu, 0, 2 * u);
            RecurrentBackInput(das, b, 0, 2, gu, rm, gh.data());
          }
          break;
        }
      }
    }
    if (need.size() > 1 && need[1]) (*din)[1] = gh;
    if (cell_ == RnnCell::kLstm && need.size() > 2 && need[2]) (*din)[2] = gc;
    if (t * b == 0) {
      if (need[0]) (*din)[0].Resize(x.shape());
      return;
    }

    const Tensor& xt = st[kX];
    const Tensor& dm = st[kInDrop];
    if (weights()[0].trainable) {
      // Kernel and input bias.
      float* dw = weights()[0].grad.data();
      if (masks <= 1) {
        cpu::Gemm(true, false, d, gu, t * b, 1.0f, xt.data(), da.data(), 1.0f, dw);
      } else {
        for (int64_t q = 0; q < gates_; ++q) {
          MaskedInputs(xt, dm, q, &t1);
          t2.Resize({t * b, u});
          CopyCols(da.data(), t * b, gu, q * u, u, t2.data());
          scratch_.Resize({d, u});
          cpu::Gemm(true, false, d, u, t * b, 1.0f, t1.data(), t2.data(), 0.0f, scratch_.data());
          AddCols(scratch_.data(), d, gu, q * u, u, dw);
        }
      }
      if (o_.use_bias) {
        float* db = weights()[2].grad.data();
        cpu::AddColumnSums(da.data(), t * b, gu, db);
        if (cell_ == RnnCell::kGru && o_.reset_after)
          cpu::AddColumnSums(dr.data(), t * b, gu, db + gu);
      }
      // Recurrent kernel: h' (the first T steps of H) against the recurrent gradients.
      float* du = weights()[1].grad.data();
      if (cell_ != RnnCell::kGru) {
        RecurrentBackWeight(h.data(), t * b, 0, gates_, da.data(), rm, du);
      } else if (o_.reset_after) {
        RecurrentBackWeight(h.data(), t * b, 0, gates_, dr.data(), rm, du);
      } else {
        RecurrentBackWeight(h.data(), t * b, 0, 2, da.data(), rm, du);
        t2.Resize({t * b, u});
        CopyCols(da.data(), t * b, gu, 2 * u, u, t2.data());
        scratch_.Resize({u, u});
        cpu::Gemm(true, false, u, u, t * b, 1.0f, e.data(), t2.data(), 0.0f, scratch_.data());
        AddCols(scratch_.data(), u, gu, 2 * u, u, du);
      }
    }
    if (need[0]) {
      Tensor& dx = (*din)[0];
      dx.Resize(x.shape());
      const float* w = weights()[0].value.data();
      Tensor& dxt = t1;
      dxt.Resize({t * b, d});
      if (masks <= 1) {
        cpu::Gemm(false, true, t * b, d, gu, 1.0f, da.data(), w, 0.0f, dxt.data());
        ScatterInputGrad(dxt, masks == 1 ? dm.data() : nullptr, b, t, &dx, false);
      } else {
        dx.Fill(0.0f);
        for (int64_t q = 0; q < gates_; ++q) {
          t2.Resize({t * b, u});
          CopyCols(da.data(), t * b, gu, q * u, u, t2.data());
          scratch_.Resize({d, u});
          CopyCols(w, d, gu, q * u, u, scratch_.data());
          cpu::Gemm(false, true, t * b, d, u, 1.0f, t2.data(), scratch_.data(), 0.0f, dxt.data());
          ScatterInputGrad(dxt, dm.data() + q * b * d, b, t, &dx, true);
        }
      }
    }
  }

  const Tensor* OutputMask(const Args& in, const Saved&) const override {
    return o_.return_sequences ? in.mask0() : nullptr;
  }

 private:
  int64_t Time(int64_t step, int64_t t) const { return o_.go_backwards ? t - 1 - step : step; }

  // a += the inputs' projection (bias already in a).
  void InputProjection(const Tensor& xt, const Tensor& dm, int64_t masks, const float* w, Tensor* a,
                       Saved* s) {
    const int64_t rows = xt.dim(0), d = in_, u = o_.units, gu = gates_ * u;
    if (masks <= 1) {
      cpu::Gemm(false, false, rows, gu, d, 1.0f, xt.data(), w, 1.0f, a->data());
      return;
    }
    Tensor& xg = s->t[kScratch1];
    Tensor& part = s->t[kScratch2];
    for (int64_t q = 0; q < gates_; ++q) {
      MaskedInputs(xt, dm, q, &xg);
      scratch_.Resize({d, u});
      CopyCols(w, d, gu, q * u, u, scratch_.data());
      part.Resize({rows, u});
      cpu::Gemm(false, false, rows, u, d, 1.0f, xg.data(), scratch_.data(), 0.0f, part.data());
      AddCols(part.data(), rows, gu, q * u, u, a->data());
    }
  }

  // The inputs under gate q's dropout mask.
  void MaskedInputs(const Tensor& xt, const Tensor& dm, int64_t q, Tensor* out) const {
    const int64_t rows = xt.dim(0), d = in_, b = dm.dim(1);
    out->Resize({rows, d});
    for (int64_t r = 0; r < rows; ++r) {
      const float* mk = dm.data() + (q * b + r % b) * d;
      const float* src = xt.data() + r * d;
      float* dst = out->data() + r * d;
      for (int64_t j = 0; j < d; ++j) dst[j] = src[j] * mk[j];
    }
  }

  // dx[b, time(s)] (+)= dxt[s*B + b] * mask[b] (mask null: 1).
  void ScatterInputGrad(const Tensor& dxt, const float* mask, int64_t b, int64_t t, Tensor* dx,
                        bool add) const {
    const int64_t d = in_;
    for (int64_t step = 0; step < t; ++step) {
      const int64_t time = Time(step, t);
      for (int64_t r = 0; r < b; ++r) {
        const float* src = dxt.data() + (step * b + r) * d;
        float* dst = dx->data() + (r * t + time) * d;
        for (int64_t j = 0; j < d; ++j) {
          const float v = mask != nullptr ? src[j] * mask[r * d + j] : src[j];
          dst[j] = add ? dst[j] + v : v;
        }
      }
    }
  }

  // Contiguous copies of the recurrent kernel's column blocks the products below need: the
  // z, r columns [u, 2u] and the h columns [u, u] of a GRU computing reset_before, and each
  // gate's [u, u] when every gate has its own recurrent dropout mask (`masks` > 1).
  void PrepareRecurrent(const float* rk, int64_t masks) {
    const int64_t u = o_.units, gu = gates_ * u;
    if (cell_ == RnnCell::kGru && !o_.reset_after) {
      uzr_.Resize({u, 2 * u});
      uh_.Resize({u, u});
      CopyCols(rk, u, gu, 0, 2 * u, uzr_.data());
      CopyCols(rk, u, gu, 2 * u, u, uh_.data());
    }
    if (masks > 1) {
      uq_.resize(static_cast<size_t>(gates_));
      for (int64_t q = 0; q < gates_; ++q) {
        uq_[static_cast<size_t>(q)].Resize({u, u});
        CopyCols(rk, u, gu, q * u, u, uq_[static_cast<size_t>(q)].data());
      }
    }
  }

  // The recurrent kernel's columns of gates [q0, q1) (contiguous).
  const float* Columns(int64_t q0, int64_t q1) {
    if (q0 == 0 && q1 == gates_) return weights()[1].value.data();
    return q0 == 0 && q1 == 2 ? uzr_.data() : uq_[static_cast<size_t>(q0)].data();
  }

  // Gate q's recurrent dropout mask [B, u] (null: none).
  static const float* GateMask(const Tensor& rm, int64_t q) {
    const int64_t masks = rm.dim(0);
    if (masks == 0) return nullptr;
    return rm.data() + (masks == 1 ? 0 : q) * rm.dim(1) * rm.dim(2);
  }
  // The mask on the state a GRU's reset_before candidate reads (gate h's).
  const float* CandidateMask(const Tensor& rm) const {
    return cell_ == RnnCell::kGru && !o_.reset_after ? GateMask(rm, 2) : nullptr;
  }

  // out[r] = h[r] * mask[r % batch] over `rows` rows of u (the rows of several steps).
  void MaskRows(const float* h, const float* mask, int64_t rows, int64_t batch, Tensor* out) const {
    const int64_t u = o_.units;
    out->Resize({rows, u});
    for (int64_t r = 0; r < rows; ++r) {
      const float* m = mask + (r % batch) * u;
      const float* src = h + r * u;
      float* dst = out->data() + r * u;
      for (int64_t j = 0; j < u; ++j) dst[j] = src[j] * m[j];
    }
  }

  // dst's columns of gates [q0, q1) (rows `ld` apart, dst at gate q0's first column) +=
  // (h * mask_q) U_q over `rows` rows of h.
  void RecurrentProject(const float* h, int64_t rows, int64_t q0, int64_t q1, float* dst,
                        int64_t ld, const Tensor& rm) {
    const int64_t u = o_.units, n = (q1 - q0) * u;
    const int64_t batch = rm.dim(1);
    if (rm.dim(0) <= 1) {
      const float* src = h;
      if (rm.dim(0) == 1) {
        MaskRows(h, GateMask(rm, 0), rows, batch, &ra_);
        src = ra_.data();
      }
      if (ld == n) {
        cpu::Gemm(false, false, rows, n, u, 1.0f, src, Columns(q0, q1), 1.0f, dst);
      } else {
        rb_.Resize({rows, n});
        cpu::Gemm(false, false, rows, n, u, 1.0f, src, Columns(q0, q1), 0.0f, rb_.data());
        AddCols(rb_.data(), rows, ld, 0, n, dst);
      }
      return;
    }
    rb_.Resize({rows, u});
    for (int64_t q = q0; q < q1; ++q) {
      MaskRows(h, GateMask(rm, q), rows, batch, &ra_);
      cpu::Gemm(false, false, rows, u, u, 1.0f, ra_.data(), Columns(q, q + 1), 0.0f, rb_.data());
      AddCols(rb_.data(), rows, ld, (q - q0) * u, u, dst);
    }
  }

  // gh [rows, u] += sum over gates q in [q0, q1) of (dx_q U_q^T) * mask_q, dx's columns of
  // gate q0 first, rows `ld` apart.
  void RecurrentBackInput(const float* dx, int64_t rows, int64_t q0, int64_t q1, int64_t ld,
                          const Tensor& rm, float* gh) {
    const int64_t u = o_.units, n = (q1 - q0) * u;
    const int64_t batch = rm.dim(1);
    const bool per_gate = rm.dim(0) > 1;
    for (int64_t q = q0; q < (per_gate ? q1 : q0 + 1); ++q) {
      const int64_t w = per_gate ? u : n;
      const float* src = dx + (q - q0) * u;
      if (ld != w) {
        ra_.Resize({rows, w});
        CopyCols(dx, rows, ld, (q - q0) * u, w, ra_.data());
        src = ra_.data();
      }
      const float* cols = per_gate ? Columns(q, q + 1) : Columns(q0, q1);
      const float* mask = GateMask(rm, q);
      if (mask == nullptr) {
        cpu::Gemm(false, true, rows, u, w, 1.0f, src, cols, 1.0f, gh);
        continue;
      }
      rb_.Resize({rows, u});
      cpu::Gemm(false, true, rows, u, w, 1.0f, src, cols, 0.0f, rb_.data());
      for (int64_t r = 0; r < rows; ++r) {
        const float* m = mask + (r % batch) * u;
        for (int64_t j = 0; j < u; ++j) gh[r * u + j] += rb_[r * u + j] * m[j];
      }
    }
  }

  // The recurrent kernel's gradient (du [u, G*u]) in the columns of gates [q0, q1):
  // (h * mask_q)^T dx_q over `rows` rows, dx's rows G*u apart.
  void RecurrentBackWeight(const float* h, int64_t rows, int64_t q0, int64_t q1, const float* dx,
                           const Tensor& rm, float* du) {
    const int64_t u = o_.units, gu = gates_ * u, n = (q1 - q0) * u;
    const int64_t batch = rm.dim(1);
    const bool per_gate = rm.dim(0) > 1;
    for (int64_t q = q0; q < (per_gate ? q1 : q0 + 1); ++q) {
      const int64_t w = per_gate ? u : n;
      const float* src = h;
      if (const float* mask = GateMask(rm, q); mask != nullptr) {
        MaskRows(h, mask, rows, batch, &rc_);
        src = rc_.data();
      }
      if (w == gu) {
        cpu::Gemm(true, false, u, gu, rows, 1.0f, src, dx, 1.0f, du);
        continue;
      }
      ra_.Resize({rows, w});
      CopyCols(dx, rows, gu, q * u, w, ra_.data());
      rb_.Resize({u, w});
      cpu::Gemm(true, false, u, w, rows, 1.0f, src, ra_.data(), 0.0f, rb_.data());
      AddCols(rb_.data(), u, gu, q * u, w, du);
    }
  }

  RnnCell cell_;
  RnnOptions o_;
  int64_t gates_ = 1, states_ = 1, in_ = 0;
  BlockActivation act_;
  Tensor uzr_, uh_, scratch_, ra_, rb_, rc_;
  std::vector<Tensor> uq_;
};

// ---------------------------------------------------------------------------------------------
// Wrappers.

// An inner layer's per-call records travel inside the wrapper's own Saved: Stash moves them in
// (layout: per record, i = [#t, #i, i...] and t = [mask, t...]), Unstash moves them back out.
void Stash(std::vector<Saved>* recs, Saved* outer) {
  outer->t.clear();
  outer->i.clear();
  for (Saved& r : *recs) {
    outer->i.push_back(static_cast<int64_t>(r.t.size()));
    outer->i.push_back(static_cast<int64_t>(r.i.size()));
    outer->i.insert(outer->i.end(), r.i.begin(), r.i.end());
    outer->t.push_back(std::move(r.mask));
    for (Tensor& x : r.t) outer->t.push_back(std::move(x));
  }
}

std::vector<Saved> Unstash(Saved* outer, size_t n) {
  std::vector<Saved> recs(n);
  if (outer->i.empty()) return recs;
  size_t ii = 0, ti = 0;
  for (Saved& r : recs) {
    const auto nt = static_cast<size_t>(outer->i[ii++]);
    const auto ni = static_cast<size_t>(outer->i[ii++]);
    r.i.assign(outer->i.begin() + static_cast<std::ptrdiff_t>(ii),
               outer->i.begin() + static_cast<std::ptrdiff_t>(ii + ni));
    ii += ni;
    r.mask = std::move(outer->t[ti++]);
    for (size_t k = 0; k < nt; ++k) r.t.push_back(std::move(outer->t[ti++]));
  }
  outer->t.clear();
  outer->i.clear();
  return recs;
}

// Puts a wrapper's copies of an inner layer's weights (values and gradients) into the inner
// layer for the duration of one of its calls.
class Lend {
 public:
  Lend(Layer* inner, std::vector<Weight>* mine, size_t first)
      : inner_(inner), mine_(mine), first_(first) {
    Swap();
  }
  ~Lend() { Swap(); }
  Lend(const Lend&) = delete;
  Lend& operator=(const Lend&) = delete;

 private:
  void Swap() {
    std::vector<Weight>& w = inner_->weights();
    for (size_t k = 0; k < w.size(); ++k) {
      std::swap(w[k].value, (*mine_)[first_ + k].value);
      std::swap(w[k].grad, (*mine_)[first_ + k].grad);
    }
  }
  Layer* inner_;
  std::vector<Weight>* mine_;
  size_t first_;
};

// A layer whose weights are its inner layers' (under a name prefix each).
class Wrapper : public Layer {
 public:
  using Layer::Layer;

 protected:
  // The inner layer's Build (its weights lent once this layer holds them).
  absl::StatusOr<std::vector<Shape>> BuildInner(size_t k, const std::vector<Shape>& in,
                                                const BuildContext& ctx) {
    Layer* l = inner_[k].get();
    if (!built_) return l->Build(in, ctx);
    Lend lend(l, &weights(), first_[k]);
    return l->Build(in, ctx);
  }
  // Moves every inner layer's weights into this layer's list (after the first builds).
  void Adopt(const std::vector<std::string>& prefixes) {
    first_.clear();
    for (size_t k = 0; k < inner_.size(); ++k) {
      first_.push_back(weights().size());
      for (Weight& w : inner_[k]->weights()) {
        Weight& mine = AddWeight(prefixes[k] + w.name, std::move(w.value), w.trainable);
        mine.l1 = w.l1;
        mine.l2 = w.l2;
        w.trainable = mine.trainable;
        w.value = Tensor();
        w.grad = Tensor();
      }
    }
  }
  Lend LendTo(size_t k) { return Lend(inner_[k].get(), &weights(), first_[k]); }

  std::vector<std::unique_ptr<Layer>> inner_;
  std::vector<size_t> first_;
};

class Bidirectional final : public Wrapper, public HasOptions<BidirectionalOptions> {
 public:
  BidirectionalOptions options() const override {
    return {merge_, seq_, state_, inner_[0].get(), inner_[1].get()};
  }
  std::type_index options_type() const override { return typeid(BidirectionalOptions); }
  Bidirectional(std::string name, std::unique_ptr<Layer> fwd, std::unique_ptr<Layer> bwd,
                BidirectionalMerge merge, bool return_sequences, bool return_state)
      : Wrapper(std::move(name), "Bidirectional"),
        merge_(merge),
        seq_(return_sequences),
        state_(return_state) {
    inner_.push_back(std::move(fwd));
    inner_.push_back(std::move(bwd));
  }

  absl::StatusOr<std::vector<Shape>> Build(const std::vector<Shape>& in,
                                           const BuildContext& ctx) override {
    if (in.empty() || (in.size() - 1) % 2 != 0) {
      return LayerError(*this,
                        "takes a sequence and optionally the initial states of both directions "
                        "(as many for each), got " +
                            std::to_string(in.size()) + " inputs");
    }
    half_ = (in.size() - 1) / 2;
    std::vector<Shape> fin{in[0]}, bin{in[0]};
    fin.insert(fin.end(), in.begin() + 1, in.begin() + 1 + static_cast<std::ptrdiff_t>(half_));
    bin.insert(bin.end(), in.begin() + 1 + static_cast<std::ptrdiff_t>(half_), in.end());
    absl::StatusOr<std::vector<Shape>> fo = BuildInner(0, fin, ctx);
    if (!fo.ok()) return fo.status();
    absl::StatusOr<std::vector<Shape>> bo = BuildInner(1, bin, ctx);
    if (!bo.ok()) return bo.status();
    if (fo->size() != bo->size() || fo->empty()) {
      return LayerError(*this, "its forward and backward layers return different outputs");
    }
    outs_ = fo->size();
    if (state_ != (outs_ > 1)) {
      return LayerError(*this, "return_state does not match its layers' outputs");
    }
    const Shape& f = (*fo)[0];
    const Shape& bs = (*bo)[0];
    if (seq_ != (f.size() == 2) || f.size() != bs.size()) {
      return LayerError(*this, "return_sequences does not match its layers' outputs " +
                                   ShapeString(f) + " and " + ShapeString(bs));
    }
    std::vector<Shape> out;
    if (merge_ == BidirectionalMerge::kNone) {
      out.push_back(f);
      out.push_back(bs);
    } else if (merge_ == BidirectionalMerge::kConcat) {
      Shape m = f;
      m.back() = f.back() < 0 || bs.back() < 0 ? -1 : f.back() + bs.back();
      out.push_back(m);
    } else {
      if (f.back() != bs.back()) {
        return LayerError(*this, "cannot merge outputs of " + ShapeString(f) + " and " +
                                     ShapeString(bs) + " other than by concatenation");
      }
      out.push_back(f);
    }
    for (size_t k = 1; k < outs_; ++k) out.push_back((*fo)[k]);
    for (size_t k = 1; k < outs_; ++k) out.push_back((*bo)[k]);
    if (!built_) {
      Adopt({inner_[0]->name() + "/", inner_[1]->name() + "/"});
      built_ = true;
    }
    return out;
  }

  void Forward(const Args& in, std::vector<Tensor>* out, Saved* s,
               const CallContext& ctx) override {
    std::vector<Saved> recs = Unstash(s, 3);
    std::vector<Tensor>& keep = recs[2].t;  // the inner outputs: forward's, then backward's
    keep.resize(2 * outs_);
    std::vector<Tensor> fo(outs_), bo(outs_);
    for (size_t k = 0; k < outs_; ++k) {
      std::swap(fo[k], keep[k]);
      std::swap(bo[k], keep[outs_ + k]);
    }
    Args fa = InnerArgs(in, 0), ba = InnerArgs(in, 1);
    {
      Lend lend = LendTo(0);
      inner_[0]->Forward(fa, &fo, &recs[0], ctx);
    }
    {
      Lend lend = LendTo(1);
      inner_[1]->Forward(ba, &bo, &recs[1], ctx);
    }
    Merge(fo[0], bo[0], out);
    const size_t first = merge_ == BidirectionalMerge::kNone ? 2 : 1;
    for (size_t k = 1; k < outs_; ++k) {
      (*out)[first + k - 1] = fo[k];
      (*out)[first + outs_ - 1 + k - 1] = bo[k];
    }
    for (size_t k = 0; k < outs_; ++k) {
      std::swap(fo[k], keep[k]);
      std::swap(bo[k], keep[outs_ + k]);
    }
    Stash(&recs, s);
  }

  void Backward(const Args& in, const std::vector<Tensor>&, const std::vector<const Tensor*>& dout,
                const std::vector<bool>& need, std::vector<Tensor>* din, Saved* s) override {
    std::vector<Saved> recs = Unstash(s, 3);
    std::vector<Tensor>& keep = recs[2].t;
    std::vector<Tensor> fo(outs_), bo(outs_);
    for (size_t k = 0; k < outs_; ++k) {
      std::swap(fo[k], keep[k]);
      std::swap(bo[k], keep[outs_ + k]);
    }
    Tensor dyf, dyb;
    Split(dout, fo[0], bo[0], &dyf, &dyb);
    const size_t first = merge_ == BidirectionalMerge::kNone ? 2 : 1;
    std::vector<const Tensor*> fd{&dyf}, bd{&dyb};
    for (size_t k = 1; k < outs_; ++k) {
      fd.push_back(dout[first + k - 1]);
      bd.push_back(dout[first + outs_ - 1 + k - 1]);
    }
    std::vector<bool> fneed{need[0]}, bneed{need[0]};
    for (size_t k = 0; k < half_; ++k) {
      fneed.push_back(need[1 + k]);
      bneed.push_back(need[1 + half_ + k]);
    }
    std::vector<Tensor> fdin(1 + half_), bdin(1 + half_);
    Args fa = InnerArgs(in, 0), ba = InnerArgs(in, 1);
    {
      Lend lend = LendTo(0);
      inner_[0]->Backward(fa, fo, fd, fneed, &fdin, &recs[0]);
    }
    {
      Lend lend = LendTo(1);
      inner_[1]->Backward(ba, bo, bd, bneed, &bdin, &recs[1]);
    }
    if (need[0]) {
      Tensor& dx = (*din)[0];
      dx = std::move(fdin[0]);
      for (int64_t i = 0; i < dx.size(); ++i) dx[i] += bdin[0][i];
    }
    for (size_t k = 0; k < half_; ++k) {
      if (need[1 + k]) (*din)[1 + k] = std::move(fdin[1 + k]);
      if (need[1 + half_ + k]) (*din)[1 + half_ + k] = std::move(bdin[1 + k]);
    }
    for (size_t k = 0; k < outs_; ++k) {
      std::swap(fo[k], keep[k]);
      std::swap(bo[k], keep[outs_ + k]);
    }
    Stash(&recs, s);
  }

  const Tensor* OutputMask(const Args& in, const Saved&) const override {
    return seq_ ? in.mask0() : nullptr;
  }
  // merge_mode None returns the two directions' sequences; the states after them get none.
  size_t MaskedOutputs() const override { return merge_ == BidirectionalMerge::kNone ? 2 : 1; }

 private:
  Args InnerArgs(const Args& in, size_t dir) const {
    Args a;
    a.x.push_back(in.x[0]);
    a.mask.push_back(in.mask0());
    for (size_t k = 0; k < half_; ++k) {
      a.x.push_back(in.x[1 + dir * half_ + k]);
      a.mask.push_back(nullptr);
    }
    return a;
  }

  // Calls f(forward offset, backward offset, merged offset, forward width, backward width) for
  // each (row, step) of the outputs: the backward output's element that lines up is at the
  // mirrored time step (sequences) and the merged output holds both widths.
  template <typename F>
  void ForEach(const Tensor& yf, const Tensor& yb, F f) const {
    const int64_t b = yf.dim(0);
    const int64_t t = seq_ ? yf.dim(1) : 1;
    const int64_t uf = yf.shape().back(), ub = yb.shape().back();
    for (int64_t r = 0; r < b; ++r) {
      for (int64_t step = 0; step < t; ++step) {
        const int64_t fo = (r * t + step) * uf;
        const int64_t bo = (r * t + (seq_ ? t - 1 - step : 0)) * ub;
        const int64_t mo = (r * t + step) * (uf + ub);
        f(fo, bo, mo, uf, ub);
      }
    }
  }

  void Merge(const Tensor& yf, const Tensor& yb, std::vector<Tensor>* out) const {
    switch (merge_) {
      case BidirectionalMerge::kNone: {
        (*out)[0] = yf;
        Tensor& y = (*out)[1];
        y.Resize(yb.shape());
        ForEach(yf, yb, [&](int64_t fo, int64_t bo, int64_t, int64_t, int64_t ub) {
          std::copy_n(yb.data() + bo, ub, y.data() + fo / yf.shape().back() * ub);
        });
        return;
      }
      case BidirectionalMerge::kConcat: {
        Shape s = yf.shape();
        s.back() += yb.shape().back();
        Tensor& y = (*out)[0];
        y.Resize(s);
        ForEach(yf, yb, [&](int64_t fo, int64_t bo, int64_t mo, int64_t uf, int64_t ub) {
          std::copy_n(yf.data() + fo, uf, y.data() + mo);
          std::copy_n(yb.data() + bo, ub, y.data() + mo + uf);
        });
        return;
      }
      default: {
        Tensor& y = (*out)[0];
        y.Resize(yf.shape());
        ForEach(yf, yb, [&](int64_t fo, int64_t bo, int64_t, int64_t uf, int64_t) {
          for (int64_t j = 0; j < uf; ++j) {
            const float a = yf[fo + j], c = yb[bo + j];
            y[fo + j] = merge_ == BidirectionalMerge::kSum   ? a + c
                        : merge_ == BidirectionalMerge::kMul ? a * c
                                                             : (a + c) * 0.5f;
          }
        });
        return;
      }
    }
  }

  // dL/d(each direction's output) from dL/d(the merged outputs).
  void Split(const std::vector<const Tensor*>& dout, const Tensor& yf, const Tensor& yb,
             Tensor* dyf, Tensor* dyb) const {
    dyf->Resize(yf.shape());
    dyb->Resize(yb.shape());
    const float* g = dout[0]->data();
    switch (merge_) {
      case BidirectionalMerge::kNone: {
        *dyf = *dout[0];
        const float* gb = dout[1]->data();
        ForEach(yf, yb, [&](int64_t fo, int64_t bo, int64_t, int64_t uf, int64_t ub) {
          std::copy_n(gb + fo / uf * ub, ub, dyb->data() + bo);
        });
        return;
      }
      case BidirectionalMerge::kConcat:
        ForEach(yf, yb, [&](int64_t fo, int64_t bo, int64_t mo, int64_t uf, int64_t ub) {
          std::copy_n(g + mo, uf, dyf->data() + fo);
          std::copy_n(g + mo + uf, ub, dyb->data() + bo);
        });
        return;
      default:
        ForEach(yf, yb, [&](int64_t fo, int64_t bo, int64_t, int64_t uf, int64_t) {
          for (int64_t j = 0; j < uf; ++j) {
            const float gj = g[fo + j];
            switch (merge_) {
              case BidirectionalMerge::kSum:
                (*dyf)[fo + j] = gj;
                (*dyb)[bo + j] = gj;
                break;
              case BidirectionalMerge::kMul:
                (*dyf)[fo + j] = gj * yb[bo + j];
                (*dyb)[bo + j] = gj * yf[fo + j];
                break;
              default:
                (*dyf)[fo + j] = 0.5f * gj;
                (*dyb)[bo + j] = 0.5f * gj;
                break;
            }
          }
        });
        return;
    }
  }

  BidirectionalMerge merge_;
  bool seq_, state_;
  size_t half_ = 0, outs_ = 1;
};

class TimeDistributed final : public Wrapper, public HasOptions<TimeDistributedOptions> {
 public:
  TimeDistributedOptions options() const override { return {inner_[0].get()}; }
  std::type_index options_type() const override { return typeid(TimeDistributedOptions); }
  // The wrapped layer's, applied at every step (a per-step classifier's softmax).
  const Activation* output_activation() const override { return inner_[0]->output_activation(); }
  TimeDistributed(std::string name, std::unique_ptr<Layer> inner)
      : Wrapper(std::move(name), "TimeDistributed") {
    inner_.push_back(std::move(inner));
  }

  absl::StatusOr<std::vector<Shape>> Build(const std::vector<Shape>& in,
                                           const BuildContext& ctx) override {
    if (in.size() != 1 || in[0].empty()) {
      return LayerError(*this, "takes one input of rank >= 3 (batch, time, ...)");
    }
    Shape step(in[0].begin() + 1, in[0].end());
    absl::StatusOr<std::vector<Shape>> io = BuildInner(0, {step}, ctx);
    if (!io.ok()) return io.status();
    std::vector<Shape> out;
    for (const Shape& s : *io) out.push_back(Batched(in[0][0], s));
    outs_ = out.size();
    if (!built_) {
      Adopt({""});
      built_ = true;
    }
    return out;
  }

  void Forward(const Args& in, std::vector<Tensor>* out, Saved* s,
               const CallContext& ctx) override {
    const Tensor& x = *in.x[0];
    std::vector<Saved> recs = Unstash(s, 2);
    std::vector<Tensor>& keep = recs[1].t;  // the folded input, then the inner outputs
    keep.resize(1 + outs_);
    Shape fs(x.shape().begin() + 1, x.shape().end());
    fs[0] = x.dim(0) * x.dim(1);
    keep[0].Resize(fs);
    std::copy_n(x.data(), x.size(), keep[0].data());
    std::vector<Tensor> io(outs_);
    for (size_t k = 0; k < outs_; ++k) std::swap(io[k], keep[1 + k]);
    Args ia;
    ia.x.push_back(&keep[0]);
    ia.mask.push_back(nullptr);
    {
      Lend lend = LendTo(0);
      inner_[0]->Forward(ia, &io, &recs[0], ctx);
    }
    for (size_t k = 0; k < outs_; ++k) {
      Shape os = io[k].shape();
      os[0] = x.dim(1);
      os.insert(os.begin(), x.dim(0));
      (*out)[k].Resize(os);
      std::copy_n(io[k].data(), io[k].size(), (*out)[k].data());
      std::swap(io[k], keep[1 + k]);
    }
    Stash(&recs, s);
  }

  void Backward(const Args& in, const std::vector<Tensor>&, const std::vector<const Tensor*>& dout,
                const std::vector<bool>& need, std::vector<Tensor>* din, Saved* s) override {
    const Tensor& x = *in.x[0];
    std::vector<Saved> recs = Unstash(s, 2);
    std::vector<Tensor>& keep = recs[1].t;
    std::vector<Tensor> io(outs_), dio(outs_);
    std::vector<const Tensor*> dptr;
    for (size_t k = 0; k < outs_; ++k) {
      std::swap(io[k], keep[1 + k]);
      dio[k].Resize(io[k].shape());
      std::copy_n(dout[k]->data(), dout[k]->size(), dio[k].data());
      dptr.push_back(&dio[k]);
    }
    Args ia;
    ia.x.push_back(&keep[0]);
    ia.mask.push_back(nullptr);
    std::vector<Tensor> idin(1);
    const bool need_x = need[0] && inner_[0]->Differentiable(0);
    {
      Lend lend = LendTo(0);
      inner_[0]->Backward(ia, io, dptr, {need_x}, &idin, &recs[0]);
    }
    if (need[0]) {
      Tensor& dx = (*din)[0];
      dx.Resize(x.shape());
      if (need_x) std::copy_n(idin[0].data(), dx.size(), dx.data());
    }
    for (size_t k = 0; k < outs_; ++k) std::swap(io[k], keep[1 + k]);
    Stash(&recs, s);
  }

  bool Differentiable(size_t i) const override { return inner_[0]->Differentiable(i); }

 private:
  size_t outs_ = 1;
};

}  // namespace

const char* RnnClassName(RnnCell cell) {
  switch (cell) {
    case RnnCell::kSimpleRnn:
      return "SimpleRNN";
    case RnnCell::kLstm:
      return "LSTM";
    case RnnCell::kGru:
      return "GRU";
  }
  return "RNN";
}

std::unique_ptr<Layer> MakeEmbedding(std::string name, EmbeddingOptions o) {
  return std::make_unique<Embedding>(std::move(name), std::move(o));
}
std::unique_ptr<Layer> MakeRnn(std::string name, RnnCell cell, RnnOptions o) {
  return std::make_unique<Rnn>(std::move(name), cell, std::move(o));
}
std::unique_ptr<Layer> MakeBidirectional(std::string name, std::unique_ptr<Layer> forward,
                                         std::unique_ptr<Layer> backward, BidirectionalMerge merge,
                                         bool return_sequences, bool return_state) {
  return std::make_unique<Bidirectional>(std::move(name), std::move(forward), std::move(backward),
                                         merge, return_sequences, return_state);
}
std::unique_ptr<Layer> MakeTimeDistributed(std::string name, std::unique_ptr<Layer> inner) {
  return std::make_unique<TimeDistributed>(std::move(name), std::move(inner));
}

}  // namespace lockstep::trainer::graph
