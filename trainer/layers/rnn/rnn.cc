// SimpleRNN, LSTM and GRU on the CPU (layers/rnn/rnn.h).
#include <algorithm>
#include <cmath>
#include <utility>

#include "trainer/kernels/cpu/column_sums.h"
#include "trainer/kernels/cpu/gemm.h"
#include "trainer/layers/rnn/block_activation.h"
#include "trainer/layers/rnn/rnn.h"

namespace lockstep::trainer::graph {
namespace {

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

std::unique_ptr<Layer> MakeRnn(std::string name, RnnCell cell, RnnOptions o) {
  return std::make_unique<Rnn>(std::move(name), cell, std::move(o));
}

}  // namespace lockstep::trainer::graph
