#include "trainer/data/zip_archive.h"

#include <zip.h>

namespace lockstep::trainer {

absl::StatusOr<std::string> ReadZipMember(const std::string& path, const std::string& member,
                                          uint64_t limit) {
  int err = 0;
  zip_t* z = zip_open(path.c_str(), ZIP_RDONLY, &err);
  if (z == nullptr) {
    zip_error_t e;
    zip_error_init_with_code(&e, err);
    std::string why = zip_error_strerror(&e);
    zip_error_fini(&e);
    return absl::InvalidArgumentError(path + ": not a readable zip archive (" + why + ")");
  }
  zip_stat_t st;
  if (zip_stat(z, member.c_str(), 0, &st) != 0) {
    zip_close(z);
    return absl::NotFoundError(path + " has no member " + member);
  }
  if ((st.valid & ZIP_STAT_SIZE) == 0 || st.size > limit) {
    zip_close(z);
    return absl::InvalidArgumentError(path + ": member " + member + " is over " +
                                      std::to_string(limit) + " bytes");
  }
  std::string out(static_cast<size_t>(st.size), '\0');
  zip_file_t* f = zip_fopen(z, member.c_str(), 0);
  zip_int64_t n = -1;
  if (f != nullptr) {
    n = zip_fread(f, out.data(), st.size);
    zip_fclose(f);
  }
  zip_close(z);
  if (n < 0 || static_cast<zip_uint64_t>(n) != st.size) {
    return absl::DataLossError(path + ": member " + member + " cannot be read whole");
  }
  return out;
}

}  // namespace lockstep::trainer
