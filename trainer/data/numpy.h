#pragma once
// NumPy arrays as np.save writes them (.npy, format versions 1 to 3) and np.savez /
// np.savez_compressed bundle them (.npz, a zip of .npy members): little-endian bool, integer
// and floating-point dtypes in C order, read as float32 values. A .npy file is memory-mapped
// and converted from the mapping.
// Thread-safety: plain functions.

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/data/dataset.h"
#include "trainer/tensor/tensor.h"

namespace lockstep::trainer {

struct NpyArray {
  std::string dtype;  // as the header says it, e.g. "<f4", "|u1"
  Tensor values;      // the array's shape, as float32
};

// `where` is "FILE.npy" or "FILE.npz:KEY" (the member KEY.npy). DataLoss names the file for a
// header that is not NumPy's, a dtype that is not a number (or is big-endian or Fortran-ordered),
// or data shorter than the shape; NotFound when the file or the member does not exist.
absl::StatusOr<NpyArray> ReadNumpy(const std::string& where);

// The same from the bytes of one .npy file (`name` for messages).
absl::StatusOr<NpyArray> ParseNpy(std::string_view bytes, const std::string& name);

// A dataset of the inputs `x` and the targets `y` ([N, ...] each), and the examples' weights
// ([N] or [N, 1], when `sample_weight` is given), ReadNumpy locations.
// DataLoss when their lengths differ. (The trainer checks the targets against the model's
// outputs: class ids, shapes.)
absl::StatusOr<Dataset> LoadNumpyDataset(const std::vector<std::string>& x,
                                         const std::vector<std::string>& y,
                                         const std::string& sample_weight = "");
absl::StatusOr<Dataset> LoadNumpyDataset(const std::string& x, const std::string& y);

}  // namespace lockstep::trainer
