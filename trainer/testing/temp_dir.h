#pragma once
// A fresh directory for one test, removed with it: <temp>/<prefix>.<pid>.<test name>, so tests
// of two suites running side by side never share one.
// Thread-safety: test code.

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace lockstep::trainer::testing {

class TempDir {
 public:
  explicit TempDir(const std::string& prefix) {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           (prefix + "." + std::to_string(getpid()) + "." + (info ? info->name() : "setup"));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return dir_; }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

 private:
  std::filesystem::path dir_;
};

}  // namespace lockstep::trainer::testing
