#include "trainer/graph/testing/gradcheck.h"
#include "trainer/tensor/random.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>

namespace lockstep::trainer::graph::testing {
namespace {

double Project(const std::vector<Tensor>& outs, const std::vector<Tensor>& r) {
  double l = 0;
  for (size_t k = 0; k < outs.size(); ++k) {
    for (int64_t i = 0; i < outs[k].size(); ++i) l += static_cast<double>(outs[k][i]) * r[k][i];
  }
  return l;
}

std::vector<int64_t> Sample(int64_t size, int samples, std::mt19937_64& g) {
  std::vector<int64_t> out;
  if (size <= samples) {
    for (int64_t i = 0; i < size; ++i) out.push_back(i);
    return out;
  }
  std::uniform_int_distribution<int64_t> d(0, size - 1);
  for (int i = 0; i < samples; ++i) out.push_back(d(g));
  return out;
}

// Compares the backward pass's `analytic` derivative with central differences `fd(h)`. A
// disagreement at the step `eps` is confirmed at eps/2, eps/4, ... eps/32 before it counts: a
// strongly curved loss (a trained network's normalisation and attention) leaves O(h^2) error
// in fd(eps), which the Richardson extrapolation (4 fd(h/2) - fd(h)) / 3 cancels, and a kink
// (a ReLU or a max within h of the point) spoils every step wider than its distance, which
// the smaller steps avoid. Only a derivative that is wrong at every step is reported.
template <typename Fd>
void Compare(const std::string& what, int64_t index, double analytic, Fd fd,
             const GradCheckOptions& o, std::ostringstream* report) {
  auto agrees = [&](double numeric) {
    return std::abs(analytic - numeric) <= o.tolerance * std::max(1.0, std::abs(numeric));
  };
  std::vector<double> steps{fd(o.eps)};
  if (agrees(steps[0])) return;
  for (float h = o.eps / 2; steps.size() < 6; h /= 2) {
    steps.push_back(fd(h));
    const double extrapolated = (4 * steps.back() - steps[steps.size() - 2]) / 3;
    if (agrees(steps.back()) || agrees(extrapolated)) return;
  }
  *report << what << "[" << index << "]: backward " << analytic << ", finite differences";
  for (double v : steps) *report << " " << v;
  *report << " (steps " << o.eps << " to " << o.eps / 32 << ")\n";
}

}  // namespace

Tensor RandomTensor(const Shape& shape, uint64_t seed, float lo, float hi) {
  std::mt19937_64 g(seed);
  UniformDraw<float> d(lo, hi);
  Tensor t(shape);
  for (float& v : t.values()) v = d(g);
  return t;
}

std::string CheckLayerGradients(Layer& layer, const std::vector<Tensor>& inputs,
                                const GradCheckOptions& o) {
  std::mt19937_64 init(o.seed);
  std::vector<Shape> shapes;
  for (const Tensor& t : inputs) shapes.emplace_back(t.shape().begin() + 1, t.shape().end());
  absl::StatusOr<std::vector<Shape>> built = layer.Build(shapes, BuildContext{&init});
  if (!built.ok()) return "build: " + built.status().ToString();
  const size_t outputs = built->size();
  std::vector<Tensor> x = inputs;
  Args args;
  auto refresh = [&] {
    args.x.clear();
    args.mask.clear();
    for (size_t i = 0; i < x.size(); ++i) {
      args.x.push_back(&x[i]);
      args.mask.push_back(i < o.masks.size() ? o.masks[i] : nullptr);
    }
  };
  refresh();
  auto forward = [&](std::vector<Tensor>* out, Saved* s) {
    out->resize(outputs);
    std::mt19937_64 rng(o.seed + 1);
    CallContext ctx{o.training, &rng};
    layer.Forward(args, out, s, ctx);
  };
  std::vector<Tensor> out;
  Saved saved;
  forward(&out, &saved);
  std::vector<Tensor> r;
  for (size_t k = 0; k < out.size(); ++k)
    r.push_back(RandomTensor(out[k].shape(), o.seed + 10 + k));
  std::vector<const Tensor*> dout;
  for (const Tensor& t : r) dout.push_back(&t);
  for (Weight& w : layer.weights()) {
    if (w.trainable) w.grad.Fill(0.0f);
  }
  std::vector<bool> need;
  for (size_t i = 0; i < x.size(); ++i) need.push_back(layer.Differentiable(i));
  std::vector<Tensor> din(x.size());
  layer.Backward(args, out, dout, need, &din, &saved);
  std::vector<Tensor> wgrad;
  for (Weight& w : layer.weights()) wgrad.push_back(w.grad);

  std::ostringstream report;
  std::mt19937_64 pick(o.seed + 99);
  auto numeric = [&](float* p) {
    return [&, p](float h) {
      const float keep = *p;
      *p = keep + h;
      std::vector<Tensor> up;
      Saved s1;
      forward(&up, &s1);
      *p = keep - h;
      std::vector<Tensor> down;
      Saved s2;
      forward(&down, &s2);
      *p = keep;
      return (Project(up, r) - Project(down, r)) / (2.0 * h);
    };
  };
  for (size_t i = 0; i < x.size(); ++i) {
    if (!need[i]) continue;
    if (din[i].size() != x[i].size()) {
      report << "input " << i << ": gradient has " << din[i].size() << " values, input "
             << x[i].size() << "\n";
      continue;
    }
    for (int64_t j : Sample(x[i].size(), o.samples, pick)) {
      Compare("input " + std::to_string(i), j, din[i][j], numeric(&x[i][j]), o, &report);
    }
  }
  for (size_t wi = 0; wi < layer.weights().size(); ++wi) {
    Weight& w = layer.weights()[wi];
    if (!w.trainable) continue;
    for (int64_t j : Sample(w.value.size(), o.samples, pick)) {
      Compare("weight " + w.name, j, wgrad[wi][j], numeric(&w.value[j]), o, &report);
    }
  }
  return report.str();
}

std::string CheckGraphGradients(Graph& g, const std::vector<Tensor>& inputs,
                                const GradCheckOptions& o) {
  std::vector<const Tensor*> in;
  for (const Tensor& t : inputs) in.push_back(&t);
  auto forward = [&] {
    std::mt19937_64 rng(o.seed + 1);
    g.Forward(in, CallContext{o.training, &rng});
    std::vector<Tensor> outs;
    for (size_t k = 0; k < g.outputs().size(); ++k) outs.push_back(g.output(k));
    return outs;
  };
  std::vector<Tensor> out = forward();
  std::vector<Tensor> r;
  for (size_t k = 0; k < out.size(); ++k)
    r.push_back(RandomTensor(out[k].shape(), o.seed + 10 + k));
  std::vector<const Tensor*> dout;
  for (const Tensor& t : r) dout.push_back(&t);
  g.Backward(dout);
  std::vector<Tensor> grads;
  for (Tensor* t : g.Grads()) grads.push_back(*t);
  std::vector<Tensor*> params = g.Params();
  std::ostringstream report;
  std::mt19937_64 pick(o.seed + 99);
  const size_t stride =
      o.max_tensors > 0 ? std::max<size_t>(1, params.size() / static_cast<size_t>(o.max_tensors))
                        : 1;
  for (size_t p = 0; p < params.size(); p += stride) {
    for (int64_t j : Sample(params[p]->size(), o.samples, pick)) {
      float* v = &(*params[p])[j];
      auto fd = [&](float h) {
        const float keep = *v;
        *v = keep + h;
        const double up = Project(forward(), r) + g.RegularizationLoss();
        *v = keep - h;
        const double down = Project(forward(), r) + g.RegularizationLoss();
        *v = keep;
        return (up - down) / (2.0 * h);
      };
      Compare("param " + std::to_string(p), j, grads[p][j], fd, o, &report);
    }
  }
  forward();
  return report.str();
}

}  // namespace lockstep::trainer::graph::testing
