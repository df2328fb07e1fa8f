#include "trainer/layers/preprocessing/preprocessing.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "trainer/kernels/cpu/column_sums.h"
#include "trainer/kernels/cpu/gemm.h"
#include "trainer/tensor/random.h"

namespace lockstep::trainer::graph {
namespace {

class Rescaling final : public Layer, public HasOptions<RescalingOptions> {
 public:
  RescalingOptions options() const override { return {scale_, offset_}; }
  std::type_index options_type() const override { return typeid(RescalingOptions); }
  Rescaling(std::string name, std::vector<float> scale, std::vector<float> offset)
      : Layer(std::move(name), "Rescaling"), scale_(std::move(scale)), offset_(std::move(offset)) {}
  absl::StatusOr<std::vector<Shape>> Build(const std::vector<Shape>& in,
                                           const BuildContext&) override {
    if (in.size() != 1) return LayerError(*this, "takes one input");
    const int64_t c = in[0].empty() ? 1 : in[0].back();
    for (const auto* v : {&scale_, &offset_}) {
      if (v->size() != 1 && static_cast<int64_t>(v->size()) != c) {
        return LayerError(*this, std::to_string(v->size()) + " scales or offsets for " +
                                     std::to_string(c) + " channels");
      }
    }
    built_ = true;
    return in;
  }
  void Forward(const Args& in, std::vector<Tensor>* out, Saved*, const CallContext&) override {
    const Tensor& x = *in.x[0];
    Tensor& y = (*out)[0];
    y.Resize(x.shape());
    const int64_t c = x.shape().back();
    for (int64_t i = 0; i < x.size(); ++i) y[i] = x[i] * Scale(i % c) + Offset(i % c);
  }
  void Backward(const Args& in, const std::vector<Tensor>&, const std::vector<const Tensor*>& dout,
                const std::vector<bool>& need, std::vector<Tensor>* din, Saved*) override {
    if (!need[0]) return;
    Tensor& dx = (*din)[0];
    dx.Resize(in.x[0]->shape());
    const int64_t c = dx.shape().back();
    for (int64_t i = 0; i < dx.size(); ++i) dx[i] = (*dout[0])[i] * Scale(i % c);
  }

 private:
  float Scale(int64_t ch) const {
    return scale_.size() == 1 ? scale_[0] : scale_[static_cast<size_t>(ch)];
  }
  float Offset(int64_t ch) const {
    return offset_.size() == 1 ? offset_[0] : offset_[static_cast<size_t>(ch)];
  }
  std::vector<float> scale_, offset_;
};

}  // namespace

std::unique_ptr<Layer> MakeRescaling(std::string name, std::vector<float> scale,
                                     std::vector<float> offset) {
  return std::make_unique<Rescaling>(std::move(name), std::move(scale), std::move(offset));
}

}  // namespace lockstep::trainer::graph
