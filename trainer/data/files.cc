#include "trainer/data/files.h"

#include <glob.h>

#include <algorithm>

namespace lockstep::trainer {

absl::StatusOr<std::vector<std::string>> MatchFiles(const std::string& pattern) {
  glob_t g{};
  const int rc = glob(pattern.c_str(), GLOB_ERR, nullptr, &g);
  std::vector<std::string> out;
  if (rc == 0) {
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  }
  globfree(&g);
  if (rc == GLOB_ABORTED) return absl::DataLossError("cannot read the directories of " + pattern);
  if (out.empty()) return absl::NotFoundError("no file matches " + pattern);
  std::sort(out.begin(), out.end());
  return out;
}

absl::StatusOr<FileSet> ShardedFiles(const std::string& glob, FileShard shard) {
  absl::StatusOr<std::vector<std::string>> files = MatchFiles(glob);
  if (!files.ok()) return files.status();
  FileSet out;
  out.matched = static_cast<int64_t>(files->size());
  if (shard.count > 1 && !files->empty() && files->size() % static_cast<size_t>(shard.count) == 0) {
    for (size_t k = static_cast<size_t>(shard.index); k < files->size();
         k += static_cast<size_t>(shard.count)) {
      out.files.push_back((*files)[k]);
    }
    out.sharded = true;
  } else {
    out.files = std::move(*files);
  }
  return out;
}

}  // namespace lockstep::trainer
