#include "trainer/model/layer.h"

#include <cmath>

#include "trainer/kernels/cpu/dense.h"
#include "trainer/kernels/cpu/max_pool.h"
#include "trainer/kernels/cpu/relu.h"
#include "trainer/tensor/random.h"

namespace lockstep::trainer {
namespace {

void Uniform(Tensor* t, float limit, std::mt19937* rng) {
  UniformDraw<float> u(-limit, limit);
  for (int64_t i = 0; i < t->size(); ++i) (*t)[i] = u(*rng);
}

class Dense final : public Layer {
 public:
  Dense(int64_t in, int64_t out, std::mt19937* rng) : w_({out, in}), b_({out}) {
    Uniform(&w_, std::sqrt(6.0f / static_cast<float>(in + out)), rng);
  }
  std::string name() const override { return "Dense"; }
  const Tensor& Forward(const Tensor& x, bool) override {
    x_ = &x;
    cpu::DenseForward(x, w_, b_, &y_);
    return y_;
  }
  const Tensor& Backward(const Tensor& dy, bool need_input_grad) override {
    cpu::DenseBackward(*x_, w_, dy, need_input_grad ? &dx_ : nullptr, &dw_, &db_);
    return dx_;
  }
  std::vector<Tensor*> Params() override { return {&w_, &b_}; }
  std::vector<Tensor*> Grads() override {
    dw_.Resize(w_.shape());
    db_.Resize(b_.shape());
    return {&dw_, &db_};
  }
  Shape OutputShape(const Shape& in) const override { return {in[0], w_.dim(0)}; }

 private:
  Tensor w_, b_, y_, dx_, dw_, db_;
  const Tensor* x_ = nullptr;
};

class Conv2D final : public Layer {
 public:
  Conv2D(int64_t c, int64_t k, int64_t r, int64_t pad, std::mt19937* rng)
      : w_({k, c, r, r}), b_({k}), p_{.pad = pad} {
    Uniform(&w_, std::sqrt(6.0f / static_cast<float>(c * r * r)), rng);
  }
  std::string name() const override { return "Conv2D"; }
  const Tensor& Forward(const Tensor& x, bool) override {
    x_ = &x;
    cpu::Conv2dForward(x, w_, b_, p_, &y_, &ws_);
    return y_;
  }
  const Tensor& Backward(const Tensor& dy, bool need_input_grad) override {
    cpu::Conv2dBackward(*x_, w_, dy, p_, need_input_grad ? &dx_ : nullptr, &dw_, &db_, &ws_);
    return dx_;
  }
  std::vector<Tensor*> Params() override { return {&w_, &b_}; }
  std::vector<Tensor*> Grads() override {
    dw_.Resize(w_.shape());
    db_.Resize(b_.shape());
    return {&dw_, &db_};
  }
  Shape OutputShape(const Shape& in) const override {
    return cpu::Conv2dOutputShape(in, w_.shape(), p_);
  }
  Config config() const override { return {.pad = p_.pad}; }

 private:
  Tensor w_, b_, y_, dx_, dw_, db_;
  cpu::Conv2dParams p_;
  cpu::Conv2dWorkspace ws_;
  const Tensor* x_ = nullptr;
};

class MaxPool2D final : public Layer {
 public:
  explicit MaxPool2D(int64_t size) : size_(size) {}
  std::string name() const override { return "MaxPool2D"; }
  const Tensor& Forward(const Tensor& x, bool) override {
    x_shape_ = x.shape();
    cpu::MaxPoolForward(x, size_, &y_, &argmax_);
    return y_;
  }
  const Tensor& Backward(const Tensor& dy, bool) override {
    cpu::MaxPoolBackward(dy, argmax_, x_shape_, &dx_);
    return dx_;
  }
  Shape OutputShape(const Shape& in) const override {
    return {in[0], in[1], in[2] / size_, in[3] / size_};
  }
  Config config() const override { return {.pool_size = size_}; }

 private:
  int64_t size_;
  Shape x_shape_;
  Tensor y_, dx_;
  std::vector<int32_t> argmax_;
};

class ReLU final : public Layer {
 public:
  std::string name() const override { return "ReLU"; }
  const Tensor& Forward(const Tensor& x, bool) override {
    x_ = &x;
    cpu::ReluForward(x, &y_);
    return y_;
  }
  const Tensor& Backward(const Tensor& dy, bool) override {
    cpu::ReluBackward(*x_, dy, &dx_);
    return dx_;
  }
  Shape OutputShape(const Shape& in) const override { return in; }

 private:
  Tensor y_, dx_;
  const Tensor* x_ = nullptr;
};

class Flatten final : public Layer {
 public:
  std::string name() const override { return "Flatten"; }
  const Tensor& Forward(const Tensor& x, bool) override {
    shape_ = x.shape();
    y_ = x.Reshaped({x.dim(0), x.size() / x.dim(0)});
    return y_;
  }
  const Tensor& Backward(const Tensor& dy, bool) override {
    dx_ = dy.Reshaped(shape_);
    return dx_;
  }
  Shape OutputShape(const Shape& in) const override { return {in[0], NumElements(in) / in[0]}; }

 private:
  Shape shape_;
  Tensor y_, dx_;
};

class Dropout final : public Layer {
 public:
  Dropout(float rate, uint64_t seed) : rate_(rate), rng_(seed) {}
  std::string name() const override { return "Dropout"; }
  const Tensor& Forward(const Tensor& x, bool training) override {
    training_ = training && rate_ > 0.0f;
    if (!training_) {
      y_ = x;
      return y_;
    }
    y_.Resize(x.shape());
    mask_.resize(static_cast<size_t>(x.size()));
    std::bernoulli_distribution keep(1.0 - rate_);
    const float scale = 1.0f / (1.0f - rate_);
    for (int64_t i = 0; i < x.size(); ++i) {
      mask_[static_cast<size_t>(i)] = keep(rng_) ? scale : 0.0f;
      y_[i] = x[i] * mask_[static_cast<size_t>(i)];
    }
    return y_;
  }
  const Tensor& Backward(const Tensor& dy, bool) override {
    if (!training_) {
      dx_ = dy;
      return dx_;
    }
    dx_.Resize(dy.shape());
    for (int64_t i = 0; i < dy.size(); ++i) dx_[i] = dy[i] * mask_[static_cast<size_t>(i)];
    return dx_;
  }
  Shape OutputShape(const Shape& in) const override { return in; }

 private:
  float rate_;
  std::mt19937_64 rng_;
  bool training_ = false;
  std::vector<float> mask_;
  Tensor y_, dx_;
};

}  // namespace

std::unique_ptr<Layer> MakeDense(int64_t in, int64_t out, std::mt19937* rng) {
  return std::make_unique<Dense>(in, out, rng);
}
std::unique_ptr<Layer> MakeConv2D(int64_t c, int64_t k, int64_t r, int64_t pad, std::mt19937* rng) {
  return std::make_unique<Conv2D>(c, k, r, pad, rng);
}
std::unique_ptr<Layer> MakeMaxPool2D(int64_t size) { return std::make_unique<MaxPool2D>(size); }
std::unique_ptr<Layer> MakeReLU() { return std::make_unique<ReLU>(); }
std::unique_ptr<Layer> MakeFlatten() { return std::make_unique<Flatten>(); }
std::unique_ptr<Layer> MakeDropout(float rate, uint64_t seed) {
  return std::make_unique<Dropout>(rate, seed);
}

}  // namespace lockstep::trainer
