#include "trainer/comm/coordination.h"

#include <condition_variable>
#include <map>
#include <mutex>
#include <random>
#include <set>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "trainer/comm/token.h"
#include "trainer/proto/coordination.grpc.pb.h"

namespace lockstep::trainer::comm {
namespace {

namespace pb = lockstep::trainer::proto;

class Service final : public pb::Coordination::Service {
 public:
  explicit Service(CoordinationServer::Options o) : o_(std::move(o)) {}

  void Shutdown() {
    std::lock_guard<std::mutex> lock(mu_);
    shutdown_ = true;
    cv_.notify_all();
  }

  grpc::Status Join(grpc::ServerContext* ctx, const pb::JoinRequest* req,
                    pb::JoinResponse* resp) override {
    if (grpc::Status s = CheckToken(ctx, o_.token); !s.ok()) return s;
    if (req->world_size() != o_.world_size || req->rank() < 0 || req->rank() >= o_.world_size) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          absl::StrCat("rank ", req->rank(), " of ", req->world_size(),
                                       " does not fit this group of ", o_.world_size));
    }
    std::unique_lock<std::mutex> lock(mu_);
    const int rank = req->rank();
    if (!forming_ && req->epoch_seen() < epoch_ && members_.contains(rank) &&
        members_[rank].incarnation == req->incarnation()) {
      // A member of the formed epoch whose join's answer never arrived (its call ended first):
      // the epoch is its own already.
      return Answer(resp);
    }
    if (!forming_) {
      // The group is formed: this join begins the next epoch.
      const bool fresh =
          members_.contains(rank) && members_[rank].incarnation != req->incarnation();
      BeginEpoch(fresh ? absl::StrCat("rank ", rank, " (", req->task(), ") was replaced")
                       : absl::StrCat("rank ", rank, " (", req->task(), ") lost a peer"));
    }
    joining_[rank] = {.incarnation = req->incarnation(), .task = req->task()};
    last_seen_[rank] = absl::Now();
    if (static_cast<int>(joining_.size()) == o_.world_size) FormEpoch();
    cv_.notify_all();
    const int64_t epoch = epoch_;
    grpc::Status s = WaitFor(
        ctx, lock, [&] { return epoch_ > epoch || !forming_; }, "every rank to join");
    if (!s.ok()) return s;
    if (epoch_ != epoch) {
      return grpc::Status(grpc::StatusCode::ABORTED,
                          absl::StrCat("the group moved on to epoch ", epoch_, " while joining"));
    }
    if (members_[rank].incarnation != req->incarnation()) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          absl::StrCat("rank ", rank, " was taken over by a newer process"));
    }
    return Answer(resp);
  }

  grpc::Status Barrier(grpc::ServerContext* ctx, const pb::BarrierRequest* req,
                       pb::BarrierResponse*) override {
    if (grpc::Status s = CheckToken(ctx, o_.token); !s.ok()) return s;
    std::unique_lock<std::mutex> lock(mu_);
    const std::string name = absl::StrCat(req->epoch(), "/", req->name());
    barriers_[name].insert(req->rank());
    cv_.notify_all();
    return WaitInEpoch(
        ctx, lock, req->epoch(),
        [&] { return static_cast<int>(barriers_[name].size()) == o_.world_size; },
        "barrier " + req->name());
  }

  grpc::Status SetKey(grpc::ServerContext* ctx, const pb::SetKeyRequest* req,
                      pb::SetKeyResponse*) override {
    if (grpc::Status s = CheckToken(ctx, o_.token); !s.ok()) return s;
    std::lock_guard<std::mutex> lock(mu_);
    kv_[req->key()] = req->value();
    cv_.notify_all();
    return grpc::Status::OK;
  }

  grpc::Status GetKey(grpc::ServerContext* ctx, const pb::GetKeyRequest* req,
                      pb::GetKeyResponse* resp) override {
    if (grpc::Status s = CheckToken(ctx, o_.token); !s.ok()) return s;
    std::unique_lock<std::mutex> lock(mu_);
    grpc::Status s = WaitInEpoch(
        ctx, lock, req->epoch(), [&] { return kv_.contains(req->key()); }, "key " + req->key());
    if (s.ok()) resp->set_value(kv_[req->key()]);
    return s;
  }

  grpc::Status Heartbeat(grpc::ServerContext* ctx, const pb::HeartbeatRequest* req,
                         pb::HeartbeatResponse* resp) override {
    if (grpc::Status s = CheckToken(ctx, o_.token); !s.ok()) return s;
    std::lock_guard<std::mutex> lock(mu_);
    const absl::Time now = absl::Now();
    if (Superseded(req->rank(), req->incarnation())) {
      resp->set_lost(absl::StrCat("rank ", req->rank(), " was taken over by a newer process"));
      return grpc::Status::OK;
    }
    last_seen_[req->rank()] = now;
    if (req->stop_requested()) stop_ = true;
    // Silence counts only in a formed epoch: ranks still joining are starting up.
    if (lost_.empty() && !forming_) {
      for (const auto& [rank, seen] : last_seen_) {
        if (now - seen <= o_.peer_timeout) continue;
        std::string what =
            absl::StrCat("rank ", rank, " (", members_[rank].task, ") sent no heartbeat for ",
                         absl::FormatDuration(now - seen));
        if (o_.recover_in_place) {
          BeginEpoch(what);
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
    return grpc::Status::OK;
  }

 private:
  struct Member {
    uint64_t incarnation = 0;
    std::string task;
  };

  // The formed epoch, as Join answers it.
  grpc::Status Answer(pb::JoinResponse* resp) const {
    resp->set_epoch(epoch_);
    for (int r : replaced_) resp->add_replaced(r);
    resp->set_why(why_);
    return grpc::Status::OK;
  }

  // Whether another process took `rank` over after the one presenting `incarnation` (the
  // last to join a rank holds it).
  bool Superseded(int rank, uint64_t incarnation) const {
    if (auto j = joining_.find(rank); j != joining_.end())
      return j->second.incarnation != incarnation;
    auto m = members_.find(rank);
    return m != members_.end() && m->second.incarnation != incarnation;
  }

  void BeginEpoch(std::string why) {
    ++epoch_;
    forming_ = true;
    joining_.clear();
    why_ = std::move(why);
    barriers_.clear();  // an older epoch's are done with
  }

  void FormEpoch() {
    replaced_.clear();
    for (const auto& [rank, m] : joining_) {
      auto old = members_.find(rank);
      if (old != members_.end() && old->second.incarnation != m.incarnation) {
        replaced_.push_back(rank);
      }
    }
    members_ = joining_;
    forming_ = false;
    const absl::Time now = absl::Now();
    for (auto& [rank, seen] : last_seen_) seen = now;
  }

  template <typename Pred>
  grpc::Status WaitFor(grpc::ServerContext* ctx, std::unique_lock<std::mutex>& lock, Pred ready,
                       const std::string& what) {
    while (!ready()) {
      if (shutdown_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "coordinator stopping");
      if (ctx->IsCancelled() || std::chrono::system_clock::now() > ctx->deadline()) {
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
  int64_t epoch_ = 0;
  bool forming_ = true;
  std::string why_;
  std::map<int, Member> joining_;  // of the epoch forming
  std::map<int, Member> members_;  // of the last epoch formed
  std::vector<int> replaced_;      // by the last epoch formed
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

struct CoordinationClient::Impl {
  std::string address;
  std::string token;
  int rank;
  int world_size;
  std::string task;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<pb::Coordination::Stub> stub;
};

CoordinationClient::CoordinationClient(const std::string& address, std::string token, int rank,
                                       int world_size, std::string task)
    : impl_(std::make_unique<Impl>()),
      incarnation_(std::random_device{}() * 0x100000001ull ^
                   static_cast<uint64_t>(absl::ToUnixNanos(absl::Now()))) {
  impl_->address = address;
  impl_->token = std::move(token);
  impl_->rank = rank;
  impl_->world_size = world_size;
  impl_->task = std::move(task);
  impl_->channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  impl_->stub = pb::Coordination::NewStub(impl_->channel);
}

CoordinationClient::~CoordinationClient() {
  quit_ = true;
  if (heartbeat_.joinable()) heartbeat_.join();
}

absl::StatusOr<Membership> CoordinationClient::Join(absl::Duration timeout) {
  grpc::ClientContext ctx;
  AttachToken(&ctx, impl_->token);
  ctx.set_deadline(GrpcDeadline(timeout));
  ctx.set_wait_for_ready(true);  // the server may not be up yet
  pb::JoinRequest req;
  req.set_rank(impl_->rank);
  req.set_world_size(impl_->world_size);
  req.set_task(impl_->task);
  req.set_incarnation(incarnation_);
  req.set_epoch_seen(epoch_);
  pb::JoinResponse resp;
  if (absl::Status s = FromGrpc(impl_->stub->Join(&ctx, req, &resp),
                                "joining the group at the coordinator " + impl_->address);
      !s.ok()) {
    return s;
  }
  epoch_ = resp.epoch();
  return Membership{.epoch = resp.epoch(),
                    .replaced = {resp.replaced().begin(), resp.replaced().end()},
                    .why = resp.why()};
}

absl::Status CoordinationClient::Barrier(const std::string& name, absl::Duration timeout) {
  grpc::ClientContext ctx;
  AttachToken(&ctx, impl_->token);
  ctx.set_deadline(GrpcDeadline(timeout));
  pb::BarrierRequest req;
  req.set_name(name);
  req.set_rank(impl_->rank);
  req.set_epoch(epoch_);
  pb::BarrierResponse resp;
  return FromGrpc(impl_->stub->Barrier(&ctx, req, &resp), "barrier " + name);
}

absl::Status CoordinationClient::Set(const std::string& key, const std::string& value) {
  grpc::ClientContext ctx;
  AttachToken(&ctx, impl_->token);
  ctx.set_deadline(GrpcDeadline(absl::Seconds(30)));
  pb::SetKeyRequest req;
  req.set_key(absl::StrCat(epoch_.load(), "/", key));
  req.set_value(value);
  pb::SetKeyResponse resp;
  return FromGrpc(impl_->stub->SetKey(&ctx, req, &resp), "setting " + key);
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
  if (absl::Status s = FromGrpc(impl_->stub->GetKey(&ctx, req, &resp), "getting " + key); !s.ok()) {
    return s;
  }
  return resp.value();
}

void CoordinationClient::StartHeartbeats(
    absl::Duration interval, absl::Duration peer_timeout, std::function<void(absl::Status)> on_lost,
    std::function<void(int64_t, const std::string&)> on_new_epoch) {
  heartbeat_ = std::thread([this, interval, peer_timeout, on_lost = std::move(on_lost),
                            on_new_epoch = std::move(on_new_epoch)] {
    int64_t told = -1;  // the newest epoch on_new_epoch heard of
    absl::Time last_answer = absl::Now();
    while (!quit_) {
      grpc::ClientContext ctx;
      AttachToken(&ctx, impl_->token);
      ctx.set_deadline(GrpcDeadline(std::min(interval * 2, peer_timeout)));
      pb::HeartbeatRequest req;
      req.set_rank(impl_->rank);
      req.set_stop_requested(stop_requested_);
      req.set_incarnation(incarnation_);
      pb::HeartbeatResponse resp;
      grpc::Status s = impl_->stub->Heartbeat(&ctx, req, &resp);
      const absl::Time now = absl::Now();
      std::string lost;
      if (s.ok()) {
        last_answer = now;
        if (resp.stop()) stop_seen_ = true;
        lost = resp.lost();
        if (lost.empty() && on_new_epoch && resp.epoch() > epoch_ && resp.epoch() > told) {
          told = resp.epoch();
          on_new_epoch(resp.epoch(), resp.why());
        }
      } else if (s.error_code() == grpc::StatusCode::UNAUTHENTICATED) {
        lost = "the coordinator refused this task's job token";
      } else if (now - last_answer > peer_timeout) {
        lost = absl::StrCat("the coordinator at ", impl_->address, " did not answer for ",
                            absl::FormatDuration(now - last_answer), " (", s.error_message(), ")");
      }
      if (!lost.empty()) {
        on_lost(absl::UnavailableError("peer lost: " + lost));
        return;
      }
      for (absl::Time until = absl::Now() + interval; !quit_ && absl::Now() < until;) {
        absl::SleepFor(std::min(interval, absl::Milliseconds(50)));
      }
    }
  });
}

}  // namespace lockstep::trainer::comm
