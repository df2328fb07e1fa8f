#include "trainer/ps/ps_service.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "trainer/comm/token.h"
#include "trainer/proto/variables.grpc.pb.h"

namespace lockstep::trainer::ps {
namespace {

namespace pb = lockstep::trainer::proto;
using comm::AttachToken;
using comm::CheckToken;
using comm::ToGrpc;

void ToShards(const ShardValues& in, google::protobuf::RepeatedPtrField<pb::Shard>* out) {
  for (const auto& [id, v] : in) {
    pb::Shard* s = out->Add();
    s->set_id(id);
    s->mutable_values()->Add(v.begin(), v.end());
  }
}

ShardValues FromShards(const google::protobuf::RepeatedPtrField<pb::Shard>& in) {
  ShardValues out;
  // Through pointers: one memmove per shard, in every build type.
  for (const pb::Shard& s : in) {
    out[s.id()].assign(s.values().data(), s.values().data() + s.values().size());
  }
  return out;
}

class Service final : public pb::Variables::Service {
 public:
  explicit Service(std::string token) : token_(std::move(token)) {}
  VariableStore store;

  grpc::Status Init(grpc::ServerContext* ctx, const pb::InitRequest* req,
                    pb::InitResponse* resp) override {
    if (grpc::Status s = CheckToken(ctx, token_); !s.ok()) return s;
    StoreConfig c{.optimizer = req->optimizer(),
                  .learning_rate = req->learning_rate(),
                  .momentum = req->momentum(),
                  .lr_schedule = req->lr_schedule(),
                  .keras_optimizer = req->keras_optimizer(),
                  .total_steps = req->total_steps(),
                  .sync = req->sync(),
                  .replicas_to_aggregate = req->replicas_to_aggregate()};
    absl::StatusOr<bool> already =
        store.Init(FromShards(req->shards()), FromShards(req->optimizer_state()), c, req->step());
    if (!already.ok()) return ToGrpc(already.status());
    resp->set_already(*already);
    resp->set_step(store.version());
    return grpc::Status::OK;
  }

  grpc::Status Pull(grpc::ServerContext* ctx, const pb::PullRequest* req,
                    pb::PullResponse* resp) override {
    if (grpc::Status s = CheckToken(ctx, token_); !s.ok()) return s;
    std::vector<int> ids(req->ids().begin(), req->ids().end());
    const auto left = ctx->deadline() - std::chrono::system_clock::now();
    absl::Duration timeout = std::min(absl::FromChrono(left), absl::Minutes(10));
    int64_t version = 0;
    absl::StatusOr<ShardValues> v = store.Pull(ids, req->min_version(), timeout, &version);
    if (!v.ok()) return ToGrpc(v.status());
    ToShards(*v, resp->mutable_shards());
    resp->set_version(version);
    return grpc::Status::OK;
  }

  grpc::Status Push(grpc::ServerContext* ctx, const pb::PushRequest* req,
                    pb::PushResponse* resp) override {
    if (grpc::Status s = CheckToken(ctx, token_); !s.ok()) return s;
    absl::StatusOr<PushResult> r = store.Push(FromShards(req->grads()), req->version());
    if (!r.ok()) return ToGrpc(r.status());
    resp->set_step(r->version);
    resp->set_dropped(r->dropped ? 1 : 0);
    return grpc::Status::OK;
  }

  grpc::Status Save(grpc::ServerContext* ctx, const pb::SaveRequest*,
                    pb::SaveResponse* resp) override {
    if (grpc::Status s = CheckToken(ctx, token_); !s.ok()) return s;
    ShardValues values, state;
    int64_t version = 0;
    if (absl::Status s = store.Save(&values, &state, &version); !s.ok()) return ToGrpc(s);
    ToShards(values, resp->mutable_shards());
    ToShards(state, resp->mutable_optimizer_state());
    resp->set_step(version);
    return grpc::Status::OK;
  }

 private:
  const std::string token_;
};

}  // namespace

struct PsServer::Impl {
  std::unique_ptr<Service> service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};

PsServer::PsServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PsServer::~PsServer() {
  impl_->service->store.Close();
  impl_->server->Shutdown(comm::GrpcDeadline(absl::Seconds(1)));
}
int PsServer::port() const { return impl_->port; }
VariableStore& PsServer::store() { return impl_->service->store; }

absl::StatusOr<std::unique_ptr<PsServer>> PsServer::Start(const std::string& host, int port,
                                                          std::string token) {
  auto impl = std::make_unique<Impl>();
  impl->service = std::make_unique<Service>(std::move(token));
  grpc::ServerBuilder builder;
  builder.SetMaxReceiveMessageSize(256 << 20);
  builder.SetMaxSendMessageSize(256 << 20);
  builder.AddListeningPort(absl::StrCat(host, ":", port), grpc::InsecureServerCredentials(),
                           &impl->port);
  builder.RegisterService(impl->service.get());
  impl->server = builder.BuildAndStart();
  if (impl->server == nullptr || impl->port == 0) {
    return absl::UnavailableError(
        absl::StrCat("parameter server: cannot listen on ", host, ":", port));
  }
  return std::unique_ptr<PsServer>(new PsServer(std::move(impl)));
}

struct PsClient::Impl {
  std::vector<std::string> addresses;
  std::string token;
  std::vector<std::unique_ptr<pb::Variables::Stub>> stubs;
};

PsClient::PsClient(const std::vector<std::string>& addresses, std::string token)
    : impl_(std::make_unique<Impl>()) {
  impl_->addresses = addresses;
  impl_->token = std::move(token);
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(256 << 20);
  args.SetMaxSendMessageSize(256 << 20);
  for (const std::string& a : addresses) {
    impl_->stubs.push_back(pb::Variables::NewStub(
        grpc::CreateCustomChannel(a, grpc::InsecureChannelCredentials(), args)));
  }
}

PsClient::~PsClient() = default;
int PsClient::tasks() const { return static_cast<int>(impl_->stubs.size()); }

absl::StatusOr<std::pair<bool, int64_t>> PsClient::Init(int task, const ShardValues& values,
                                                        const ShardValues& state,
                                                        const StoreConfig& c, int64_t version) {
  grpc::ClientContext ctx;
  AttachToken(&ctx, impl_->token);
  ctx.set_deadline(comm::GrpcDeadline(absl::Seconds(60)));
  ctx.set_wait_for_ready(true);
  pb::InitRequest req;
  ToShards(values, req.mutable_shards());
  ToShards(state, req.mutable_optimizer_state());
  req.set_optimizer(c.optimizer);
  req.set_learning_rate(c.learning_rate);
  req.set_momentum(c.momentum);
  req.set_lr_schedule(c.lr_schedule);
  req.set_keras_optimizer(c.keras_optimizer);
  req.set_total_steps(c.total_steps);
  req.set_sync(c.sync);
  req.set_replicas_to_aggregate(c.replicas_to_aggregate);
  req.set_step(version);
  pb::InitResponse resp;
  if (absl::Status s = comm::FromGrpc(impl_->stubs[task]->Init(&ctx, req, &resp),
                                      "initializing ps " + impl_->addresses[task]);
      !s.ok()) {
    return s;
  }
  return std::make_pair(resp.already(), resp.step());
}

absl::StatusOr<ShardValues> PsClient::Pull(int task, const std::vector<int>& ids,
                                           int64_t min_version, absl::Duration timeout,
                                           int64_t* version) {
  grpc::ClientContext ctx;
  AttachToken(&ctx, impl_->token);
  ctx.set_deadline(comm::GrpcDeadline(timeout));
  ctx.set_wait_for_ready(true);
  pb::PullRequest req;
  req.mutable_ids()->Add(ids.begin(), ids.end());
  req.set_min_version(min_version);
  pb::PullResponse resp;
  if (absl::Status s = comm::FromGrpc(impl_->stubs[task]->Pull(&ctx, req, &resp),
                                      "pulling from ps " + impl_->addresses[task]);
      !s.ok()) {
    return s;
  }
  *version = resp.version();
  return FromShards(resp.shards());
}

absl::StatusOr<PushResult> PsClient::Push(int task, const ShardValues& grads, int64_t version,
                                          int worker) {
  grpc::ClientContext ctx;
  AttachToken(&ctx, impl_->token);
  ctx.set_deadline(comm::GrpcDeadline(absl::Seconds(60)));
  pb::PushRequest req;
  ToShards(grads, req.mutable_grads());
  req.set_version(version);
  req.set_worker(worker);
  pb::PushResponse resp;
  if (absl::Status s = comm::FromGrpc(impl_->stubs[task]->Push(&ctx, req, &resp),
                                      "pushing to ps " + impl_->addresses[task]);
      !s.ok()) {
    return s;
  }
  return PushResult{resp.step(), resp.dropped() != 0};
}

absl::Status PsClient::Save(int task, ShardValues* values, ShardValues* state, int64_t* version) {
  grpc::ClientContext ctx;
  AttachToken(&ctx, impl_->token);
  ctx.set_deadline(comm::GrpcDeadline(absl::Seconds(60)));
  pb::SaveRequest req;
  pb::SaveResponse resp;
  if (absl::Status s = comm::FromGrpc(impl_->stubs[task]->Save(&ctx, req, &resp),
                                      "saving ps " + impl_->addresses[task]);
      !s.ok()) {
    return s;
  }
  for (auto& [id, v] : FromShards(resp.shards())) (*values)[id] = std::move(v);
  for (auto& [id, v] : FromShards(resp.optimizer_state())) (*state)[id] = std::move(v);
  *version = resp.step();
  return absl::OkStatus();
}

}  // namespace lockstep::trainer::ps
