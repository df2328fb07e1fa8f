#pragma once
// Column sums: the bias gradient of a [rows, n] output gradient (Dense, the convolutions, the
// recurrent and attention layers).
// Thread-safety: reentrant.

#include <cstdint>

namespace lockstep::trainer::cpu {

// dst[j] += the sum over r of src[r * n + j].
void AddColumnSums(const float* src, int64_t rows, int64_t n, float* dst);

}  // namespace lockstep::trainer::cpu
