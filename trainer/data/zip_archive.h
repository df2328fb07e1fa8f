#pragma once
// Members of zip archives (a .keras archive, a NumPy .npz), through Debian's libzip.
// Thread-safety: plain functions.

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace lockstep::trainer {

// The bytes of `member` in the zip file at `path` (decompressed). NotFound when the archive has
// no such member; InvalidArgument when `path` is not a readable zip file or the member is over
// `limit` bytes.
absl::StatusOr<std::string> ReadZipMember(const std::string& path, const std::string& member,
                                          uint64_t limit = uint64_t{1} << 34);

}  // namespace lockstep::trainer
