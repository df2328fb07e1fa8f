#include "trainer/comm/collective.h"

#include "absl/strings/str_cat.h"

namespace lockstep::trainer::comm {

absl::Status Work::Wait(absl::Duration timeout) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (timeout == absl::InfiniteDuration()) {
      cv_.wait(lock, [&] { return status_.has_value(); });
      return *status_;
    }
    if (cv_.wait_for(lock, absl::ToChronoNanoseconds(timeout),
                     [&] { return status_.has_value(); })) {
      return *status_;
    }
  }
  absl::Status why = absl::DeadlineExceededError(absl::StrCat(what_, " did not finish within ",
                                                              absl::FormatDuration(timeout),
                                                              ": a peer stopped answering"));
  if (abort_) abort_(why);
  return why;
}

bool Work::Done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_.has_value();
}

void Work::Complete(absl::Status status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (status_.has_value()) return;
    status_ = std::move(status);
  }
  cv_.notify_all();
}

Range ChunkRange(int64_t n, int parts, int i) {
  const int64_t base = n / parts;
  const int64_t extra = n % parts;
  const int64_t begin = i * base + std::min<int64_t>(i, extra);
  return {begin, begin + base + (i < extra ? 1 : 0)};
}

QueuedCollective::~QueuedCollective() { StopExecutor(); }

void QueuedCollective::StartExecutor() {
  thread_ = std::thread([this] { Loop(); });
}

void QueuedCollective::StopExecutor() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    if (aborted_.ok()) aborted_ = absl::CancelledError("the collective backend was shut down");
  }
  Interrupt();
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

absl::Status QueuedCollective::aborted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return aborted_;
}

void QueuedCollective::Abort(absl::Status why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!aborted_.ok()) return;
    aborted_ = std::move(why);
  }
  Interrupt();
  cv_.notify_all();
}

WorkPtr QueuedCollective::Enqueue(std::string what, std::function<absl::Status()> run) {
  auto work = std::make_shared<Work>(std::move(what), [this](absl::Status s) { Abort(s); });
  std::lock_guard<std::mutex> lock(mu_);
  ++issued_;
  if (!aborted_.ok()) {
    work->Complete(aborted_);
    return work;
  }
  queue_.emplace_back(work, std::move(run));
  cv_.notify_all();
  return work;
}

void QueuedCollective::Loop() {
  for (;;) {
    std::pair<WorkPtr, std::function<absl::Status()>> item;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return !queue_.empty() || stopping_; });
      if (!aborted_.ok()) {
        for (auto& [w, run] : queue_) w->Complete(aborted_);
        queue_.clear();
        if (stopping_) return;
        continue;
      }
      if (queue_.empty()) return;
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    absl::Status s = item.second();
    if (!s.ok()) {
      Abort(s);
      s = aborted();  // the first failure names the cause
    }
    item.first->Complete(s);
  }
}

WorkPtr QueuedCollective::AllReduce(float* data, int64_t n) {
  return Enqueue(absl::StrCat(name(), " all-reduce of ", n, " elements"),
                 [=, this] { return RunAllReduce(data, n); });
}

WorkPtr QueuedCollective::Broadcast(float* data, int64_t n, int root) {
  return Enqueue(absl::StrCat(name(), " broadcast of ", n, " elements from rank ", root),
                 [=, this] { return RunBroadcast(data, n, root); });
}

WorkPtr QueuedCollective::AllGather(const float* in, int64_t n, float* out) {
  return Enqueue(absl::StrCat(name(), " all-gather of ", n, " elements"),
                 [=, this] { return RunAllGather(in, n, out); });
}

WorkPtr QueuedCollective::ReduceScatter(const float* in, int64_t n, float* out) {
  return Enqueue(absl::StrCat(name(), " reduce-scatter of ", n, " elements"),
                 [=, this] { return RunReduceScatter(in, n, out); });
}

WorkPtr QueuedCollective::Barrier() {
  return Enqueue(absl::StrCat(name(), " barrier"), [this] { return RunBarrier(); });
}

}  // namespace lockstep::trainer::comm
