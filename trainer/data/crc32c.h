#pragma once
// CRC-32C (Castagnoli), as TFRecord files and TensorBoard event files frame their records, and
// the "masked" form they store (a CRC of data that holds CRCs is weak, so the stored value is
// rotated and offset).
// Thread-safety: pure functions.

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace lockstep::trainer {

// The CRC-32C of `data`, continuing from `crc` (0 to start).
uint32_t Crc32c(std::string_view data, uint32_t crc = 0);

inline uint32_t MaskCrc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }
inline uint32_t UnmaskCrc(uint32_t masked) {
  const uint32_t rot = masked - 0xa282ead8u;
  return (rot >> 17) | (rot << 15);
}

}  // namespace lockstep::trainer
