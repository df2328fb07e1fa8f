#include "trainer/comm/ring.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "trainer/comm/exchange.h"

namespace lockstep::trainer::comm {

namespace {

class Ring final : public QueuedCollective {
 public:
  Ring(RingOptions o, std::vector<std::unique_ptr<PeerLink>> links)
      : o_(std::move(o)),
        n_(static_cast<int>(o_.addresses.size())),
        unit_elems_(std::max<int64_t>(1, o_.unit_bytes / static_cast<int64_t>(sizeof(float)))),
        exchanger_(o_.rank, std::move(links), o_.timeout) {
    StartExecutor();
  }
  ~Ring() override { StopExecutor(); }

  int rank() const override { return o_.rank; }
  int size() const override { return n_; }
  std::string name() const override { return "ring"; }

 protected:
  absl::Status RunAllReduce(float* data, int64_t n) override {
    if (n_ == 1 || n == 0) return absl::OkStatus();
    const AlgorithmEntry& a = ChooseAllReduce(n_, n * static_cast<int64_t>(sizeof(float)),
                                              o_.halving_doubling_max_bytes, o_.all_reduce);
    return Run(a.all_reduce(n_, o_.rank, n, unit_elems_), data);
  }

  absl::Status RunReduceScatter(const float* in, int64_t n, float* out) override {
    const Range mine = ChunkRange(n, n_, o_.rank);
    if (n_ == 1) {
      std::copy(in, in + n, out);
      return absl::OkStatus();
    }
    work_.assign(in, in + n);
    if (absl::Status s = Run(RingReduceScatter(n_, o_.rank, n, unit_elems_), work_.data());
        !s.ok()) {
      return s;
    }
    std::copy(work_.begin() + mine.begin, work_.begin() + mine.end, out);
    return absl::OkStatus();
  }

  absl::Status RunAllGather(const float* in, int64_t n, float* out) override {
    std::copy(in, in + n, out + o_.rank * n);
    if (n_ == 1 || n == 0) return absl::OkStatus();
    return Run(RingAllGather(n_, o_.rank, n, unit_elems_), out);
  }

  absl::Status RunBroadcast(float* data, int64_t n, int root) override {
    if (root < 0 || root >= n_) {
      return absl::InvalidArgumentError(absl::StrCat("broadcast root ", root, " out of range"));
    }
    return Run(RingBroadcast(n_, o_.rank, n, root, unit_elems_), data);
  }

  absl::Status RunBarrier() override {
    float one = 1;
    return RunAllReduce(&one, 1);
  }

  void Interrupt() override { exchanger_.Interrupt(); }

 private:
  // Runs `s` over `buf`: element offsets become pointers, element counts bytes.
  absl::Status Run(const Schedule& s, float* buf) {
    sends_.clear();
    recvs_.clear();
    for (const SendStep& u : s.sends) {
      sends_.push_back({u.peer, reinterpret_cast<const char*>(buf + u.begin),
                        static_cast<size_t>(u.count) * sizeof(float), u.after_recvs});
    }
    for (const RecvStep& u : s.recvs) {
      recvs_.push_back({u.peer, reinterpret_cast<char*>(buf + u.begin),
                        static_cast<size_t>(u.count) * sizeof(float),
                        u.reduce ? buf + u.begin : nullptr});
    }
    if (sends_.empty() && recvs_.empty()) return absl::OkStatus();
    return exchanger_.Run(sends_, recvs_, [this] { return aborted(); });
  }

  const RingOptions o_;
  const int n_;
  const int64_t unit_elems_;
  Exchanger exchanger_;
  std::vector<float> work_;
  std::vector<SendUnit> sends_;
  std::vector<RecvUnit> recvs_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Collective>> ConnectRing(RingOptions options) {
  const int n = static_cast<int>(options.addresses.size());
  if (n < 1 || options.rank < 0 || options.rank >= n) {
    return absl::InvalidArgumentError(
        absl::StrCat("ring: rank ", options.rank, " of ", n, " addresses"));
  }
  if (options.listener == nullptr) return absl::InvalidArgumentError("ring: no listener");
  LinkOptions lo{options.rank, options.addresses, options.token, options.connect_timeout};
  // Links to every peer of every algorithm, so each operation can take whichever fits.
  auto links = ConnectPeers(*options.listener, lo, AllPeers(n, options.rank));
  options.listener.reset();  // nobody else may connect
  if (!links.ok()) return links.status();
  return std::unique_ptr<Collective>(new Ring(std::move(options), std::move(*links)));
}

}  // namespace lockstep::trainer::comm
