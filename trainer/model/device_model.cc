#include "trainer/model/device_model.h"

#include "absl/strings/str_cat.h"
#include "trainer/kernels/cuda/check.h"
#include "trainer/kernels/cuda/elementwise.h"
#include "trainer/kernels/cuda/ops.h"

namespace lockstep::trainer {

using cuda::DeviceTensor;
using cuda::DType;
using cuda::GpuContext;

// One layer on the GPU: forward keeps what backward needs (as the host layers do).
class DeviceLayer {
 public:
  virtual ~DeviceLayer() = default;
  virtual absl::StatusOr<const DeviceTensor*> Forward(const DeviceTensor& x) = 0;
  virtual absl::StatusOr<const DeviceTensor*> Backward(const DeviceTensor& dy, bool need_dx) = 0;
};

namespace {

// Views of a parameter pair (weight, bias) in the flat buffers.
struct ParamViews {
  DeviceTensor w;  // the compute-dtype weight (the master itself for fp32)
  float* b = nullptr;
  float* dw = nullptr;
  float* db = nullptr;
};

class DenseLayer final : public DeviceLayer {
 public:
  DenseLayer(GpuContext* ctx, ParamViews p) : ctx_(ctx), p_(std::move(p)) {}
  absl::StatusOr<const DeviceTensor*> Forward(const DeviceTensor& x) override {
    x_ = &x;
    LOCKSTEP_RETURN_IF_ERROR(cuda::DenseForward(ctx_, x, p_.w, p_.b, &y_));
    return &y_;
  }
  absl::StatusOr<const DeviceTensor*> Backward(const DeviceTensor& dy, bool need_dx) override {
    LOCKSTEP_RETURN_IF_ERROR(
        cuda::DenseBackward(ctx_, *x_, p_.w, dy, need_dx ? &dx_ : nullptr, p_.dw, p_.db));
    return &dx_;
  }

 private:
  GpuContext* ctx_;
  ParamViews p_;
  const DeviceTensor* x_ = nullptr;
  DeviceTensor y_, dx_;
};

class ConvLayer final : public DeviceLayer {
 public:
  ConvLayer(GpuContext* ctx, ParamViews p, int64_t pad)
      : ctx_(ctx), p_(std::move(p)), params_{.pad = pad} {}
  absl::StatusOr<const DeviceTensor*> Forward(const DeviceTensor& x) override {
    x_ = &x;
    LOCKSTEP_RETURN_IF_ERROR(cuda::Conv2dForward(ctx_, x, p_.w, p_.b, params_, &y_, &plan_));
    return &y_;
  }
  absl::StatusOr<const DeviceTensor*> Backward(const DeviceTensor& dy, bool need_dx) override {
    LOCKSTEP_RETURN_IF_ERROR(cuda::Conv2dBackward(ctx_, *x_, p_.w, dy, params_,
                                                  need_dx ? &dx_ : nullptr, p_.dw, p_.db, &plan_));
    return &dx_;
  }

 private:
  GpuContext* ctx_;
  ParamViews p_;
  cpu::Conv2dParams params_;
  cuda::Conv2dWorkspace plan_;
  const DeviceTensor* x_ = nullptr;
  DeviceTensor y_, dx_;
};

class PoolLayer final : public DeviceLayer {
 public:
  PoolLayer(GpuContext* ctx, int64_t size) : ctx_(ctx), size_(size) {}
  absl::StatusOr<const DeviceTensor*> Forward(const DeviceTensor& x) override {
    x_ = &x;
    LOCKSTEP_RETURN_IF_ERROR(cuda::MaxPoolForward(ctx_, x, size_, &y_));
    return &y_;
  }
  absl::StatusOr<const DeviceTensor*> Backward(const DeviceTensor& dy, bool) override {
    LOCKSTEP_RETURN_IF_ERROR(cuda::MaxPoolBackward(ctx_, *x_, y_, dy, size_, &dx_));
    return &dx_;
  }

 private:
  GpuContext* ctx_;
  int64_t size_;
  const DeviceTensor* x_ = nullptr;
  DeviceTensor y_, dx_;
};

class ReluLayer final : public DeviceLayer {
 public:
  explicit ReluLayer(GpuContext* ctx) : ctx_(ctx) {}
  absl::StatusOr<const DeviceTensor*> Forward(const DeviceTensor& x) override {
    x_ = &x;
    LOCKSTEP_RETURN_IF_ERROR(cuda::ReluForward(ctx_, x, &y_));
    return &y_;
  }
  absl::StatusOr<const DeviceTensor*> Backward(const DeviceTensor& dy, bool) override {
    LOCKSTEP_RETURN_IF_ERROR(cuda::ReluBackward(ctx_, *x_, dy, &dx_));
    return &dx_;
  }

 private:
  GpuContext* ctx_;
  const DeviceTensor* x_ = nullptr;
  DeviceTensor y_, dx_;
};

class FlattenLayer final : public DeviceLayer {
 public:
  absl::StatusOr<const DeviceTensor*> Forward(const DeviceTensor& x) override {
    shape_ = x.shape();
    y_ = x.Reshaped({x.dim(0), x.size() / x.dim(0)});
    return &y_;
  }
  absl::StatusOr<const DeviceTensor*> Backward(const DeviceTensor& dy, bool) override {
    dx_ = dy.Reshaped(shape_);
    return &dx_;
  }

 private:
  Shape shape_;
  DeviceTensor y_, dx_;
};

}  // namespace

DeviceModel::~DeviceModel() = default;

absl::StatusOr<std::unique_ptr<DeviceModel>> DeviceModel::Create(GpuContext* ctx,
                                                                 SequentialModel& host,
                                                                 DType compute) {
  std::unique_ptr<DeviceModel> m(new DeviceModel);
  m->ctx_ = ctx;
  std::vector<Tensor*> params = host.Params();
  LOCKSTEP_RETURN_IF_ERROR(m->weights_.Init(ctx, params, {}, compute));
  size_t next = 0;  // the next parameter index
  for (const auto& layer : host.layers()) {
    const std::string kind = layer->name();
    const size_t count = layer->Params().size();
    ParamViews v;
    if (count == 2) {
      v = {.w = m->weights_.compute_view(next, params[next]->shape()),
           .b = m->weights_.master(next + 1),
           .dw = m->weights_.grad(next),
           .db = m->weights_.grad(next + 1)};
    }
    next += count;
    if (kind == "Dense") {
      m->layers_.push_back(std::make_unique<DenseLayer>(ctx, std::move(v)));
    } else if (kind == "Conv2D") {
      m->layers_.push_back(std::make_unique<ConvLayer>(ctx, std::move(v), layer->config().pad));
    } else if (kind == "MaxPool2D") {
      m->layers_.push_back(std::make_unique<PoolLayer>(ctx, layer->config().pool_size));
    } else if (kind == "ReLU") {
      m->layers_.push_back(std::make_unique<ReluLayer>(ctx));
    } else if (kind == "Flatten") {
      m->layers_.push_back(std::make_unique<FlattenLayer>());
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("layer ", kind, " has no GPU implementation (use --device cpu)"));
    }
  }
  return m;
}

absl::StatusOr<const DeviceTensor*> DeviceModel::Forward(const Tensor& x,
                                                         const std::vector<int32_t>& labels) {
  LOCKSTEP_RETURN_IF_ERROR(cuda::Upload(ctx_, x, weights_.compute(), &input_));
  const size_t label_bytes = labels.size() * sizeof(int32_t);
  if (labels_capacity_ < label_bytes || labels_.get() == nullptr) {
    absl::StatusOr<cuda::DeviceBuffer> b =
        cuda::DeviceBuffer::Make(ctx_->allocator(), std::max<size_t>(label_bytes, 4));
    if (!b.ok()) return b.status();
    labels_ = std::move(*b);
    labels_capacity_ = std::max<size_t>(label_bytes, 4);
  }
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudaMemcpyAsync(labels_.get(), labels.data(), label_bytes,
                                               cudaMemcpyHostToDevice, ctx_->stream()));
  const DeviceTensor* h = &input_;
  for (auto& l : layers_) {
    absl::StatusOr<const DeviceTensor*> next = l->Forward(*h);
    if (!next.ok()) return next.status();
    h = *next;
  }
  return h;
}

absl::StatusOr<cpu::XentResult> DeviceModel::TrainStep(const Tensor& x,
                                                       const std::vector<int32_t>& labels,
                                                       float loss_scale) {
  absl::StatusOr<const DeviceTensor*> logits = Forward(x, labels);
  if (!logits.ok()) return logits.status();
  absl::StatusOr<cpu::XentResult> r =
      cuda::SoftmaxCrossEntropy(ctx_, **logits, labels_.as<int32_t>(), &dlogits_, loss_scale);
  if (!r.ok()) return r.status();
  const DeviceTensor* g = &dlogits_;
  for (size_t i = layers_.size(); i-- > 0;) {
    absl::StatusOr<const DeviceTensor*> next = layers_[i]->Backward(*g, i > 0);
    if (!next.ok()) return next.status();
    g = *next;
  }
  return r;
}

absl::StatusOr<cpu::XentResult> DeviceModel::Evaluate(const Tensor& x,
                                                      const std::vector<int32_t>& labels) {
  absl::StatusOr<const DeviceTensor*> logits = Forward(x, labels);
  if (!logits.ok()) return logits.status();
  return cuda::SoftmaxCrossEntropy(ctx_, **logits, labels_.as<int32_t>(), nullptr, 1.0f);
}

}  // namespace lockstep::trainer
