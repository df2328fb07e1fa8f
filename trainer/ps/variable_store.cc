#include "trainer/ps/variable_store.h"

#include "absl/strings/str_cat.h"

namespace lockstep::trainer::ps {

absl::StatusOr<bool> VariableStore::Init(const std::map<int, std::vector<float>>& values,
                                         const std::map<int, std::vector<float>>& state,
                                         StoreConfig config, int64_t version) {
  std::lock_guard<std::mutex> lock(mu_);
  if (initialized_) return true;
  for (const auto& [id, v] : values) {
    Shard s;
    s.value = Tensor({static_cast<int64_t>(v.size())});
    std::copy(v.begin(), v.end(), s.value.data());
    s.grad_sum = Tensor({static_cast<int64_t>(v.size())});
    absl::StatusOr<std::unique_ptr<Optimizer>> opt = MakeOptimizer(
        config.optimizer, config.learning_rate, config.momentum, config.keras_optimizer);
    if (!opt.ok()) return opt.status();
    s.opt = std::move(*opt);
    s.opt->Init({&s.value});
    if (auto it = state.find(id); it != state.end()) {
      std::vector<Tensor*> st = s.opt->State();
      int64_t need = 0;
      for (Tensor* t : st) need += t->size();
      if (need != static_cast<int64_t>(it->second.size())) {
        return absl::InvalidArgumentError(absl::StrCat("shard ", id, ": optimizer state of ",
                                                       it->second.size(), " values, need ", need));
      }
      const float* src = it->second.data();
      for (Tensor* t : st) {
        std::copy_n(src, t->size(), t->data());
        src += t->size();
      }
    }
    shards_.emplace(id, std::move(s));
  }
  absl::StatusOr<LearningRate> rate =
      LearningRate::Make(config.lr_schedule, config.learning_rate, config.keras_optimizer);
  if (!rate.ok()) return rate.status();
  rate_ = *rate;
  config_ = std::move(config);
  if (config_.replicas_to_aggregate < 1) config_.replicas_to_aggregate = 1;
  version_ = version;
  initialized_ = true;
  cv_.notify_all();
  return false;
}

absl::StatusOr<std::map<int, std::vector<float>>> VariableStore::Pull(const std::vector<int>& ids,
                                                                      int64_t min_version,
                                                                      absl::Duration timeout,
                                                                      int64_t* version) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!initialized_) return absl::FailedPreconditionError("the variables are not initialized yet");
  const bool done_waiting = cv_.wait_for(lock, absl::ToChronoNanoseconds(timeout), [&] {
    return closed_ || version_ >= min_version ||
           (config_.total_steps > 0 && version_ >= config_.total_steps);
  });
  if (!done_waiting) {
    return absl::DeadlineExceededError(absl::StrCat("version ", min_version, " not reached in ",
                                                    absl::FormatDuration(timeout), " (at ",
                                                    version_, ")"));
  }
  std::map<int, std::vector<float>> out;
  for (int id : ids) {
    auto it = shards_.find(id);
    if (it == shards_.end()) return absl::NotFoundError(absl::StrCat("no shard ", id, " here"));
    const Tensor& v = it->second.value;
    out[id].assign(v.data(), v.data() + v.size());
  }
  *version = version_;
  return out;
}

void VariableStore::ApplyLocked(const std::map<int, std::vector<float>>& grads, float scale) {
  for (auto& [id, s] : shards_) {
    Tensor g({s.value.size()});
    if (config_.sync) {
      for (int64_t i = 0; i < g.size(); ++i) g.data()[i] = s.grad_sum.data()[i] * scale;
      std::fill_n(s.grad_sum.data(), s.grad_sum.size(), 0.0f);
    } else {
      auto it = grads.find(id);
      if (it == grads.end()) continue;
      std::copy(it->second.begin(), it->second.end(), g.data());
    }
    s.opt->set_learning_rate(rate_->At(version_, std::max<int64_t>(config_.total_steps, 1)));
    s.opt->Step({&s.value}, {&g});
  }
  ++version_;
  cv_.notify_all();
}

absl::StatusOr<PushResult> VariableStore::Push(const std::map<int, std::vector<float>>& grads,
                                               int64_t version) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!initialized_) return absl::FailedPreconditionError("the variables are not initialized yet");
  for (const auto& [id, g] : grads) {
    auto it = shards_.find(id);
    if (it == shards_.end()) return absl::NotFoundError(absl::StrCat("no shard ", id, " here"));
    if (static_cast<int64_t>(g.size()) != it->second.value.size()) {
      return absl::InvalidArgumentError(absl::StrCat("shard ", id, ": gradient of ", g.size(),
                                                     " values for ", it->second.value.size()));
    }
  }
  if (config_.total_steps > 0 && version_ >= config_.total_steps) {
    return PushResult{version_, true};  // training is over: late gradients are dropped
  }
  if (!config_.sync) {
    ApplyLocked(grads, 1.0f);
    return PushResult{version_, false};
  }
  if (version < version_) return PushResult{version_, true};  // stale: a backup worker's
  for (const auto& [id, g] : grads) {
    float* sum = shards_[id].grad_sum.data();
    for (size_t i = 0; i < g.size(); ++i) sum[i] += g[i];
  }
  if (++pending_ >= config_.replicas_to_aggregate) {
    pending_ = 0;
    ApplyLocked({}, 1.0f / static_cast<float>(config_.replicas_to_aggregate));
  }
  return PushResult{version_, false};
}

absl::Status VariableStore::Save(std::map<int, std::vector<float>>* values,
                                 std::map<int, std::vector<float>>* state, int64_t* version) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!initialized_) return absl::FailedPreconditionError("the variables are not initialized yet");
  for (auto& [id, s] : shards_) {
    (*values)[id].assign(s.value.data(), s.value.data() + s.value.size());
    std::vector<float>& st = (*state)[id];
    for (Tensor* t : s.opt->State()) st.insert(st.end(), t->data(), t->data() + t->size());
  }
  *version = version_;
  return absl::OkStatus();
}

int64_t VariableStore::version() const {
  std::lock_guard<std::mutex> lock(mu_);
  return version_;
}

void VariableStore::Close() {
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
  cv_.notify_all();
}

}  // namespace lockstep::trainer::ps
