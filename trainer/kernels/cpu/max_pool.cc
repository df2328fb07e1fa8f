#include "trainer/kernels/cpu/max_pool.h"

namespace lockstep::trainer::cpu {

void MaxPoolForward(const Tensor& x, int64_t size, Tensor* y, std::vector<int32_t>* argmax) {
  const int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2), w = x.dim(3);
  const int64_t oh = h / size, ow = w / size;
  y->Resize({n, c, oh, ow});
  argmax->resize(static_cast<size_t>(y->size()));
  int64_t o = 0;
  for (int64_t plane = 0; plane < n * c; ++plane) {
    const float* in = x.data() + plane * h * w;
    for (int64_t i = 0; i < oh; ++i) {
      for (int64_t j = 0; j < ow; ++j, ++o) {
        int64_t best = (i * size) * w + j * size;
        for (int64_t di = 0; di < size; ++di) {
          for (int64_t dj = 0; dj < size; ++dj) {
            int64_t at = (i * size + di) * w + j * size + dj;
            if (in[at] > in[best]) best = at;
          }
        }
        (*y)[o] = in[best];
        (*argmax)[static_cast<size_t>(o)] = static_cast<int32_t>(plane * h * w + best);
      }
    }
  }
}

void MaxPoolBackward(const Tensor& dy, const std::vector<int32_t>& argmax, const Shape& x_shape,
                     Tensor* dx) {
  dx->Resize(x_shape);
  dx->Fill(0.0f);
  for (int64_t o = 0; o < dy.size(); ++o) (*dx)[argmax[static_cast<size_t>(o)]] += dy[o];
}

}  // namespace lockstep::trainer::cpu
