#pragma once
// The geometry of one convolution (or pooling) call on channels-last data, as the graph's window
// layers compute it (Keras's padding: pad_before, and after whatever makes `out` windows): the
// one description the CPU (oneDNN) and GPU (cuDNN, pooling kernels) implementations are made
// from.
//   input [n, in..., c_in], output [n, out..., c_out], kernel taps kernel...; depthwise: one
//   group per input channel, c_out == c_in * multiplier.
// Thread-safety: plain value.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>

namespace lockstep::trainer::cpu {

struct ConvGeometry {
  int rank = 2;  // spatial axes, 1 to 3
  int64_t n = 0, c_in = 0, c_out = 0;
  bool depthwise = false;
  std::array<int64_t, 3> in{}, out{}, kernel{}, stride{}, dilation{}, pad_before{};

  // Ranks, sizes and the depthwise multiplier in range.
  bool valid() const {
    return rank >= 1 && rank <= 3 && n > 0 && c_in > 0 && c_out > 0 &&
           (!depthwise || c_out % c_in == 0);
  }
  // The padding after the last input of axis a that makes `out` windows; none where a valid
  // window leaves inputs over (the window count rounds down, as Keras's does).
  int64_t pad_after(size_t a) const {
    const int64_t span = (kernel[a] - 1) * dilation[a] + 1;
    return std::max<int64_t>((out[a] - 1) * stride[a] + span - in[a] - pad_before[a], 0);
  }
};

}  // namespace lockstep::trainer::cpu
