#include "operator/runtime/work_queue.h"

#include <algorithm>
#include <cmath>

namespace lockstep::runtime {

struct WorkQueue::State {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::string> queue;
  std::set<std::string, std::less<>> dirty;       // queued or to be re-queued after Done
  std::set<std::string, std::less<>> processing;  // handed to a worker
  std::map<std::string, std::pair<absl::Time, common::Clock::TimerId>, std::less<>> waiting;
  std::map<std::string, int, std::less<>> failures;
  bool shutting_down = false;

  // Requires mu.
  void AddLocked(const std::string& key) {
    if (shutting_down || dirty.contains(key)) return;
    dirty.insert(key);
    if (processing.contains(key)) return;
    queue.push_back(key);
    cv.notify_one();
  }
};

WorkQueue::WorkQueue(common::Clock* clock, WorkQueueOptions options)
    : state_(std::make_shared<State>()), clock_(clock), options_(options) {}

WorkQueue::~WorkQueue() { ShutDown(); }

void WorkQueue::Add(const std::string& key) {
  std::lock_guard lock(state_->mu);
  state_->AddLocked(key);
}

void WorkQueue::AddAfter(const std::string& key, absl::Duration delay) {
  if (delay <= absl::ZeroDuration()) {
    Add(key);
    return;
  }
  absl::Time deadline = clock_->Monotonic() + delay;
  std::unique_lock lock(state_->mu);
  if (state_->shutting_down) return;
  auto it = state_->waiting.find(key);
  if (it != state_->waiting.end()) {
    if (it->second.first <= deadline) return;  // an earlier add is pending
    clock_->Cancel(it->second.second);
    state_->waiting.erase(it);
  }
  // The timer may fire at once, on this thread: schedule it without holding the lock.
  lock.unlock();
  std::weak_ptr<State> weak = state_;
  common::Clock::TimerId id = clock_->Schedule(deadline, [weak, key, deadline] {
    std::shared_ptr<State> state = weak.lock();
    if (!state) return;
    std::lock_guard l(state->mu);
    auto w = state->waiting.find(key);
    if (w != state->waiting.end() && w->second.first == deadline) state->waiting.erase(w);
    state->AddLocked(key);
  });
  lock.lock();
  // Record it unless it already fired, or a racing AddAfter recorded an earlier one.
  auto w = state_->waiting.find(key);
  if (clock_->Monotonic() < deadline &&
      (w == state_->waiting.end() || w->second.first > deadline)) {
    if (w != state_->waiting.end()) clock_->Cancel(w->second.second);
    state_->waiting[key] = {deadline, id};
  }
}

void WorkQueue::AddRateLimited(const std::string& key) {
  int failures;
  {
    std::lock_guard lock(state_->mu);
    failures = state_->failures[key]++;
  }
  double scale = std::pow(2.0, std::min(failures, 62));
  absl::Duration delay = std::min(options_.max_delay, options_.base_delay * scale);
  AddAfter(key, delay);
}

void WorkQueue::Forget(const std::string& key) {
  std::lock_guard lock(state_->mu);
  state_->failures.erase(key);
}

int WorkQueue::NumRequeues(const std::string& key) const {
  std::lock_guard lock(state_->mu);
  auto it = state_->failures.find(key);
  return it == state_->failures.end() ? 0 : it->second;
}

std::optional<std::string> WorkQueue::Get() {
  std::unique_lock lock(state_->mu);
  state_->cv.wait(lock, [&] { return !state_->queue.empty() || state_->shutting_down; });
  if (state_->queue.empty()) return std::nullopt;
  std::string key = std::move(state_->queue.front());
  state_->queue.pop_front();
  state_->processing.insert(key);
  state_->dirty.erase(key);
  return key;
}

void WorkQueue::Done(const std::string& key) {
  std::lock_guard lock(state_->mu);
  state_->processing.erase(key);
  if (state_->dirty.contains(key)) {
    state_->queue.push_back(key);
    state_->cv.notify_one();
  }
}

void WorkQueue::ShutDownNow() { Close(/*drop_queued=*/true); }

void WorkQueue::ShutDown() { Close(/*drop_queued=*/false); }

void WorkQueue::Close(bool drop_queued) {
  std::lock_guard lock(state_->mu);
  if (drop_queued) {
    state_->queue.clear();
    state_->dirty.clear();
  }
  state_->shutting_down = true;
  for (const auto& [key, pending] : state_->waiting) clock_->Cancel(pending.second);
  state_->waiting.clear();
  state_->cv.notify_all();
}

bool WorkQueue::shutting_down() const {
  std::lock_guard lock(state_->mu);
  return state_->shutting_down;
}

size_t WorkQueue::Len() const {
  std::lock_guard lock(state_->mu);
  return state_->queue.size();
}

size_t WorkQueue::Waiting() const {
  std::lock_guard lock(state_->mu);
  return state_->waiting.size();
}

}  // namespace lockstep::runtime
