#include "trainer/comm/nccl.h"

#include "absl/strings/str_cat.h"

#ifdef LOCKSTEP_HAVE_CUDA
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "trainer/comm/watchdog.h"
#include "trainer/kernels/cuda/check.h"
#endif

namespace lockstep::trainer::comm {

std::string EncodeUniqueId(const std::string& bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

absl::StatusOr<std::string> DecodeUniqueId(const std::string& text, size_t size) {
  if (text.size() != 2 * size) {
    return absl::InvalidArgumentError(
        absl::StrCat("NCCL unique id: ", text.size(), " hex digits, want ", 2 * size));
  }
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  std::string out(size, '\0');
  for (size_t i = 0; i < size; ++i) {
    const int hi = digit(text[2 * i]), lo = digit(text[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      return absl::InvalidArgumentError("NCCL unique id: not lower-case hex");
    }
    out[i] = static_cast<char>(hi * 16 + lo);
  }
  return out;
}

#ifndef LOCKSTEP_HAVE_CUDA

bool NcclBuilt() { return false; }

absl::StatusOr<std::vector<std::unique_ptr<Collective>>> MakeLocalNcclGroup(int, absl::Duration) {
  return absl::UnimplementedError("this build has no NCCL (built without CUDA)");
}

absl::StatusOr<std::unique_ptr<Collective>> ConnectNccl(
    int, int, int, const std::function<absl::Status(const std::string&)>&,
    const std::function<absl::StatusOr<std::string>()>&, absl::Duration) {
  return absl::UnimplementedError("this build has no NCCL (built without CUDA)");
}

#else

bool NcclBuilt() { return true; }

namespace {

constexpr absl::Duration kPoll = absl::Microseconds(50);

// Polls a non-blocking communicator until its last call settled (not ncclInProgress).
absl::Status Settle(ncclComm_t comm, absl::Time deadline, const char* what) {
  for (;;) {
    ncclResult_t state = ncclInProgress;
    if (ncclResult_t e = ncclCommGetAsyncError(comm, &state); e != ncclSuccess) state = e;
    if (state == ncclSuccess) return absl::OkStatus();
    if (state != ncclInProgress) {
      absl::Status s = LOCKSTEP_GPU_STATUS(state);
      return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
    }
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(what, " did not complete in time"));
    }
    absl::SleepFor(kPoll);
  }
}

class NcclCollective final : public Collective {
 public:
  NcclCollective(ncclComm_t comm, int rank, int size, int device, absl::Duration timeout)
      : comm_(comm),
        rank_(rank),
        size_(size),
        device_(device),
        timeout_(timeout),
        tracker_(timeout) {}

  absl::Status Init() {
    LOCKSTEP_GPU_RETURN_IF_ERROR(cudaSetDevice(device_));
    LOCKSTEP_GPU_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    watchdog_ = std::make_unique<Watchdog>(
        absl::Milliseconds(100),
        [this]() -> absl::Status {
          ncclResult_t state = ncclSuccess;
          if (ncclResult_t e = ncclCommGetAsyncError(comm_, &state); e != ncclSuccess) state = e;
          if (state != ncclSuccess && state != ncclInProgress) {
            return absl::UnavailableError(
                absl::StrCat("NCCL communicator failed: ", LOCKSTEP_GPU_STATUS(state).message()));
          }
          return tracker_.Check();
        },
        [this](absl::Status s) { Abort(std::move(s)); });
    return absl::OkStatus();
  }

  ~NcclCollective() override {
    watchdog_.reset();
    Abort(absl::CancelledError("collective closed"));
    (void)cudaSetDevice(device_);
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
    if (scratch_ != nullptr) (void)cudaFree(scratch_);
    if (pinned_ != nullptr) (void)cudaFreeHost(pinned_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "nccl"; }
  bool device_buffers() const override { return true; }

  WorkPtr AllReduce(float* data, int64_t n) override {
    return Run("all-reduce", data, n, data, n, [=, this](const float* in, float* out) {
      return ncclAllReduce(in, out, static_cast<size_t>(n), ncclFloat, ncclSum, comm_, stream_);
    });
  }
  WorkPtr Broadcast(float* data, int64_t n, int root) override {
    return Run("broadcast", data, n, data, n, [=, this](const float* in, float* out) {
      return ncclBroadcast(in, out, static_cast<size_t>(n), ncclFloat, root, comm_, stream_);
    });
  }
  WorkPtr AllGather(const float* in, int64_t n, float* out) override {
    return Run("all-gather", in, n, out, n * size_, [=, this](const float* i, float* o) {
      return ncclAllGather(i, o, static_cast<size_t>(n), ncclFloat, comm_, stream_);
    });
  }
  WorkPtr ReduceScatter(const float* in, int64_t n, float* out) override {
    // The contract's chunks may differ in size by one, which ncclReduceScatter does not allow:
    // host buffers are all-reduced and this rank's chunk kept; device buffers are refused.
    cudaPointerAttributes attr{};
    if (cudaPointerGetAttributes(&attr, in) == cudaSuccess && attr.type == cudaMemoryTypeDevice) {
      return Failed("reduce-scatter",
                    absl::UnimplementedError("NCCL reduce-scatter of device buffers"));
    }
    (void)cudaGetLastError();
    const Range r = ChunkRange(n, size_, rank_);
    std::vector<float> sum(static_cast<size_t>(n));
    WorkPtr w = Run("reduce-scatter", in, n, sum.data(), n, [=, this](const float* i, float* o) {
      return ncclAllReduce(i, o, static_cast<size_t>(n), ncclFloat, ncclSum, comm_, stream_);
    });
    if (w->Wait().ok()) std::copy_n(sum.data() + r.begin, r.size(), out);
    return w;
  }
  WorkPtr Barrier() override {
    auto one = std::make_shared<float>(1.0f);
    return Run("barrier", one.get(), 1, one.get(), 1, [=, this](const float* i, float* o) {
      return ncclAllReduce(i, o, 1, ncclFloat, ncclSum, comm_, stream_);
    });
  }

  void Abort(absl::Status why) override {
    std::deque<WorkPtr> pending;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!aborted_.ok()) return;
      aborted_ = why;
      pending.swap(pending_);
    }
    (void)ncclCommAbort(comm_);
    for (WorkPtr& w : pending) w->Complete(why);
  }

 private:
  absl::Status Check() {
    std::lock_guard<std::mutex> lock(mu_);
    return aborted_;
  }
  static WorkPtr Failed(const char* what, absl::Status s) {
    auto w = std::make_shared<Work>(what, nullptr);
    w->Complete(std::move(s));
    return w;
  }

  // Issues one operation. `run` takes device input and output pointers.
  template <typename F>
  WorkPtr Run(const char* what, const float* in, int64_t in_n, float* out, int64_t out_n, F run) {
    const std::string label = absl::StrCat(what, " #", ++issued_, " (", in_n, " floats)");
    if (absl::Status s = Check(); !s.ok()) return Failed(what, s);
    if (absl::Status s = LOCKSTEP_GPU_STATUS(cudaSetDevice(device_)); !s.ok()) {
      return Failed(what, s);
    }
    cudaPointerAttributes attr{};
    const bool device =
        cudaPointerGetAttributes(&attr, in) == cudaSuccess && attr.type == cudaMemoryTypeDevice;
    (void)cudaGetLastError();
    auto work = std::make_shared<Work>(label, [this](absl::Status s) { Abort(std::move(s)); });
    if (device) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        pending_.push_back(work);
      }
      tracker_.Begin(label);
      absl::Status s = LOCKSTEP_GPU_STATUS(run(in, out));
      if (s.ok()) s = Settle(comm_, absl::Now() + timeout_, label.c_str());
      if (s.ok()) {
        auto* done = new std::pair<NcclCollective*, WorkPtr>(this, work);
        s = LOCKSTEP_GPU_STATUS(cudaLaunchHostFunc(
            stream_,
            [](void* p) {
              auto* d = static_cast<std::pair<NcclCollective*, WorkPtr>*>(p);
              d->first->Retire(d->second);
              delete d;
            },
            done));
      }
      if (!s.ok()) Abort(s);
      return work;
    }
    // Host buffers: through pinned memory and the device, waited for here.
    absl::Status s = Staged(label, in, in_n, out, out_n, run);
    if (!s.ok()) Abort(s);
    work->Complete(s.ok() ? s : Check());
    return work;
  }

  template <typename F>
  absl::Status Staged(const std::string& label, const float* in, int64_t in_n, float* out,
                      int64_t out_n, F run) {
    const size_t in_bytes = static_cast<size_t>(in_n) * sizeof(float);
    const size_t out_bytes = static_cast<size_t>(out_n) * sizeof(float);
    const size_t need = in_bytes + out_bytes;
    if (need > capacity_) {
      if (scratch_ != nullptr) (void)cudaFree(scratch_);
      if (pinned_ != nullptr) (void)cudaFreeHost(pinned_);
      scratch_ = nullptr;
      pinned_ = nullptr;
      capacity_ = 0;
      LOCKSTEP_GPU_RETURN_IF_ERROR(cudaMalloc(&scratch_, need));
      LOCKSTEP_GPU_RETURN_IF_ERROR(cudaHostAlloc(&pinned_, need, cudaHostAllocDefault));
      capacity_ = need;
    }
    auto* dev_in = static_cast<float*>(scratch_);
    auto* dev_out = reinterpret_cast<float*>(static_cast<char*>(scratch_) + in_bytes);
    std::memcpy(pinned_, in, in_bytes);
    LOCKSTEP_GPU_RETURN_IF_ERROR(
        cudaMemcpyAsync(dev_in, pinned_, in_bytes, cudaMemcpyHostToDevice, stream_));
    tracker_.Begin(label);
    LOCKSTEP_GPU_RETURN_IF_ERROR(run(dev_in, dev_out));
    if (absl::Status s = Settle(comm_, absl::Now() + timeout_, label.c_str()); !s.ok()) return s;
    LOCKSTEP_GPU_RETURN_IF_ERROR(
        cudaMemcpyAsync(pinned_, dev_out, out_bytes, cudaMemcpyDeviceToHost, stream_));
    // Poll rather than block: the watchdog's abort ends a stuck operation.
    for (;;) {
      cudaError_t e = cudaStreamQuery(stream_);
      if (e == cudaSuccess) break;
      if (e != cudaErrorNotReady) return LOCKSTEP_GPU_STATUS(e);
      if (absl::Status s = Check(); !s.ok()) return s;
      absl::SleepFor(kPoll);
    }
    tracker_.End();
    std::memcpy(out, pinned_, out_bytes);
    return absl::OkStatus();
  }

  // From the stream (no CUDA calls allowed): the operation finished.
  void Retire(const WorkPtr& w) {
    tracker_.End();
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto it = pending_.begin(); it != pending_.end(); ++it) {
        if (*it == w) {
          pending_.erase(it);
          break;
        }
      }
    }
    w->Complete(absl::OkStatus());
  }

  ncclComm_t comm_;
  const int rank_, size_, device_;
  const absl::Duration timeout_;
  DeadlineTracker tracker_;
  cudaStream_t stream_ = nullptr;
  std::mutex mu_;
  absl::Status aborted_;
  std::deque<WorkPtr> pending_;
  int64_t issued_ = 0;
  void* scratch_ = nullptr;
  void* pinned_ = nullptr;
  size_t capacity_ = 0;
  std::unique_ptr<Watchdog> watchdog_;
};

ncclConfig_t NonBlocking() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

absl::StatusOr<std::unique_ptr<Collective>> Wrap(ncclComm_t comm, int rank, int size, int device,
                                                 absl::Duration timeout) {
  auto c = std::make_unique<NcclCollective>(comm, rank, size, device, timeout);
  if (absl::Status s = c->Init(); !s.ok()) return s;
  return std::unique_ptr<Collective>(std::move(c));
}

}  // namespace

absl::StatusOr<std::vector<std::unique_ptr<Collective>>> MakeLocalNcclGroup(
    int gpus, absl::Duration timeout) {
  ncclUniqueId id;
  LOCKSTEP_GPU_RETURN_IF_ERROR(ncclGetUniqueId(&id));
  std::vector<ncclComm_t> comms(static_cast<size_t>(gpus), nullptr);
  ncclConfig_t config = NonBlocking();
  const absl::Time deadline = absl::Now() + timeout;
  LOCKSTEP_GPU_RETURN_IF_ERROR(ncclGroupStart());
  for (int i = 0; i < gpus; ++i) {
    LOCKSTEP_GPU_RETURN_IF_ERROR(cudaSetDevice(i));
    LOCKSTEP_GPU_RETURN_IF_ERROR(
        ncclCommInitRankConfig(&comms[static_cast<size_t>(i)], gpus, id, i, &config));
  }
  LOCKSTEP_GPU_RETURN_IF_ERROR(ncclGroupEnd());
  std::vector<std::unique_ptr<Collective>> out;
  for (int i = 0; i < gpus; ++i) {
    ncclComm_t c = comms[static_cast<size_t>(i)];
    if (absl::Status s = Settle(c, deadline, "NCCL communicator initialisation"); !s.ok()) {
      for (ncclComm_t x : comms) (void)ncclCommAbort(x);
      return s;
    }
  }
  for (int i = 0; i < gpus; ++i) {
    absl::StatusOr<std::unique_ptr<Collective>> w =
        Wrap(comms[static_cast<size_t>(i)], i, gpus, i, timeout);
    if (!w.ok()) return w.status();
    out.push_back(std::move(*w));
  }
  return out;
}

absl::StatusOr<std::unique_ptr<Collective>> ConnectNccl(
    int rank, int size, int device, const std::function<absl::Status(const std::string&)>& publish,
    const std::function<absl::StatusOr<std::string>()>& fetch, absl::Duration timeout) {
  ncclUniqueId id;
  if (rank == 0) {
    LOCKSTEP_GPU_RETURN_IF_ERROR(ncclGetUniqueId(&id));
    if (absl::Status s = publish(EncodeUniqueId(std::string(id.internal, sizeof(id.internal))));
        !s.ok()) {
      return s;
    }
  } else {
    absl::StatusOr<std::string> text = fetch();
    if (!text.ok()) return text.status();
    absl::StatusOr<std::string> bytes = DecodeUniqueId(*text, sizeof(id.internal));
    if (!bytes.ok()) return bytes.status();
    std::memcpy(id.internal, bytes->data(), sizeof(id.internal));
  }
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudaSetDevice(device));
  ncclComm_t comm = nullptr;
  ncclConfig_t config = NonBlocking();
  LOCKSTEP_GPU_RETURN_IF_ERROR(ncclCommInitRankConfig(&comm, size, id, rank, &config));
  if (absl::Status s = Settle(comm, absl::Now() + timeout, "NCCL communicator initialisation");
      !s.ok()) {
    (void)ncclCommAbort(comm);
    return s;
  }
  return Wrap(comm, rank, size, device, timeout);
}

#endif  // LOCKSTEP_HAVE_CUDA

}  // namespace lockstep::trainer::comm
