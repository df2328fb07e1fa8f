#pragma once
// Zip archives (a .keras archive, a NumPy .npz) read and written through Debian's libzip.
// Thread-safety: plain functions.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace lockstep::trainer {

// The bytes of `member` in the zip file at `path` (decompressed). NotFound when the archive has
// no such member; InvalidArgument when `path` is not a readable zip file or the member is over
// `limit` bytes.
absl::StatusOr<std::string> ReadZipMember(const std::string& path, const std::string& member,
                                          uint64_t limit = uint64_t{1} << 34);

// Writes a zip file at `path` (replacing one there) holding `members` (name, bytes), deflated.
// Internal on any failure, naming the path; a failed write leaves no file behind.
absl::Status WriteZip(const std::string& path,
                      const std::vector<std::pair<std::string, std::string>>& members);

}  // namespace lockstep::trainer
