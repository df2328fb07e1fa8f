#pragma once
// SimpleRNN, LSTM and GRU on the GPU with the CPU layer's semantics (layers/rnn/rnn.h):
// Keras's gate order (LSTM i, f, c, o; GRU z, r, h), GRU's reset_after both ways (the
// recurrent bias inside the reset gate's product, or the reset gate applied to the state
// before it), any activation and recurrent activation (hard_sigmoid as each Keras version
// defines it), go_backwards, masks (a masked step keeps each row's state and repeats its output,
// or outputs zeros with zero_output_for_mask), and the sequence or the last output.
//
// As on the CPU, the steps run time-major: one GEMM projects every step's input, then each step
// adds its recurrent product (one GEMM; GRU reset_after keeps it apart, reset_before takes a
// second one for the candidate) and one kernel applies the cell. Backward walks the steps in
// reverse with one GEMM per step for the state's gradient and finishes with one GEMM each for
// the kernel's, the recurrent kernel's and the input's gradients over all steps. Inputs and
// outputs are in any storage dtype; the cell's arithmetic, its saved activations and the
// weights it reads are fp32 (the master weights: a recurrent cell gains nothing from 16-bit
// storage and loses accuracy over long sequences).
//
// Initial states (a seq2seq decoder's) and the final states (return_state) are in the input's
// dtype; their gradients flow like the sequence's.
// Not here yet (the layer then runs on the CPU, see model/gpu_support.h): input and recurrent
// dropout.
// Thread-safety: one thread per object (the context's).

#include <cstdint>

#include "absl/status/status.h"
#include "trainer/kernels/cuda/device_tensor.h"
#include "trainer/kernels/types.h"

namespace lockstep::trainer::cuda {

struct RnnSpec {
  RnnCell cell = RnnCell::kLstm;
  int64_t units = 1;
  Activation activation{Act::kTanh, 0};
  Activation recurrent_activation{Act::kSigmoid, 0};
  bool return_sequences = false;
  bool go_backwards = false;
  bool reset_after = true;  // GRU
  bool zero_output_for_mask = false;
  // The output sequence reversed in time (Bidirectional's backward layer, which Keras reverses
  // so that its steps line up with the forward layer's).
  bool reverse_outputs = false;
  int gates() const { return cell == RnnCell::kLstm ? 4 : cell == RnnCell::kGru ? 3 : 1; }
};

// A recurrent layer's states [b, u]: h, and c for an LSTM (null: zeros, or not wanted).
struct RnnStates {
  const DeviceTensor* h = nullptr;
  const DeviceTensor* c = nullptr;
};
// Where Backward writes the initial states' gradients (null: not wanted).
struct RnnStateGrads {
  DeviceTensor* h = nullptr;
  DeviceTensor* c = nullptr;
};

class Recurrent {
 public:
  Recurrent(GpuContext* ctx, RnnSpec s) : ctx_(ctx), spec_(s) {}

  // y [b, t, units] (return_sequences) or [b, units], in x's dtype, from x [b, t, features],
  // its mask (fp32 [b, t] of 0/1, or null) and the initial states. The fp32 weights: kernel
  // [features, G*u], recurrent [u, G*u], bias [G*u] (GRU reset_after [2, G*u]: input then
  // recurrent) or null.
  absl::Status Forward(const DeviceTensor& x, const DeviceTensor* mask, RnnStates initial,
                       const float* kernel, const float* recurrent, const float* bias,
                       DeviceTensor* y);
  // After Forward: the final states [b, u] in x's dtype (c only for an LSTM; either may be
  // null).
  absl::Status FinalStates(DeviceTensor* h, DeviceTensor* c);
  // From dy (y's shape and dtype, or null: zeros) and the final states' gradients, after
  // Forward with the same weights: dx (may be null) and the initial states' gradients in x's
  // dtype; dkernel, drecurrent and dbias (fp32, overwritten; all null for a frozen layer, dbias
  // null without a bias).
  absl::Status Backward(const DeviceTensor* dy, RnnStates dfinal, const float* kernel,
                        const float* recurrent, DeviceTensor* dx, RnnStateGrads dinitial,
                        float* dkernel, float* drecurrent, float* dbias);

 private:
  // The output sequence (and its gradient) reversed in time (see reverse_outputs).
  bool Aligned() const { return spec_.reverse_outputs; }
  // Masked steps of the output sequence are zeros.
  bool ZeroOutput() const { return spec_.zero_output_for_mask && spec_.return_sequences; }
  GpuContext* ctx_;
  RnnSpec spec_;
  Shape x_shape_;
  DType x_dtype_ = DType::kF32;
  // fp32, time-major: inputs [T*B, d]; pre-activations and gates [T*B, G*u]; states
  // [(T+1)*B, u] (the initial zeros first); LSTM act(c), GRU reset_after h U_h + b_h,
  // reset_before r * h [T*B, u]; a step's recurrent product [B, G*u].
  DeviceTensor xt_, a_, g_, h_, c_, e_, rec_;
  DeviceTensor m_;  // the mask time-major [T*B] (when masked_)
  bool masked_ = false;
  DeviceTensor uzr_, uh_;  // GRU reset_before: U's z and r columns, and its h columns
  // Backward: d(pre-activations) [T*B, G*u]; GRU reset_after d(h U + b') [T*B, G*u];
  // reset_before the z/r part [T*B, 2u] and the candidate part [T*B, u]; the carried state
  // gradients [B, u]; dy time-major; scratch.
  DeviceTensor da_, dr_, dzr_, dh2_, gh_, gc_, dyt_, t_, dxt_;
};

}  // namespace lockstep::trainer::cuda
