#include "trainer/comm/in_process.h"

#include <algorithm>
#include <cstring>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace lockstep::trainer::comm {
namespace {

class Member final : public QueuedCollective {
 public:
  Member(std::shared_ptr<InProcessGroup> group, int rank) : group_(std::move(group)), rank_(rank) {
    StartExecutor();
  }
  ~Member() override { StopExecutor(); }
  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  std::string name() const override { return "in-process"; }

 protected:
  // Every operation is: rendezvous (all slots posted), this rank's part, rendezvous (nobody
  // reads or writes a buffer after its owner returned).
  absl::Status Run(InProcessGroup::Slot mine,
                   const std::function<void(const std::vector<InProcessGroup::Slot>&)>& part) {
    absl::StatusOr<std::vector<InProcessGroup::Slot>> all = group_->Rendezvous(rank_, mine);
    if (!all.ok()) return all.status();
    for (const auto& s : *all) {
      if (s.n != mine.n) {
        return absl::InvalidArgumentError(
            absl::StrCat("collective order broken: rank ", rank_, " issued ", mine.n,
                         " elements where another rank issued ", s.n));
      }
    }
    part(*all);
    return group_->Rendezvous(rank_, {}).status();
  }

  absl::Status RunAllReduce(float* data, int64_t n) override {
    if (group_->algorithm() != ReduceAlgorithm::kAllReduce && size() > 1) {
      return RunTreeReduce(data, n);
    }
    return Run({data, data, n}, [&](const auto& all) {
      const Range r = ChunkRange(n, size(), rank_);
      if (r.size() == 0) return;
      std::vector<float> sum(all[0].in + r.begin, all[0].in + r.end);
      for (size_t k = 1; k < all.size(); ++k) {
        const float* src = all[k].in + r.begin;
        for (int64_t i = 0; i < r.size(); ++i) sum[i] += src[i];
      }
      for (const auto& s : all) std::memcpy(s.out + r.begin, sum.data(), r.size() * sizeof(float));
    });
  }

  // Reduce-to-one and hierarchical copy: partial sums on designated ranks, then the final sum
  // on rank 0, which every rank copies. Three rendezvous phases.
  absl::Status RunTreeReduce(float* data, int64_t n) {
    const bool hier = group_->algorithm() == ReduceAlgorithm::kHierarchicalCopy;
    const int half = (size() + 1) / 2;
    auto sum_into = [&](float* dst, const std::vector<InProcessGroup::Slot>& all, int from,
                        int to) {
      for (int k = from; k < to; ++k) {
        const float* src = all[k].in;
        for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
      }
    };
    absl::StatusOr<std::vector<InProcessGroup::Slot>> all =
        group_->Rendezvous(rank_, {data, data, n});
    if (!all.ok()) return all.status();
    for (const auto& s : *all) {
      if (s.n != n) return absl::InvalidArgumentError("collective order broken: sizes differ");
    }
    if (hier) {
      // Phase 1: the head of each half sums its half into its own buffer.
      if (rank_ == 0) sum_into(data, *all, 1, half);
      if (rank_ == half) sum_into(data, *all, half + 1, size());
      if (absl::Status s = group_->Rendezvous(rank_, {}).status(); !s.ok()) return s;
      if (rank_ == 0) sum_into(data, *all, half, half + 1);
    } else if (rank_ == 0) {
      sum_into(data, *all, 1, size());
    }
    if (absl::Status s = group_->Rendezvous(rank_, {}).status(); !s.ok()) return s;
    if (rank_ != 0 && n > 0) std::memcpy(data, (*all)[0].in, n * sizeof(float));
    return group_->Rendezvous(rank_, {}).status();
  }

  absl::Status RunBroadcast(float* data, int64_t n, int root) override {
    if (root < 0 || root >= size()) {
      return absl::InvalidArgumentError(absl::StrCat("broadcast root ", root, " out of range"));
    }
    return Run({data, data, n}, [&](const auto& all) {
      if (rank_ != root && n > 0) std::memcpy(data, all[root].in, n * sizeof(float));
    });
  }

  absl::Status RunAllGather(const float* in, int64_t n, float* out) override {
    return Run({in, out, n}, [&](const auto& all) {
      for (size_t k = 0; k < all.size(); ++k) {
        if (n > 0) std::memcpy(out + k * n, all[k].in, n * sizeof(float));
      }
    });
  }

  absl::Status RunReduceScatter(const float* in, int64_t n, float* out) override {
    return Run({in, out, n}, [&](const auto& all) {
      const Range r = ChunkRange(n, size(), rank_);
      if (r.size() == 0) return;
      std::copy(all[0].in + r.begin, all[0].in + r.end, out);
      for (size_t k = 1; k < all.size(); ++k) {
        const float* src = all[k].in + r.begin;
        for (int64_t i = 0; i < r.size(); ++i) out[i] += src[i];
      }
    });
  }

  absl::Status RunBarrier() override {
    return Run({}, [](const auto&) {});
  }

  void Interrupt() override { group_->Abort(aborted()); }

 private:
  std::shared_ptr<InProcessGroup> group_;
  const int rank_;
};

}  // namespace

std::shared_ptr<InProcessGroup> InProcessGroup::Create(int size, absl::Duration timeout,
                                                       ReduceAlgorithm algorithm) {
  return std::shared_ptr<InProcessGroup>(new InProcessGroup(size, timeout, algorithm));
}

InProcessGroup::InProcessGroup(int size, absl::Duration timeout, ReduceAlgorithm algorithm)
    : size_(size), algorithm_(algorithm), timeout_(timeout), slots_(size) {}

std::unique_ptr<Collective> InProcessGroup::Member(int rank) {
  return std::make_unique<comm::Member>(shared_from_this(), rank);
}

absl::StatusOr<std::vector<InProcessGroup::Slot>> InProcessGroup::Rendezvous(int rank, Slot slot) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!aborted_.ok()) return aborted_;
  slots_[rank] = slot;
  const int64_t gen = generation_;
  if (++arrived_ == size_) {
    arrived_ = 0;
    published_ = slots_;
    ++generation_;
    cv_.notify_all();
    return published_;
  }
  if (!cv_.wait_for(lock, absl::ToChronoNanoseconds(timeout_),
                    [&] { return generation_ != gen || !aborted_.ok(); })) {
    aborted_ = absl::DeadlineExceededError(absl::StrCat(
        "in-process collective: rank ", rank, " waited ", absl::FormatDuration(timeout_),
        " for the other ", size_ - 1, " ranks: a replica stopped issuing collectives"));
    cv_.notify_all();
    return aborted_;
  }
  if (generation_ == gen) return aborted_;
  // The next rendezvous cannot overwrite `published_` before every rank of this one left:
  // it needs this rank to arrive.
  return published_;
}

void InProcessGroup::Abort(absl::Status why) {
  if (why.ok()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_.ok()) aborted_ = std::move(why);
  cv_.notify_all();
}

}  // namespace lockstep::trainer::comm
