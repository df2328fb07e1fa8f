#include "trainer/summary/event_writer.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "trainer/proto/event.pb.h"

namespace lockstep::trainer {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string Host() {
  char h[256] = {0};
  if (gethostname(h, sizeof(h) - 1) != 0 || h[0] == '\0') return "localhost";
  return h;
}

}  // namespace

absl::StatusOr<std::unique_ptr<EventWriter>> EventWriter::Create(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create the TensorBoard directory ", dir, ": ", ec.message()));
  }
  // Several writers of one process in one second get distinct names.
  static std::atomic<int> serial{0};
  const double now = Now();
  const std::string path =
      (std::filesystem::path(dir) / absl::StrCat("events.out.tfevents.", static_cast<int64_t>(now),
                                                 ".", Host(), ".", getpid(), ".", serial++, ".v2"))
          .string();
  absl::StatusOr<std::unique_ptr<RecordWriter>> w = RecordWriter::Create(path);
  if (!w.ok()) return w.status();
  std::unique_ptr<EventWriter> out(new EventWriter(path, std::move(*w)));
  tensorboard::Event version;
  version.set_wall_time(now);
  version.set_file_version("brain.Event:2");
  if (absl::Status s = out->records_->Write(version.SerializeAsString()); !s.ok()) return s;
  if (absl::Status s = out->Flush(); !s.ok()) return s;
  return out;
}

absl::Status EventWriter::Scalars(int64_t step,
                                  const std::vector<std::pair<std::string, double>>& values,
                                  double wall_time) {
  tensorboard::Event e;
  e.set_wall_time(wall_time > 0 ? wall_time : Now());
  e.set_step(step);
  tensorboard::Summary* s = e.mutable_summary();
  for (const auto& [tag, v] : values) {
    tensorboard::Summary::Value* sv = s->add_value();
    sv->set_tag(tag);
    sv->set_simple_value(static_cast<float>(v));
  }
  return records_->Write(e.SerializeAsString());
}

}  // namespace lockstep::trainer
