#include "trainer/checkpoint/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string_view>

#include "absl/strings/str_cat.h"

namespace lockstep::trainer {
namespace {

namespace fs = std::filesystem;
constexpr char kMagic[] = "LSCKPT01";
constexpr size_t kMagicLen = 8;

std::string FileName(int64_t step) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "ckpt-%012lld.lsc", static_cast<long long>(step));
  return buf;
}

void PutU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint32_t GetU32(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i)
    v = v << 8 | static_cast<unsigned char>(s[at + static_cast<size_t>(i)]);
  return v;
}

absl::Status WriteAll(int fd, const std::string& data, const std::string& path) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::UnavailableError(path + ": write failed: " + std::strerror(errno));
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status SyncDir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return absl::UnavailableError(dir + ": " + std::strerror(errno));
  int rc = ::fsync(fd);
  ::close(fd);
  return rc == 0 ? absl::OkStatus() : absl::UnavailableError(dir + ": fsync failed");
}

// The step a checkpoint's name carries ("ckpt-000000001200.lsc": 1200).
std::optional<int64_t> StepOfName(const std::string& name) {
  constexpr std::string_view kPrefix = "ckpt-", kSuffix = ".lsc";
  if (name.size() <= kPrefix.size() + kSuffix.size()) return std::nullopt;
  int64_t step = 0;
  const char* first = name.data() + kPrefix.size();
  const char* last = name.data() + name.size() - kSuffix.size();
  auto [end, ec] = std::from_chars(first, last, step);
  if (ec != std::errc() || end != last) return std::nullopt;
  return step;
}

std::vector<fs::path> CheckpointFiles(const std::string& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("ckpt-", 0) == 0 && name.ends_with(".lsc")) out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());  // zero-padded steps: name order is step order
  return out;
}

}  // namespace

absl::StatusOr<std::string> WriteCheckpoint(const std::string& dir, const CheckpointState& s,
                                            int keep) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::UnavailableError(dir + ": cannot create: " + ec.message());
  nlohmann::json header = {{"step", s.step},
                           {"epoch", s.epoch},
                           {"epoch_step", s.epoch_step},
                           {"model", s.model},
                           {"optimizer", s.optimizer}};
  header["params"] = nlohmann::json::array();
  header["optimizer_state"] = nlohmann::json::array();
  for (const Tensor& t : s.params) header["params"].push_back(t.shape());
  for (const Tensor& t : s.optimizer_state) header["optimizer_state"].push_back(t.shape());
  std::string h = header.dump();
  std::string data(kMagic, kMagicLen);
  PutU32(&data, static_cast<uint32_t>(h.size()));
  data += h;
  for (const auto* list : {&s.params, &s.optimizer_state}) {
    for (const Tensor& t : *list) {
      data.append(reinterpret_cast<const char*>(t.data()),
                  static_cast<size_t>(t.size()) * sizeof(float));
    }
  }
  PutU32(&data, static_cast<uint32_t>(crc32(0L, reinterpret_cast<const Bytef*>(data.data()),
                                            static_cast<uInt>(data.size()))));

  const std::string final_path = (fs::path(dir) / FileName(s.step)).string();
  // Unique among writers: pods on a shared volume may all be pid 1, and the coordination
  // service's host may checkpoint a stop while rank 0 writes the same step.
  const std::string tmp = absl::StrCat(final_path, ".tmp.", ::getpid(), ".",
                                       absl::Hex(std::random_device{}(), absl::kZeroPad8));
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return absl::UnavailableError(tmp + ": " + std::strerror(errno));
  absl::Status st = WriteAll(fd, data, tmp);
  if (st.ok() && ::fsync(fd) != 0) st = absl::UnavailableError(tmp + ": fsync failed");
  ::close(fd);
  if (st.ok() && ::rename(tmp.c_str(), final_path.c_str()) != 0) {
    st = absl::UnavailableError(final_path + ": rename failed: " + std::strerror(errno));
  }
  if (!st.ok()) {
    ::unlink(tmp.c_str());
    return st;
  }
  if (absl::Status d = SyncDir(dir); !d.ok()) return d;
  std::vector<fs::path> files = CheckpointFiles(dir);
  for (size_t i = 0; i + static_cast<size_t>(std::max(keep, 1)) < files.size(); ++i) {
    fs::remove(files[i], ec);
  }
  return final_path;
}

absl::StatusOr<CheckpointState> ReadCheckpoint(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(path + ": cannot open");
  auto bad = [&](const std::string& why) { return absl::DataLossError(path + ": " + why); };
  // One read of the whole file (a checkpoint is the model's size, and an evaluator reads one
  // per new step it scores).
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size < 0) return bad("cannot find its size");
  in.seekg(0);
  std::string data(static_cast<size_t>(size), '\0');
  if (!in.read(data.data(), size)) return bad("short read");
  if (data.size() < kMagicLen + 8 || data.compare(0, kMagicLen, kMagic) != 0) {
    return bad("not a checkpoint (bad magic or too short)");
  }
  const uint32_t stored = GetU32(data, data.size() - 4);
  const auto computed = static_cast<uint32_t>(
      crc32(0L, reinterpret_cast<const Bytef*>(data.data()), static_cast<uInt>(data.size() - 4)));
  if (stored != computed) return bad("checksum mismatch (corrupt or truncated)");
  const uint32_t hlen = GetU32(data, kMagicLen);
  if (kMagicLen + 4 + hlen > data.size() - 4) return bad("header runs past the end");
  nlohmann::json h = nlohmann::json::parse(data.substr(kMagicLen + 4, hlen), nullptr, false);
  if (!h.is_object()) return bad("header is not JSON");
  CheckpointState s;
  try {
    s.step = h.at("step").get<int64_t>();
    s.epoch = h.at("epoch").get<int64_t>();
    s.epoch_step = h.at("epoch_step").get<int64_t>();
    s.model = h.at("model").get<std::string>();
    s.optimizer = h.at("optimizer").get<std::string>();
    size_t at = kMagicLen + 4 + hlen;
    for (auto [key, list] :
         {std::pair{"params", &s.params}, std::pair{"optimizer_state", &s.optimizer_state}}) {
      for (const auto& shape_json : h.at(key)) {
        Shape shape = shape_json.get<Shape>();
        Tensor t(shape);
        const size_t bytes = static_cast<size_t>(t.size()) * sizeof(float);
        if (at + bytes > data.size() - 4) return bad("tensor data runs past the end");
        std::memcpy(t.data(), data.data() + at, bytes);
        at += bytes;
        list->push_back(std::move(t));
      }
    }
    if (at != data.size() - 4) return bad("trailing bytes after the tensors");
  } catch (const std::exception& e) {
    return bad(std::string("malformed header: ") + e.what());
  }
  return s;
}

absl::StatusOr<std::optional<CheckpointState>> LoadLatestCheckpoint(
    const std::string& dir, std::vector<std::string>* skipped, int64_t after_step) {
  std::vector<fs::path> files = CheckpointFiles(dir);
  for (auto it = files.rbegin(); it != files.rend(); ++it) {
    // Names order by step, so the rest are no newer either (a name that does not parse is read).
    if (const std::optional<int64_t> step = StepOfName(it->filename().string());
        step.has_value() && *step <= after_step) {
      break;
    }
    absl::StatusOr<CheckpointState> s = ReadCheckpoint(it->string());
    if (s.ok()) return std::optional<CheckpointState>(std::move(*s));
    skipped->push_back(std::string(s.status().message()));
  }
  return std::optional<CheckpointState>();
}

}  // namespace lockstep::trainer
