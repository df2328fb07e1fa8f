#pragma once
// The optimizers' element loops: one pass over a tensor's parameters, gradient and slots per
// step, for every rule the optimizers implement (optimizer.cc: the trainer's PyTorch-style SGD
// and Adam; keras_optimizer.cc: Keras's). Each loop is compiled for each vector width
// (kernels/cpu/simd.h) and, over large tensors, split across the kernels' threads
// (kernels/cpu/threads.h), so the update runs at memory speed instead of at the speed of
// scalar square roots and divisions.
// Thread-safety: reentrant.

#include <cstdint>

#include "trainer/kernels/types.h"

namespace lockstep::trainer {

// Updates p[0, n) from g with the rule's slots s0..s2 (null where the rule has fewer).
void ApplyUpdate(const UpdateParams& u, float* p, const float* g, float* s0, float* s1, float* s2,
                 int64_t n);

}  // namespace lockstep::trainer
