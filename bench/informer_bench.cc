// Informer ingest and cache memory.
//
// Ingest: 10,000 watch events for 1,000 realistic trainer pods (each pod added, then modified
// nine times), read line by line from a streamed body, decoded and stored in the cache with
// its indexes, and a key enqueued per event, as a controller would. One thread.
//
// Memory: heap bytes held by the cache per pod (mallinfo2 before and after), against the
// pod's JSON size; beside it, the typed pods alone (no cache maps or indexes), and the same
// pods held as parsed nlohmann::json, which is what a cache of whole objects would cost.
#include <benchmark/benchmark.h>
#include <malloc.h>

#include <nlohmann/json.hpp>

#include "operator/kube/pod.h"
#include "operator/kube/testing/fake_clock.h"
#include "operator/kube/testing/fake_transport.h"
#include "operator/runtime/informer.h"
#include "operator/runtime/work_queue.h"

namespace lockstep {
namespace {

using nlohmann::json;

// A pod as the API server returns it for a worker of a TrainingJob.
json TrainerPod(int i, int generation) {
  std::string name = "fmnist-mwm-worker-" + std::to_string(i);
  json env = json::array();
  env.push_back(
      {{"name", "TF_CONFIG"},
       {"value",
        R"({"cluster":{"chief":["fmnist-mwm-chief-0.fmnist-mwm:2222"],"worker":["fmnist-mwm-worker-0.fmnist-mwm:2222","fmnist-mwm-worker-1.fmnist-mwm:2222"]},"task":{"type":"worker","index":)" +
            std::to_string(i) + "}}"}});
  for (const char* k : {"LOCKSTEP_JOB_NAME", "LOCKSTEP_REPLICA_TYPE", "LOCKSTEP_REPLICA_INDEX",
                        "LOCKSTEP_ATTEMPT", "LOCKSTEP_STRATEGY"}) {
    env.push_back({{"name", k}, {"value", "value-" + std::to_string(i)}});
  }
  env.push_back(
      {{"name", "LOCKSTEP_JOB_TOKEN"},
       {"valueFrom", {{"secretKeyRef", {{"name", "fmnist-mwm-token"}, {"key", "token"}}}}}});
  return {
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata",
       {{"name", name},
        {"namespace", "ml-team"},
        {"uid", "6f1c2d3e-4b5a-4c6d-8e9f-" + std::to_string(100000000000 + i)},
        {"resourceVersion", std::to_string(1000 + i * 10 + generation)},
        {"creationTimestamp", "2026-11-21T10:00:00Z"},
        {"labels",
         {{"lockstep.io/job-name", "fmnist-mwm"},
          {"lockstep.io/replica-type", "worker"},
          {"lockstep.io/replica-index", std::to_string(i)},
          {"lockstep.io/attempt", "0"}}},
        {"annotations", {{"lockstep.io/strategy", "MultiWorkerMirrored"}}},
        {"ownerReferences",
         {{{"apiVersion", "lockstep.io/v1alpha1"},
           {"kind", "TrainingJob"},
           {"name", "fmnist-mwm"},
           {"uid", "0a1b2c3d-0000-4000-8000-000000000001"},
           {"controller", true},
           {"blockOwnerDeletion", true}}}},
        {"managedFields",
         {{{"manager", "lockstep-operator"},
           {"operation", "Update"},
           {"apiVersion", "v1"},
           {"time", "2026-11-21T10:00:00Z"},
           {"fieldsType", "FieldsV1"},
           {"fieldsV1",
            {{"f:metadata",
              {{"f:labels", {{".", json::object()}, {"f:lockstep.io/job-name", json::object()}}}}},
             {"f:spec", {{"f:containers", {{"k:{\"name\":\"lockstep\"}", json::object()}}}}}}}},
          {{"manager", "kubelet"},
           {"operation", "Update"},
           {"apiVersion", "v1"},
           {"time", "2026-11-21T10:00:05Z"},
           {"fieldsType", "FieldsV1"},
           {"subresource", "status"},
           {"fieldsV1",
            {{"f:status", {{"f:conditions", json::object()}, {"f:phase", json::object()}}}}}}}}}},
      {"spec",
       {{"restartPolicy", "Never"},
        {"hostname", name},
        {"subdomain", "fmnist-mwm"},
        {"nodeName", "gpu-node-" + std::to_string(i % 16)},
        {"serviceAccountName", "default"},
        {"securityContext", {{"runAsNonRoot", true}, {"runAsUser", 1000}}},
        {"containers",
         {{{"name", "lockstep"},
           {"image", "lockstep/trainer:0.1.0"},
           {"args",
            {"--model=mlp", "--dataset=fashion-mnist", "--epochs=10",
             "--checkpoint-dir=/checkpoints"}},
           {"env", env},
           {"ports",
            {{{"name", "lockstep"}, {"containerPort", 2222}, {"protocol", "TCP"}},
             {{"name", "lockstep-metrics"}, {"containerPort", 9464}, {"protocol", "TCP"}}}},
           {"resources",
            {{"limits", {{"cpu", "4"}, {"memory", "16Gi"}, {"nvidia.com/gpu", "1"}}},
             {"requests", {{"cpu", "4"}, {"memory", "16Gi"}, {"nvidia.com/gpu", "1"}}}}},
           {"volumeMounts",
            {{{"name", "checkpoints"}, {"mountPath", "/checkpoints"}},
             {{"name", "kube-api-access"},
              {"mountPath", "/var/run/secrets/kubernetes.io/serviceaccount"},
              {"readOnly", true}}}},
           {"terminationMessagePath", "/dev/termination-log"},
           {"terminationMessagePolicy", "File"},
           {"imagePullPolicy", "IfNotPresent"}}}},
        {"volumes",
         {{{"name", "checkpoints"}, {"persistentVolumeClaim", {{"claimName", "fmnist-ckpt"}}}},
          {{"name", "kube-api-access"}, {"projected", {{"defaultMode", 420}}}}}},
        {"tolerations",
         {{{"key", "nvidia.com/gpu"}, {"operator", "Exists"}, {"effect", "NoSchedule"}}}}}},
      {"status",
       {{"phase", generation == 0 ? "Pending" : "Running"},
        {"podIP", "10.244." + std::to_string(i % 250) + ".17"},
        {"hostIP", "192.168.1." + std::to_string(i % 250)},
        {"startTime", "2026-11-21T10:00:01Z"},
        {"qosClass", "Guaranteed"},
        {"conditions",
         {{{"type", "Initialized"},
           {"status", "True"},
           {"lastTransitionTime", "2026-11-21T10:00:01Z"}},
          {{"type", "Ready"}, {"status", "True"}, {"lastTransitionTime", "2026-11-21T10:00:09Z"}},
          {{"type", "ContainersReady"},
           {"status", "True"},
           {"lastTransitionTime", "2026-11-21T10:00:09Z"}},
          {{"type", "PodScheduled"},
           {"status", "True"},
           {"lastTransitionTime", "2026-11-21T10:00:00Z"}}}},
        {"containerStatuses",
         {{{"name", "lockstep"},
           {"ready", true},
           {"restartCount", generation % 3},
           {"image", "lockstep/trainer:0.1.0"},
           {"imageID",
            "docker-pullable://lockstep/"
            "trainer@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"},
           {"containerID",
            "containerd://abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789"},
           {"started", true},
           {"state", {{"running", {{"startedAt", "2026-11-21T10:00:08Z"}}}}}}}}}}};
}

constexpr int kPods = 1000;
constexpr int kEventsPerPod = 10;

std::string WatchBody() {
  std::string body;
  for (int g = 0; g < kEventsPerPod; ++g) {
    for (int i = 0; i < kPods; ++i) {
      body += json{{"type", g == 0 ? "ADDED" : "MODIFIED"}, {"object", TrainerPod(i, g)}}.dump();
      body += '\n';
    }
  }
  return body;
}

void BM_InformerIngest(benchmark::State& state) {
  const std::string body = WatchBody();
  auto transport = std::make_shared<kube::FakeTransport>();
  kube::RestClient client(transport);
  kube::FakeClock clock;
  int64_t events = 0;
  for (auto _ : state) {
    state.PauseTiming();
    runtime::WorkQueue queue(&clock);
    runtime::Informer<kube::Pod> informer(&client, kube::resources::kPods, kube::DecodePod, {},
                                          &clock);
    auto enqueue = [&queue](const auto& pod) { queue.Add(runtime::KeyOf(pod->metadata)); };
    informer.AddHandlers(
        {.on_add = enqueue, .on_update = [&](const auto&, const auto& pod) { enqueue(pod); }});
    std::shared_ptr<kube::FakeBody> stream = transport->QueueStream();
    for (size_t at = 0; at < body.size(); at += 64 << 10) stream->Push(body.substr(at, 64 << 10));
    stream->End();
    auto watch = client.Watch(kube::resources::kPods, "ml-team");
    state.ResumeTiming();
    while (true) {
      absl::StatusOr<std::optional<kube::WatchEvent>> e = (*watch)->Next();
      if (!e.ok() || !e->has_value()) break;
      informer.Apply(std::move(**e));
      ++events;
    }
    state.PauseTiming();
    if (informer.cache().size() != kPods) state.SkipWithError("cache lost pods");
    state.ResumeTiming();
  }
  state.counters["events_per_s"] =
      benchmark::Counter(static_cast<double>(events), benchmark::Counter::kIsRate);
  state.counters["json_bytes_per_event"] =
      static_cast<double>(body.size()) / (kPods * kEventsPerPod);
}
BENCHMARK(BM_InformerIngest)->Unit(benchmark::kMillisecond)->UseRealTime();

size_t HeapInUse() { return mallinfo2().uordblks; }

void BM_CacheMemory(benchmark::State& state) {
  constexpr int kObjects = 10000;
  std::vector<json> pods;
  size_t json_bytes = 0;
  for (int i = 0; i < kObjects; ++i) {
    pods.push_back(TrainerPod(i, 1));
    json_bytes += pods.back().dump().size();
  }
  double typed = 0, objects_only = 0, whole = 0;
  for (auto _ : state) {
    {
      runtime::Cache<kube::Pod> cache;
      size_t before = HeapInUse();
      for (const json& p : pods) {
        cache.Upsert(std::make_shared<const kube::Pod>(*kube::DecodePod(p)));
      }
      typed = static_cast<double>(HeapInUse() - before) / kObjects;
    }
    {
      size_t before = HeapInUse();
      std::vector<std::shared_ptr<const kube::Pod>> objects;
      for (const json& p : pods)
        objects.push_back(std::make_shared<const kube::Pod>(*kube::DecodePod(p)));
      objects_only = static_cast<double>(HeapInUse() - before) / kObjects;
    }
    {
      size_t before = HeapInUse();
      std::vector<std::shared_ptr<const json>> objects;
      for (const json& p : pods) objects.push_back(std::make_shared<const json>(p));
      whole = static_cast<double>(HeapInUse() - before) / kObjects;
    }
  }
  double per_json = static_cast<double>(json_bytes) / kObjects;
  state.counters["json_bytes_per_pod"] = per_json;
  state.counters["cache_bytes_per_pod"] = typed;
  state.counters["cache_over_json"] = typed / per_json;
  state.counters["pod_bytes_without_indexes"] = objects_only;
  state.counters["whole_json_bytes_per_pod"] = whole;
  state.counters["whole_json_over_json"] = whole / per_json;
}
BENCHMARK(BM_CacheMemory)->Unit(benchmark::kMillisecond)->Iterations(1);

}  // namespace
}  // namespace lockstep

BENCHMARK_MAIN();
