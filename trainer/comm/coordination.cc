#include "trainer/comm/coordination.h"

#include <condition_variable>
#include <map>
#include <mutex>
#include <random>
#include <set>

#include <grpcpp/grpcpp.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "trainer/comm/peer_lost.h"
#include "trainer/comm/token.h"
#include "trainer/proto/coordination.grpc.pb.h"

namespace lockstep::trainer::comm {
namespace {

namespace pb = lockstep::trainer::proto;

class Service final : public pb::Coordination::Service {
 public:
  explicit Service(CoordinationServer::Options o)
      : o_(WithClock(std::move(o))), active_(!o_.standby) {
    for (int t = 0; t < o_.world_size; ++t) expected_.insert(t);
  }

  void Activate() {
    std::lock_guard<std::mutex> lock(mu_);
    active_ = true;
  }

  void SetInGroup() { in_group_ = true; }

  // A standby takes the service over from a lost host: the next epoch after the last one it
  // saw, whose members are the last epoch's (the lost host's replacement among them).
  void TakeOver(int64_t epoch, const std::vector<int>& tasks, std::string why) {
    std::lock_guard<std::mutex> lock(mu_);
    if (active_) return;
    active_ = true;
    taken_over_ = true;
    epoch_ = epoch;
    members_.clear();
    BeginEpoch(std::move(why), /*planned=*/false);
    expected_.insert(tasks.begin(), tasks.end());
    cv_.notify_all();
  }

  grpc::Status Probe(grpc::ServerContext* ctx, const pb::ProbeRequest*,
                     pb::ProbeResponse* resp) override {
    if (grpc::Status s = CheckToken(ctx, o_.token); !s.ok()) return s;
    std::lock_guard<std::mutex> lock(mu_);
    resp->set_hosting(active_);
    resp->set_in_group(in_group_);
    resp->set_epoch(active_ ? epoch_ : 0);
    resp->set_attempt(o_.attempt);
    resp->set_task_id(o_.task_id);
    return grpc::Status::OK;
  }

  void Shutdown() {
    std::lock_guard<std::mutex> lock(mu_);
    shutdown_ = true;
    cv_.notify_all();
  }

  grpc::Status Join(grpc::ServerContext* ctx, const pb::JoinRequest* req,
                    pb::JoinResponse* resp) override {
    if (grpc::Status s = CheckToken(ctx, o_.token); !s.ok()) return s;
    if (grpc::Status s = CheckHosting(); !s.ok()) return s;
    const int t = req->task_id();
    if (req->attempt() != o_.attempt) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          absl::StrCat(req->task(), " belongs to attempt ", req->attempt(),
                                       " of the job; this group is attempt ", o_.attempt));
    }
    if (elastic() ? (t < 0 || t >= o_.max_world_size)
                  : (req->world_size() != o_.world_size || t < 0 || t >= o_.world_size)) {
      return grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          elastic() ? absl::StrCat("task ", t, " (", req->task(), ") is beyond this group's ",
                                   o_.max_world_size, " tasks at most")
                    : absl::StrCat("rank ", t, " of ", req->world_size(),
                                   " does not fit this group of ", o_.world_size));
    }
    std::unique_lock<std::mutex> lock(mu_);
    const Member me{
        .incarnation = req->incarnation(), .task = req->task(), .fresh = req->epoch_seen() < 0};
    // Taken over from a lost host: the epoch forming follows the newest any survivor saw.
    if (taken_over_ && forming_ && req->epoch_seen() >= epoch_) epoch_ = req->epoch_seen() + 1;
    if (!forming_ && req->epoch_seen() < epoch_ && IsMember(t, me.incarnation)) {
      // A member of the formed epoch whose join's answer never arrived (its call ended first):
      // the epoch is its own already.
      return Answer(t, resp);
    }
    if (expected_.contains(t) || (!forming_ && members_.contains(t))) {
      if (!forming_) {
        // The group is formed: this join begins the next epoch.
        const bool fresh = members_[t].incarnation != me.incarnation;
        if (fresh) {
          BeginEpoch(absl::StrCat(Name(t, me.task), " was replaced"), /*planned=*/false);
        } else if (req->planned()) {
          // Ahead of the leave or join that it is for, which then names the epoch.
          BeginEpoch(absl::StrCat(Name(t, me.task), " regroups at a step boundary"),
                     /*planned=*/true);
          why_is_placeholder_ = true;
        } else {
          BeginEpoch(absl::StrCat(Name(t, me.task), " lost a peer"), /*planned=*/false);
        }
      }
      joining_[t] = me;
      last_seen_[t] = o_.clock->Monotonic();
    } else {
      // A task new to the group (an elastic group grew): it waits to be admitted, answering
      // before the caller's deadline so that it hears why.
      const uint64_t call = ++calls_;
      lobby_[t] = me;
      lobby_[t].call = call;
      Admit();
      grpc::Status s = WaitFor(
          ctx, lock, [&] { return !InLobby(t, me.incarnation); }, "admission to the group",
          absl::Milliseconds(250));
      if (!s.ok()) {
        // Out of the lobby, unless a later call of the same process is there now.
        if (InLobby(t, me.incarnation) && lobby_[t].call == call) lobby_.erase(t);
        if (!refused_.empty()) return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, refused_);
        return s;
      }
      if (!joining_.contains(t) || joining_[t].incarnation != me.incarnation) {
        return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                            absl::StrCat(Name(t, me.task), " was taken over by a newer process"));
      }
    }
    MaybeForm();
    cv_.notify_all();
    const int64_t epoch = epoch_;
    grpc::Status s = WaitFor(
        ctx, lock, [&] { return epoch_ > epoch || !forming_; }, "every rank to join");
    if (!s.ok()) return s;
    if (epoch_ != epoch) {
      return grpc::Status(grpc::StatusCode::ABORTED,
                          absl::StrCat("the group moved on to epoch ", epoch_, " while joining"));
    }
    if (!IsMember(t, me.incarnation)) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          absl::StrCat(Name(t, me.task), " was taken over by a newer process"));
    }
    return Answer(t, resp);
  }

  grpc::Status Leave(grpc::ServerContext* ctx, const pb::LeaveRequest* req,
                     pb::LeaveResponse*) override {
    if (grpc::Status s = CheckToken(ctx, o_.token); !s.ok()) return s;
    if (grpc::Status s = CheckHosting(); !s.ok()) return s;
    std::lock_guard<std::mutex> lock(mu_);
    const int t = req->task_id();
    if (Superseded(t, req->incarnation())) return grpc::Status::OK;  // not its rank anymore
    left_.insert(req->incarnation());
    lobby_.erase(t);
    if (!members_.contains(t) && !expected_.contains(t)) return grpc::Status::OK;
    // An elastic group goes on without the task; a fixed one keeps its place for the
    // replacement (its pod is recreated), which the next epoch waits for.
    const std::string what =
        absl::StrCat(NameOf(t), " left the group",
                     elastic() ? "" : " (stopped by SIGTERM); its replacement is awaited");
    if (!forming_) {
      BeginEpoch(what, /*planned=*/true);
    } else {
      AddCause(what);
    }
    if (elastic()) expected_.erase(t);
    joining_.erase(t);
    last_seen_.erase(t);
    Admit();
    MaybeForm();
    cv_.notify_all();
    return grpc::Status::OK;
  }

  grpc::Status Barrier(grpc::ServerContext* ctx, const pb::BarrierRequest* req,
                       pb::BarrierResponse*) override {
    if (grpc::Status s = CheckToken(ctx, o_.token); !s.ok()) return s;
    if (grpc::Status s = CheckHosting(); !s.ok()) return s;
    std::unique_lock<std::mutex> lock(mu_);
    const std::string name = absl::StrCat(req->epoch(), "/", req->name());
    barriers_[name].insert(req->task_id());
    cv_.notify_all();
    return WaitInEpoch(
        ctx, lock, req->epoch(), [&] { return barriers_[name].size() == members_.size(); },
        "barrier " + req->name());
  }

  grpc::Status SetKey(grpc::ServerContext* ctx, const pb::SetKeyRequest* req,
                      pb::SetKeyResponse*) override {
    if (grpc::Status s = CheckToken(ctx, o_.token); !s.ok()) return s;
    if (grpc::Status s = CheckHosting(); !s.ok()) return s;
    std::lock_guard<std::mutex> lock(mu_);
    kv_[req->key()] = req->value();
    cv_.notify_all();
    return grpc::Status::OK;
  }

  grpc::Status GetKey(grpc::ServerContext* ctx, const pb::GetKeyRequest* req,
                      pb::GetKeyResponse* resp) override {
    if (grpc::Status s = CheckToken(ctx, o_.token); !s.ok()) return s;
    if (grpc::Status s = CheckHosting(); !s.ok()) return s;
    std::unique_lock<std::mutex> lock(mu_);
    grpc::Status s = WaitInEpoch(
        ctx, lock, req->epoch(), [&] { return kv_.contains(req->key()); }, "key " + req->key());
    if (s.ok()) resp->set_value(kv_[req->key()]);
    return s;
  }

  grpc::Status Heartbeat(grpc::ServerContext* ctx, const pb::HeartbeatRequest* req,
                         pb::HeartbeatResponse* resp) override {
    if (grpc::Status s = CheckToken(ctx, o_.token); !s.ok()) return s;
    if (grpc::Status s = CheckHosting(); !s.ok()) return s;
    std::lock_guard<std::mutex> lock(mu_);
    const absl::Time now = o_.clock->Monotonic();
    const int t = req->task_id();
    if (Superseded(t, req->incarnation())) {
      resp->set_lost(absl::StrCat("task ", t, " was taken over by a newer process"));
      return grpc::Status::OK;
    }
    if (req->stop_requested()) stop_ = true;
    // Silence is watched for the members and the joining, not a task that left.
    if (!left_.contains(req->incarnation()) && (members_.contains(t) || joining_.contains(t))) {
      last_seen_[t] = now;
    }
    // Silence counts only in a formed epoch: ranks still joining are starting up.
    if (lost_.empty() && !forming_) {
      for (const auto& [task, seen] : last_seen_) {
        if (now - seen <= o_.peer_timeout) continue;
        std::string what =
            absl::StrCat(NameOf(task), " sent no heartbeat for ", absl::FormatDuration(now - seen));
        if (o_.recover_in_place) {
          BeginEpoch(what, /*planned=*/false);
          cv_.notify_all();
        } else {
          lost_ = what;
        }
        break;
      }
    }
    resp->set_lost(lost_);
    resp->set_stop(stop_);
    resp->set_epoch(epoch_);
    resp->set_why(why_);
    resp->set_planned(forming_ && planned_);
    return grpc::Status::OK;
  }

 private:
  static CoordinationServer::Options WithClock(CoordinationServer::Options o) {
    if (o.clock == nullptr) o.clock = &common::SystemClock();
    return o;
  }

  struct Member {
    uint64_t incarnation = 0;
    std::string task;
    bool fresh = false;  // a process joining for the first time
    uint64_t call = 0;   // the Join call waiting in the lobby
  };

  grpc::Status CheckHosting() {
    std::lock_guard<std::mutex> lock(mu_);
    if (active_) return grpc::Status::OK;
    return grpc::Status(
        grpc::StatusCode::NOT_FOUND,
        absl::StrCat("task ", o_.task_id, " does not host the coordination service (a standby)"));
  }

  bool elastic() const { return o_.max_world_size > 0; }

  static std::string Name(int t, const std::string& task) {
    return task.empty() ? absl::StrCat("task ", t) : task;
  }

  std::string NameOf(int t) const {
    if (auto m = members_.find(t); m != members_.end()) return Name(t, m->second.task);
    if (auto j = joining_.find(t); j != joining_.end()) return Name(t, j->second.task);
    return Name(t, "");
  }

  bool IsMember(int t, uint64_t incarnation) const {
    auto m = members_.find(t);
    return m != members_.end() && m->second.incarnation == incarnation;
  }

  bool InLobby(int t, uint64_t incarnation) const {
    auto l = lobby_.find(t);
    return l != lobby_.end() && l->second.incarnation == incarnation;
  }

  bool Divides(size_t size) const {
    return o_.global_batch <= 0 || (size > 0 && o_.global_batch % static_cast<int64_t>(size) == 0);
  }

  // The formed epoch, as Join answers it for task `t`.
  grpc::Status Answer(int t, pb::JoinResponse* resp) const {
    resp->set_epoch(epoch_);
    for (int r : replaced_) resp->add_replaced(r);
    resp->set_why(why_);
    int rank = 0;
    for (const auto& [task, m] : members_) {
      if (task == t) resp->set_rank(rank);
      resp->add_task_ids(task);
      ++rank;
    }
    return grpc::Status::OK;
  }

  // Whether another process took task `t` over after the one presenting `incarnation` (the
  // last to join a task holds it).
  bool Superseded(int t, uint64_t incarnation) const {
    if (auto j = joining_.find(t); j != joining_.end()) return j->second.incarnation != incarnation;
    if (auto l = lobby_.find(t); l != lobby_.end()) return l->second.incarnation != incarnation;
    auto m = members_.find(t);
    return m != members_.end() && m->second.incarnation != incarnation;
  }

  // Names a cause of the epoch forming besides the one that began it.
  void AddCause(const std::string& what) {
    why_ = why_is_placeholder_ ? what : absl::StrCat(why_, "; ", what);
    why_is_placeholder_ = false;
  }

  // Every member of the formed epoch is expected in the next one (a lost one's replacement
  // takes its place); a planned epoch lets the members finish their step first.
  void BeginEpoch(std::string why, bool planned) {
    why_is_placeholder_ = false;
    ++epoch_;
    forming_ = true;
    planned_ = planned;
    joining_.clear();
    expected_.clear();
    for (const auto& [t, m] : members_) expected_.insert(t);
    why_ = std::move(why);
    barriers_.clear();  // an older epoch's are done with
  }

  // Admits every task of the lobby into the next epoch, all or none: the group's size must
  // divide the global batch.
  void Admit() {
    if (lobby_.empty()) return;
    const size_t size = (forming_ ? expected_.size() : members_.size()) + lobby_.size();
    if (!Divides(size)) {
      refused_ =
          absl::StrCat("the group stays at ", size - lobby_.size(), " replicas: the global batch ",
                       o_.global_batch, " does not divide over ", size);
      return;
    }
    refused_.clear();
    std::string who;
    for (const auto& [t, m] : lobby_)
      absl::StrAppend(&who, who.empty() ? "" : ", ", Name(t, m.task));
    if (forming_) {
      AddCause(who + " joined the group");
    } else {
      BeginEpoch(who + " joined the group", /*planned=*/true);
    }
    for (const auto& [t, m] : lobby_) {
      expected_.insert(t);
      joining_[t] = m;
      last_seen_[t] = o_.clock->Monotonic();
    }
    lobby_.clear();
  }

  // Forms the epoch once every expected task has joined (the joining are always expected ones).
  void MaybeForm() {
    if (forming_) Admit();
    if (!forming_ || expected_.empty() || joining_.size() != expected_.size() ||
        !Divides(expected_.size())) {
      return;
    }
    replaced_.clear();
    for (const auto& [t, m] : joining_) {
      auto old = members_.find(t);
      // Taken over, the new host knows the survivors by their having joined before.
      if (old != members_.end() ? old->second.incarnation != m.incarnation
                                : taken_over_ && m.fresh) {
        replaced_.push_back(t);
      }
    }
    members_ = joining_;
    forming_ = false;
    planned_ = false;
    const absl::Time now = o_.clock->Monotonic();
    last_seen_.clear();
    for (const auto& [t, m] : members_) last_seen_[t] = now;
  }

  // Waits until `ready`, ending with DeadlineExceeded `margin` before the caller's deadline.
  template <typename Pred>
  grpc::Status WaitFor(grpc::ServerContext* ctx, std::unique_lock<std::mutex>& lock, Pred ready,
                       const std::string& what, absl::Duration margin = absl::ZeroDuration()) {
    const auto early = absl::ToChronoMilliseconds(margin);
    while (!ready()) {
      if (shutdown_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "coordinator stopping");
      if (ctx->IsCancelled() || std::chrono::system_clock::now() + early > ctx->deadline()) {
        return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "timed out waiting for " + what);
      }
      cv_.wait_for(lock, std::chrono::milliseconds(100));
    }
    return grpc::Status::OK;
  }

  // As WaitFor, ending with Aborted once the group has left `epoch`.
  template <typename Pred>
  grpc::Status WaitInEpoch(grpc::ServerContext* ctx, std::unique_lock<std::mutex>& lock,
                           int64_t epoch, Pred ready, const std::string& what) {
    grpc::Status s = WaitFor(
        ctx, lock, [&] { return epoch_ != epoch || ready(); }, what);
    if (s.ok() && epoch_ != epoch) {
      return grpc::Status(grpc::StatusCode::ABORTED,
                          absl::StrCat("the group's membership changed (epoch ", epoch, " -> ",
                                       epoch_, ": ", why_, ") while waiting for ", what));
    }
    return s;
  }

  const CoordinationServer::Options o_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool shutdown_ = false;
  bool active_;                        // hosting (else a standby)
  bool taken_over_ = false;            // from a lost host
  std::atomic<bool> in_group_{false};  // this task's process trained in a formed epoch
  int64_t epoch_ = 0;
  bool forming_ = true;
  bool planned_ = false;
  std::string why_;
  bool why_is_placeholder_ = false;  // why_ awaits the change a boundary rejoin is for
  std::set<int> expected_;           // the tasks of the epoch forming
  std::map<int, Member> joining_;    // of the epoch forming
  std::map<int, Member> members_;    // of the last epoch formed, by task
  std::map<int, Member> lobby_;      // tasks new to an elastic group, waiting to be admitted
  std::set<uint64_t> left_;          // incarnations that left the group
  std::string refused_;              // why the lobby waits ("" when it does not)
  uint64_t calls_ = 0;               // lobby calls so far
  std::vector<int> replaced_;        // by the last epoch formed
  std::map<int, absl::Time> last_seen_;
  std::map<std::string, std::set<int>> barriers_;
  std::map<std::string, std::string> kv_;
  std::string lost_;
  bool stop_ = false;
};

}  // namespace

struct CoordinationServer::Impl {
  std::unique_ptr<Service> service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};

CoordinationServer::CoordinationServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

CoordinationServer::~CoordinationServer() {
  impl_->service->Shutdown();
  impl_->server->Shutdown(GrpcDeadline(absl::Seconds(1)));
}

int CoordinationServer::port() const { return impl_->port; }

void CoordinationServer::Activate() { impl_->service->Activate(); }

void CoordinationServer::TakeOver(int64_t epoch, const std::vector<int>& tasks, std::string why) {
  impl_->service->TakeOver(epoch, tasks, std::move(why));
}

void CoordinationServer::SetInGroup() { impl_->service->SetInGroup(); }

absl::StatusOr<std::unique_ptr<CoordinationServer>> CoordinationServer::Start(
    const std::string& host, int port, Options options) {
  auto impl = std::make_unique<Impl>();
  impl->service = std::make_unique<Service>(std::move(options));
  grpc::ServerBuilder builder;
  // Peers authenticate with the job token on every call (see token.h).
  builder.AddListeningPort(absl::StrCat(host, ":", port), grpc::InsecureServerCredentials(),
                           &impl->port);
  builder.RegisterService(impl->service.get());
  impl->server = builder.BuildAndStart();
  if (impl->server == nullptr || impl->port == 0) {
    return absl::UnavailableError(absl::StrCat("coordination: cannot listen on ", host, ":", port));
  }
  return std::unique_ptr<CoordinationServer>(new CoordinationServer(std::move(impl)));
}

absl::StatusOr<ProbeAnswer> ProbeCoordination(const std::string& address, const std::string& token,
                                              absl::Duration timeout) {
  auto stub =
      pb::Coordination::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  AttachToken(&ctx, token);
  ctx.set_deadline(GrpcDeadline(timeout));
  pb::ProbeResponse resp;
  if (absl::Status s = FromGrpc(stub->Probe(&ctx, pb::ProbeRequest{}, &resp),
                                "probing the coordination service at " + address);
      !s.ok()) {
    return s;
  }
  return ProbeAnswer{.hosting = resp.hosting(),
                     .in_group = resp.in_group(),
                     .epoch = resp.epoch(),
                     .attempt = resp.attempt(),
                     .task_id = resp.task_id()};
}

namespace {

// A host's connections refused (nothing listens at its address), its name gone, or its server
// stopping: the process is gone, which a moment of it shows.
bool Refused(const absl::Status& s) {
  return absl::IsUnavailable(s) && (absl::StrContains(s.message(), "onnection refused") ||
                                    absl::StrContains(s.message(), "DNS resolution failed") ||
                                    absl::StrContains(s.message(), "coordinator stopping"));
}

constexpr absl::Duration kRefusedFor = absl::Milliseconds(300);

}  // namespace

struct CoordinationClient::Impl {
  std::string token;
  int rank;
  int world_size;
  std::string task;
  int attempt = 0;

  // The host's address and stub, which MoveTo replaces.
  mutable std::mutex mu;
  absl::Duration peer_timeout = absl::Seconds(30);  // silence that makes the host gone
  std::string address;
  std::shared_ptr<pb::Coordination::Stub> stub;
  // The host's health: since when calls to it fail (InfiniteFuture: it answers).
  absl::Time failing_since = absl::InfiniteFuture();
  int failures = 0;
  std::function<bool(const std::string&)> host_lost;
  std::mutex lost_mu;  // one host-lost decision at a time

  std::pair<std::string, std::shared_ptr<pb::Coordination::Stub>> Host() const {
    std::lock_guard<std::mutex> lock(mu);
    return {address, stub};
  }
  void Connect(const std::string& to) {
    std::lock_guard<std::mutex> lock(mu);
    address = to;
    stub = pb::Coordination::NewStub(grpc::CreateChannel(to, grpc::InsecureChannelCredentials()));
    failing_since = absl::InfiniteFuture();
    failures = 0;
  }
};

CoordinationClient::CoordinationClient(const std::string& address, std::string token, int rank,
                                       int world_size, std::string task, common::Clock* clock,
                                       int attempt)
    : impl_(std::make_unique<Impl>()),
      clock_(clock != nullptr ? clock : &common::SystemClock()),
      incarnation_(std::random_device{}() * 0x100000001ull ^
                   static_cast<uint64_t>(absl::ToUnixNanos(absl::Now()))) {
  impl_->token = std::move(token);
  impl_->rank = rank;
  impl_->world_size = world_size;
  impl_->task = std::move(task);
  impl_->attempt = attempt;
  impl_->Connect(address);
}

CoordinationClient::~CoordinationClient() { StopHeartbeats(); }

void CoordinationClient::StopHeartbeats() {
  if (heartbeat_.joinable()) {
    heartbeat_.request_stop();
    heartbeat_.join();
  }
}

void CoordinationClient::OnHostLost(std::function<bool(const std::string&)> lost) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->host_lost = std::move(lost);
}

void CoordinationClient::MoveTo(const std::string& address) { impl_->Connect(address); }

CoordinationClient::HostHealth CoordinationClient::NoteHost(const std::string& address,
                                                            const absl::Status& s) {
  std::function<bool(const std::string&)> handler;
  std::string why;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (address != impl_->address) return HostHealth::kMoved;  // another call moved already
    if (s.ok()) {
      impl_->failing_since = absl::InfiniteFuture();
      impl_->failures = 0;
      return HostHealth::kAnswers;
    }
    const absl::Time now = clock_->Monotonic();
    if (impl_->failing_since == absl::InfiniteFuture()) impl_->failing_since = now;
    ++impl_->failures;
    const absl::Duration failing = now - impl_->failing_since;
    if (absl::IsNotFound(s)) {
      why = absl::StrCat("a standby answers at its address (", s.message(), ")");
    } else if (Refused(s) && impl_->failures >= 2 && failing >= kRefusedFor) {
      why = absl::StrCat("its connections were refused for ", absl::FormatDuration(failing), " (",
                         s.message(), ")");
    } else if (failing >= impl_->peer_timeout) {
      why = absl::StrCat("it did not answer for ", absl::FormatDuration(failing), " (", s.message(),
                         ")");
    } else {
      return HostHealth::kFailing;
    }
    handler = impl_->host_lost;
  }
  if (absl::IsNotFound(s)) {
    // A standby that trained in the group is a survivor not hosting yet (it takes the service
    // over as soon as it finds the host gone): wait for it. Anything else there means the host
    // is gone: a fresh process (the host's replacement) or another attempt's.
    absl::StatusOr<ProbeAnswer> p = ProbeCoordination(address, impl_->token, absl::Seconds(1));
    if (p.ok() && p->in_group && p->attempt == impl_->attempt) return HostHealth::kFailing;
  }
  if (!handler) return HostHealth::kGone;
  std::lock_guard<std::mutex> one(impl_->lost_mu);
  if (impl_->Host().first != address) return HostHealth::kMoved;
  return handler(absl::StrCat("the coordination service's host at ", address, " is gone: ", why))
             ? HostHealth::kMoved
             : HostHealth::kGone;
}

absl::StatusOr<Membership> CoordinationClient::Join(absl::Duration timeout, bool planned) {
  grpc::ClientContext ctx;
  AttachToken(&ctx, impl_->token);
  ctx.set_deadline(GrpcDeadline(timeout));
  // The first join waits for the server to come up; a rejoin hears at once that it is gone.
  ctx.set_wait_for_ready(epoch_ < 0);
  pb::JoinRequest req;
  req.set_task_id(impl_->rank);
  req.set_world_size(impl_->world_size);
  req.set_task(impl_->task);
  req.set_incarnation(incarnation_);
  req.set_epoch_seen(epoch_);
  req.set_planned(planned);
  req.set_attempt(impl_->attempt);
  pb::JoinResponse resp;
  const auto [address, stub] = impl_->Host();
  absl::Status s =
      FromGrpc(stub->Join(&ctx, req, &resp), "joining the group at the coordinator " + address);
  // A rejoin tells the host's health (a first join waits for the host to come up; a join that
  // timed out says nothing: the epoch may just not have formed yet).
  if (epoch_ >= 0 && !absl::IsDeadlineExceeded(s)) {
    NoteHost(address, absl::IsUnavailable(s) || absl::IsNotFound(s) ? s : absl::OkStatus());
  }
  if (!s.ok()) return s;
  epoch_ = resp.epoch();
  return Membership{.epoch = resp.epoch(),
                    .replaced = {resp.replaced().begin(), resp.replaced().end()},
                    .why = resp.why(),
                    .rank = resp.rank(),
                    .tasks = {resp.task_ids().begin(), resp.task_ids().end()}};
}

absl::Status CoordinationClient::Leave() {
  StopHeartbeats();
  grpc::ClientContext ctx;
  AttachToken(&ctx, impl_->token);
  ctx.set_deadline(GrpcDeadline(absl::Seconds(10)));
  pb::LeaveRequest req;
  req.set_task_id(impl_->rank);
  req.set_incarnation(incarnation_);
  pb::LeaveResponse resp;
  return FromGrpc(impl_->Host().second->Leave(&ctx, req, &resp), "leaving the group");
}

absl::Status CoordinationClient::Barrier(const std::string& name, absl::Duration timeout) {
  grpc::ClientContext ctx;
  AttachToken(&ctx, impl_->token);
  ctx.set_deadline(GrpcDeadline(timeout));
  pb::BarrierRequest req;
  req.set_name(name);
  req.set_task_id(impl_->rank);
  req.set_epoch(epoch_);
  pb::BarrierResponse resp;
  return FromGrpc(impl_->Host().second->Barrier(&ctx, req, &resp), "barrier " + name);
}

absl::Status CoordinationClient::Set(const std::string& key, const std::string& value) {
  grpc::ClientContext ctx;
  AttachToken(&ctx, impl_->token);
  ctx.set_deadline(GrpcDeadline(absl::Seconds(30)));
  pb::SetKeyRequest req;
  req.set_key(absl::StrCat(epoch_.load(), "/", key));
  req.set_value(value);
  pb::SetKeyResponse resp;
  return FromGrpc(impl_->Host().second->SetKey(&ctx, req, &resp), "setting " + key);
}

absl::StatusOr<std::string> CoordinationClient::Get(const std::string& key,
                                                    absl::Duration timeout) {
  grpc::ClientContext ctx;
  AttachToken(&ctx, impl_->token);
  ctx.set_deadline(GrpcDeadline(timeout));
  pb::GetKeyRequest req;
  req.set_key(absl::StrCat(epoch_.load(), "/", key));
  req.set_epoch(epoch_);
  pb::GetKeyResponse resp;
  if (absl::Status s = FromGrpc(impl_->Host().second->GetKey(&ctx, req, &resp), "getting " + key);
      !s.ok()) {
    return s;
  }
  return resp.value();
}

void CoordinationClient::StartHeartbeats(
    absl::Duration interval, absl::Duration peer_timeout, std::function<void(absl::Status)> on_lost,
    std::function<void(int64_t, const std::string&, bool)> on_new_epoch) {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->peer_timeout = peer_timeout;
  }
  heartbeat_ = std::jthread([this, interval, peer_timeout, on_lost = std::move(on_lost),
                             on_new_epoch = std::move(on_new_epoch)](std::stop_token quit) {
    int64_t told = -1;  // the newest epoch on_new_epoch heard of
    absl::Time last_answer = clock_->Monotonic();
    while (!quit.stop_requested()) {
      grpc::ClientContext ctx;
      AttachToken(&ctx, impl_->token);
      ctx.set_deadline(GrpcDeadline(std::min(interval * 2, peer_timeout)));
      pb::HeartbeatRequest req;
      req.set_task_id(impl_->rank);
      req.set_stop_requested(stop_requested_);
      req.set_incarnation(incarnation_);
      pb::HeartbeatResponse resp;
      const auto [address, stub] = impl_->Host();
      grpc::Status s = stub->Heartbeat(&ctx, req, &resp);
      const absl::Time now = clock_->Monotonic();
      std::string lost;
      bool failing = false;
      if (s.ok()) {
        last_answer = now;
        NoteHost(address, absl::OkStatus());
        if (resp.stop()) stop_seen_ = true;
        lost = resp.lost();
        if (lost.empty() && on_new_epoch && resp.epoch() > epoch_ && resp.epoch() > told) {
          told = resp.epoch();
          on_new_epoch(resp.epoch(), resp.why(), resp.planned());
        }
      } else if (s.error_code() == grpc::StatusCode::UNAUTHENTICATED) {
        lost = "the coordinator refused this task's job token";
      } else if (HasHostLostHandler()) {
        // The service may move: a host found gone is followed to the next one.
        switch (NoteHost(address, FromGrpc(s, "heartbeat"))) {
          case HostHealth::kGone:
            lost = absl::StrCat("the coordinator at ", address, " is gone (", s.error_message(),
                                ") and no task could take its service over");
            break;
          case HostHealth::kMoved:
            last_answer = now;
            continue;
          default:
            failing = true;
        }
      } else if (now - last_answer > peer_timeout) {
        lost = absl::StrCat("the coordinator at ", address, " did not answer for ",
                            absl::FormatDuration(now - last_answer), " (", s.error_message(), ")");
      }
      if (!lost.empty()) {
        on_lost(PeerLostError(lost));
        return;
      }
      // A failing host is asked again soon: a gone one is followed within moments.
      clock_->SleepFor(failing ? std::min(interval, absl::Milliseconds(100)) : interval, quit);
    }
  });
}

bool CoordinationClient::HasHostLostHandler() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return static_cast<bool>(impl_->host_lost);
}

}  // namespace lockstep::trainer::comm
