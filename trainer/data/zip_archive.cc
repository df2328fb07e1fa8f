#include "trainer/data/zip_archive.h"

#include <zip.h>

#include <cstdio>

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

absl::Status WriteZip(const std::string& path,
                      const std::vector<std::pair<std::string, std::string>>& members) {
  int err = 0;
  zip_t* z = zip_open(path.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &err);
  auto failed = [&](const std::string& why) {
    if (z != nullptr) zip_discard(z);
    std::remove(path.c_str());
    return absl::InternalError("cannot write " + path + ": " + why);
  };
  if (z == nullptr) {
    zip_error_t e;
    zip_error_init_with_code(&e, err);
    std::string why = zip_error_strerror(&e);
    zip_error_fini(&e);
    return failed(why);
  }
  for (const auto& [name, bytes] : members) {
    // libzip reads the buffer at zip_close; `members` outlives that.
    zip_source_t* src = zip_source_buffer(z, bytes.data(), bytes.size(), 0);
    if (src == nullptr) return failed(zip_strerror(z));
    const zip_int64_t index = zip_file_add(z, name.c_str(), src, ZIP_FL_ENC_UTF_8);
    if (index < 0) {
      zip_source_free(src);
      return failed(zip_strerror(z));
    }
    if (zip_set_file_compression(z, static_cast<zip_uint64_t>(index), ZIP_CM_DEFLATE, 0) != 0) {
      return failed(zip_strerror(z));
    }
  }
  if (zip_close(z) != 0) {
    std::string why = zip_strerror(z);
    return failed(why);
  }
  return absl::OkStatus();
}

}  // namespace lockstep::trainer
