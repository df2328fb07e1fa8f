// Bidirectional and TimeDistributed on the CPU (layers/rnn/rnn.h): wrappers whose weights are
// their inner layers'.
#include <algorithm>
#include <utility>

#include "trainer/layers/rnn/rnn.h"

namespace lockstep::trainer::graph {
namespace {

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
