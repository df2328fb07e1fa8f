#include "trainer/layers/merging/merging.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "trainer/kernels/cpu/column_sums.h"
#include "trainer/kernels/cpu/gemm.h"
#include "trainer/kernels/cpu/threads.h"
#include "trainer/tensor/random.h"

namespace lockstep::trainer::graph {
namespace {

// Broadcasting index map from an output element to an input element (size-1 axes repeat).
class Broadcast {
 public:
  Broadcast(const Shape& out, const Shape& in) : out_(out), in_(in) {}
  bool identity() const { return out_ == in_; }
  template <typename F>
  void ForEach(F f) const {  // f(out_index, in_index)
    const size_t r = out_.size();
    std::vector<int64_t> idx(r, 0), stride(r, 1);
    for (size_t a = r; a-- > 1;) stride[a - 1] = stride[a] * in_[a];
    const int64_t n = NumElements(out_);
    int64_t j = 0;
    for (int64_t i = 0; i < n; ++i) {
      f(i, j);
      for (size_t a = r; a-- > 0;) {
        if (in_[a] != 1) j += stride[a];
        if (++idx[a] < out_[a]) break;
        if (in_[a] != 1) j -= stride[a] * out_[a];
        idx[a] = 0;
      }
    }
  }

 private:
  Shape out_, in_;
};

// The element of a broadcast input that output element `i` reads.
int64_t BroadcastIndex(const Shape& out, const Shape& in, int64_t i) {
  int64_t j = 0, mul = 1;
  for (size_t a = out.size(); a-- > 0;) {
    const int64_t c = i % out[a];
    i /= out[a];
    if (in[a] != 1) j += c * mul;
    mul *= in[a];
  }
  return j;
}

// The rows of a merge whose inputs are the output's shape or one broadcast pattern of it: the
// output as [outer, mid, inner] (products of consecutive axes) where a broadcast input is
// [outer, 1, inner] (squeeze-and-excitation's [n, 1, 1, c] against [n, h, w, c], a bias-like
// [1, 1, c]). Row r of the output ([inner] floats) reads row r of a full input and row
// r / mid of a broadcast one, so every loop runs over contiguous rows.
struct MergeRows {
  int64_t rows = 1, mid = 1, inner = 1;
  std::vector<bool> full;  // per input: the output's shape (else [outer, 1, inner])

  static std::optional<MergeRows> Of(const Shape& out, const std::vector<const Tensor*>& x) {
    MergeRows m;
    const Shape* pattern = nullptr;
    for (const Tensor* t : x) {
      m.full.push_back(t->shape() == out);
      if (m.full.back()) continue;
      if (pattern != nullptr && t->shape() != *pattern) return std::nullopt;
      pattern = &t->shape();
    }
    const int64_t total = NumElements(out);
    if (pattern == nullptr) {  // all full: a row per example (rows to split over threads)
      m.rows = out.empty() || out[0] <= 0 ? 1 : out[0];
      m.inner = total / m.rows;
      return m;
    }
    // Axes [0, a) equal, [a, b) size 1 in the pattern, [b, rank) equal.
    const Shape& s = *pattern;
    const size_t r = out.size();
    size_t a = 0;
    while (a < r && s[a] == out[a] && s[a] != 1) ++a;
    size_t b = a;
    while (b < r && s[b] == 1) ++b;
    for (size_t i = b; i < r; ++i) {
      if (s[i] != out[i]) return std::nullopt;
    }
    for (size_t i = a; i < b; ++i) m.mid *= out[i];
    for (size_t i = b; i < r; ++i) m.inner *= out[i];
    if (m.inner == 0 || m.mid == 0) return std::nullopt;
    m.rows = total / m.inner;
    return m;
  }
  const float* Row(const Tensor& t, size_t k, int64_t r) const {
    return t.data() + (full[k] ? r : r / mid) * inner;
  }
  // Runs f(first_row, end_row) over the rows split over the kernels' threads in whole groups
  // of `mid` (the rows that share one row of a broadcast input), so no two threads write one
  // row of an input's gradient; `cost` is element operations per output element.
  template <typename F>
  void Split(int64_t cost, F f) const {
    cpu::ParallelFor(rows / mid, mid * inner * cost,
                     [&](int64_t o0, int64_t o1) { f(o0 * mid, o1 * mid); });
  }
};

class Merge final : public Layer, public HasOptions<MergeOp> {
 public:
  MergeOp options() const override { return op_; }
  std::type_index options_type() const override { return typeid(MergeOp); }
  Merge(std::string name, std::string cls, MergeOp op)
      : Layer(std::move(name), std::move(cls)), op_(op) {}
  absl::StatusOr<std::vector<Shape>> Build(const std::vector<Shape>& in,
                                           const BuildContext&) override {
    if (in.size() < 2) return LayerError(*this, "takes at least two inputs");
    if (op_ == MergeOp::kSubtract && in.size() != 2) {
      return LayerError(*this, "takes exactly two inputs");
    }
    Shape out = in[0];
    for (const Shape& s : in) {
      if (s.size() != out.size()) {
        return LayerError(
            *this, "inputs of different ranks: " + ShapeString(in[0]) + " and " + ShapeString(s));
      }
      for (size_t a = 0; a < s.size(); ++a) {
        if (s[a] == out[a] || s[a] == 1) continue;
        if (out[a] == 1) {
          out[a] = s[a];
        } else {
          return LayerError(*this, "inputs of incompatible shapes: " + ShapeString(in[0]) +
                                       " and " + ShapeString(s));
        }
      }
    }
    built_ = true;
    return std::vector<Shape>{out};
  }
  void Forward(const Args& in, std::vector<Tensor>* out, Saved*, const CallContext&) override {
    Shape os = in.x[0]->shape();
    for (const Tensor* t : in.x) {
      for (size_t a = 0; a < os.size(); ++a) os[a] = std::max(os[a], t->dim(a));
    }
    Tensor& y = (*out)[0];
    y.Resize(os);
    const size_t n = in.x.size();
    if (op_ != MergeOp::kMaximum && op_ != MergeOp::kMinimum) {
      if (std::optional<MergeRows> m = MergeRows::Of(os, in.x)) {
        ForwardRows(*m, in.x, &y);
        return;
      }
    }
    for (size_t k = 0; k < n; ++k) {
      const Tensor& x = *in.x[k];
      Broadcast(os, x.shape()).ForEach([&](int64_t i, int64_t j) {
        const float v = x[j];
        if (k == 0) {
          y[i] = v;
          return;
        }
        switch (op_) {
          case MergeOp::kAdd:
          case MergeOp::kAverage:
            y[i] += v;
            break;
          case MergeOp::kSubtract:
            y[i] -= v;
            break;
          case MergeOp::kMultiply:
            y[i] *= v;
            break;
          case MergeOp::kMaximum:
            y[i] = std::max(y[i], v);
            break;
          case MergeOp::kMinimum:
            y[i] = std::min(y[i], v);
            break;
        }
      });
    }
    if (op_ == MergeOp::kAverage) {
      for (float& v : y.values()) v /= static_cast<float>(n);
    }
  }
  void Backward(const Args& in, const std::vector<Tensor>& out,
                const std::vector<const Tensor*>& dout, const std::vector<bool>& need,
                std::vector<Tensor>* din, Saved*) override {
    const Tensor& y = out[0];
    const Tensor& dy = *dout[0];
    const size_t n = in.x.size();
    if (op_ != MergeOp::kMaximum && op_ != MergeOp::kMinimum) {
      if (std::optional<MergeRows> m = MergeRows::Of(y.shape(), in.x)) {
        BackwardRows(*m, in.x, dy, need, din);
        return;
      }
    }
    for (size_t k = 0; k < n; ++k) {
      if (!need[k]) continue;
      const Tensor& x = *in.x[k];
      Tensor& dx = (*din)[k];
      dx.Resize(x.shape());
      dx.Fill(0.0f);
      Broadcast(y.shape(), x.shape()).ForEach([&](int64_t i, int64_t j) {
        float g = 0;
        switch (op_) {
          case MergeOp::kAdd:
            g = dy[i];
            break;
          case MergeOp::kAverage:
            g = dy[i] / static_cast<float>(n);
            break;
          case MergeOp::kSubtract:
            g = k == 0 ? dy[i] : -dy[i];
            break;
          case MergeOp::kMultiply: {
            // The product of the others, recomputed (inputs may contain zeros).
            float p = 1;
            for (size_t o = 0; o < n; ++o) {
              if (o != k) p *= (*in.x[o])[BroadcastIndex(y.shape(), in.x[o]->shape(), i)];
            }
            g = dy[i] * p;
            break;
          }
          case MergeOp::kMaximum:
          case MergeOp::kMinimum:
            // The gradient goes to the first input holding the extreme value.
            g = 0;
            if (x[j] == y[i]) {
              bool earlier = false;
              for (size_t o = 0; o < k && !earlier; ++o) {
                earlier = (*in.x[o])[BroadcastIndex(y.shape(), in.x[o]->shape(), i)] == y[i];
              }
              if (!earlier) g = dy[i];
            }
            break;
        }
        dx[j] += g;
      });
    }
  }

 private:
  // Forward and Backward over MergeRows, in the generic loops' order of operations (so the
  // results are the same to the bit): y = x0, then y op= xk for each further input.
  void ForwardRows(const MergeRows& m, const std::vector<const Tensor*>& x, Tensor* y) const {
    const size_t n = x.size();
    const int64_t c = m.inner;
    const auto nf = static_cast<float>(n);
    m.Split(static_cast<int64_t>(n), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        float* __restrict yr = y->data() + r * c;
        const float* __restrict x0 = m.Row(*x[0], 0, r);
        for (int64_t j = 0; j < c; ++j) yr[j] = x0[j];
        for (size_t k = 1; k < n; ++k) {
          const float* __restrict xr = m.Row(*x[k], k, r);
          if (op_ == MergeOp::kSubtract) {
            for (int64_t j = 0; j < c; ++j) yr[j] -= xr[j];
          } else if (op_ == MergeOp::kMultiply) {
            for (int64_t j = 0; j < c; ++j) yr[j] *= xr[j];
          } else {
            for (int64_t j = 0; j < c; ++j) yr[j] += xr[j];
          }
        }
        if (op_ == MergeOp::kAverage) {
          for (int64_t j = 0; j < c; ++j) yr[j] /= nf;
        }
      }
    });
  }

  void BackwardRows(const MergeRows& m, const std::vector<const Tensor*>& x, const Tensor& dy,
                    const std::vector<bool>& need, std::vector<Tensor>* din) const {
    const size_t n = x.size();
    const int64_t c = m.inner;
    const auto nf = static_cast<float>(n);
    for (size_t k = 0; k < n; ++k) {
      if (need[k]) (*din)[k].Resize(x[k]->shape());
    }
    m.Split(static_cast<int64_t>(n), [&](int64_t r0, int64_t r1) {
      std::vector<float> prod(op_ == MergeOp::kMultiply ? static_cast<size_t>(c) : 0);
      for (size_t k = 0; k < n; ++k) {
        if (!need[k]) continue;
        Tensor& dx = (*din)[k];
        // This range's rows of dx: its own, or the broadcast rows its groups share.
        const int64_t d0 = m.full[k] ? r0 : r0 / m.mid, d1 = m.full[k] ? r1 : r1 / m.mid;
        std::fill(dx.data() + d0 * c, dx.data() + d1 * c, 0.0f);
        for (int64_t r = r0; r < r1; ++r) {
          const float* __restrict g = dy.data() + r * c;
          float* __restrict d = dx.data() + (m.full[k] ? r : r / m.mid) * c;
          switch (op_) {
            case MergeOp::kAdd:
              for (int64_t j = 0; j < c; ++j) d[j] += g[j];
              break;
            case MergeOp::kAverage:
              for (int64_t j = 0; j < c; ++j) d[j] += g[j] / nf;
              break;
            case MergeOp::kSubtract:
              if (k == 0) {
                for (int64_t j = 0; j < c; ++j) d[j] += g[j];
              } else {
                for (int64_t j = 0; j < c; ++j) d[j] += -g[j];
              }
              break;
            case MergeOp::kMultiply: {
              // The product of the others, recomputed (inputs may contain zeros).
              float* __restrict p = prod.data();
              std::fill_n(p, c, 1.0f);
              for (size_t o = 0; o < n; ++o) {
                if (o == k) continue;
                const float* __restrict xo = m.Row(*x[o], o, r);
                for (int64_t j = 0; j < c; ++j) p[j] *= xo[j];
              }
              for (int64_t j = 0; j < c; ++j) d[j] += g[j] * p[j];
              break;
            }
            default:
              break;
          }
        }
      }
    });
  }

  MergeOp op_;
};

class Concatenate final : public Layer, public HasOptions<ConcatOptions> {
 public:
  ConcatOptions options() const override { return {axis_}; }
  std::type_index options_type() const override { return typeid(ConcatOptions); }
  Concatenate(std::string name, int64_t axis)
      : Layer(std::move(name), "Concatenate"), axis_(axis) {}
  absl::StatusOr<std::vector<Shape>> Build(const std::vector<Shape>& in,
                                           const BuildContext&) override {
    if (in.size() < 2) return LayerError(*this, "takes at least two inputs");
    const auto rank = static_cast<int64_t>(in[0].size()) + 1;  // with the batch axis
    a_ = axis_ < 0 ? axis_ + rank : axis_;
    if (a_ < 1 || a_ >= rank) {
      return LayerError(*this, "axis " + std::to_string(axis_) + " is out of range for inputs " +
                                   ShapeString(in[0]));
    }
    Shape out = in[0];
    const auto ax = static_cast<size_t>(a_ - 1);
    out[ax] = 0;
    for (const Shape& s : in) {
      if (s.size() != in[0].size()) return LayerError(*this, "inputs of different ranks");
      for (size_t a = 0; a < s.size(); ++a) {
        if (a != ax && s[a] != in[0][a]) {
          return LayerError(*this, "inputs " + ShapeString(in[0]) + " and " + ShapeString(s) +
                                       " differ outside the concatenation axis");
        }
      }
      out[ax] = (out[ax] < 0 || s[ax] < 0) ? -1 : out[ax] + s[ax];
    }
    built_ = true;
    return std::vector<Shape>{out};
  }
  void Forward(const Args& in, std::vector<Tensor>* out, Saved*, const CallContext&) override {
    const Shape& s0 = in.x[0]->shape();
    int64_t outer = 1, inner = 1;
    for (int64_t a = 0; a < a_; ++a) outer *= s0[static_cast<size_t>(a)];
    for (size_t a = static_cast<size_t>(a_) + 1; a < s0.size(); ++a) inner *= s0[a];
    Shape os = s0;
    os[static_cast<size_t>(a_)] = 0;
    for (const Tensor* t : in.x) os[static_cast<size_t>(a_)] += t->dim(static_cast<size_t>(a_));
    Tensor& y = (*out)[0];
    y.Resize(os);
    const int64_t row = os[static_cast<size_t>(a_)] * inner;
    int64_t offset = 0;
    for (const Tensor* t : in.x) {
      const int64_t w = t->dim(static_cast<size_t>(a_)) * inner;
      for (int64_t o = 0; o < outer; ++o)
        std::copy_n(t->data() + o * w, w, y.data() + o * row + offset);
      offset += w;
    }
  }
  void Backward(const Args& in, const std::vector<Tensor>&, const std::vector<const Tensor*>& dout,
                const std::vector<bool>& need, std::vector<Tensor>* din, Saved*) override {
    const Tensor& dy = *dout[0];
    int64_t outer = 1, inner = 1;
    for (int64_t a = 0; a < a_; ++a) outer *= dy.dim(static_cast<size_t>(a));
    for (size_t a = static_cast<size_t>(a_) + 1; a < dy.rank(); ++a) inner *= dy.dim(a);
    const int64_t row = dy.dim(static_cast<size_t>(a_)) * inner;
    int64_t offset = 0;
    for (size_t k = 0; k < in.x.size(); ++k) {
      const Tensor& x = *in.x[k];
      const int64_t w = x.dim(static_cast<size_t>(a_)) * inner;
      if (need[k]) {
        Tensor& dx = (*din)[k];
        dx.Resize(x.shape());
        for (int64_t o = 0; o < outer; ++o)
          std::copy_n(dy.data() + o * row + offset, w, dx.data() + o * w);
      }
      offset += w;
    }
  }

 private:
  int64_t axis_, a_ = 0;
};

}  // namespace

std::unique_ptr<Layer> MakeMerge(std::string name, std::string class_name, MergeOp op) {
  return std::make_unique<Merge>(std::move(name), std::move(class_name), op);
}

std::unique_ptr<Layer> MakeConcatenate(std::string name, int64_t axis) {
  return std::make_unique<Concatenate>(std::move(name), axis);
}

}  // namespace lockstep::trainer::graph
