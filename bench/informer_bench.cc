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

#include "common/testing/fake_clock.h"
#include "operator/kube/pod.h"
#include "operator/kube/testing/fake_transport.h"
#include "operator/runtime/informer.h"
#include "operator/runtime/work_queue.h"
#include "operator/trainingjob/observe.h"
#include "operator/trainingjob/reconciler.h"

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
  common::FakeClock clock;
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

// The TrainingJob controller's four caches for jobs of 4 replicas (a chief and 3 workers),
// decoded by the controller's own decoders from the objects `lockstep local` serves: per job,
// its JobObject, 4 ObservedPods, 4 Service headers and its token Secret's header.
std::string Uid(int job, int child) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%08x-49ba-49d0-8e8c-%012x", job, child);
  return buf;
}

json ChildMetadataJson(int job, const std::string& name, int child, const json& labels) {
  return {{"creationTimestamp", "2026-11-25T15:57:37Z"},
          {"generation", 1},
          {"labels", labels},
          {"name", name},
          {"namespace", "default"},
          {"ownerReferences",
           {{{"apiVersion", "lockstep.io/v1alpha1"},
             {"blockOwnerDeletion", true},
             {"controller", true},
             {"kind", "TrainingJob"},
             {"name", "job-" + std::to_string(job)},
             {"uid", Uid(job, 0)}}}},
          {"resourceVersion", std::to_string(job * 16 + child)},
          {"uid", Uid(job, child)}};
}

json ReplicaLabels(int job, const std::string& type, int index, bool pod) {
  json l = {{"lockstep.io/job-name", "job-" + std::to_string(job)},
            {"lockstep.io/replica-index", std::to_string(index)},
            {"lockstep.io/replica-type", type}};
  if (pod) {
    l["lockstep.io/attempt"] = "0";
    l["lockstep.io/incarnation"] = "0";
  }
  return l;
}

json JobPod(int job, const std::string& type, int index, int child) {
  std::string name = "job-" + std::to_string(job) + "-" + type + "-" + std::to_string(index);
  json p = json::parse(
      R"({"apiVersion":"v1","kind":"Pod","spec":{"containers":[{"args":["--model=mlp"],"env":[{"name":"LOCKSTEP_STRATEGY","value":"MultiWorkerMirrored"},{"name":"LOCKSTEP_JOB_TOKEN","valueFrom":{"secretKeyRef":{"key":"token","name":"job-token"}}}],"image":"lockstep/trainer:0.1.0","imagePullPolicy":"IfNotPresent","name":"lockstep","ports":[{"containerPort":2222,"name":"lockstep","protocol":"TCP"}],"resources":{},"terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File"}],"dnsPolicy":"ClusterFirst","nodeName":"lockstep-local","restartPolicy":"Never","schedulerName":"default-scheduler","serviceAccountName":"default"},"status":{"conditions":[{"status":"True","type":"PodScheduled"},{"status":"True","type":"Initialized"},{"status":"True","type":"ContainersReady"},{"status":"True","type":"Ready"}],"containerStatuses":[{"image":"lockstep/trainer:0.1.0","imageID":"","name":"lockstep","ready":true,"restartCount":0,"started":true,"state":{"running":{"startedAt":"2026-11-25T15:57:38Z"}}}],"hostIP":"127.0.0.1","phase":"Running","podIP":"10.0.0.2","podIPs":[{"ip":"10.0.0.2"}],"qosClass":"BestEffort","startTime":"2026-11-25T15:57:37Z"}})");
  p["metadata"] = ChildMetadataJson(job, name, child, ReplicaLabels(job, type, index, true));
  p["spec"]["hostname"] = name;
  return p;
}

json JobService(int job, const std::string& type, int index, int child) {
  std::string name = "job-" + std::to_string(job) + "-" + type + "-" + std::to_string(index);
  json s = json::parse(
      R"({"apiVersion":"v1","kind":"Service","spec":{"clusterIP":"None","ports":[{"name":"lockstep","port":2222,"protocol":"TCP","targetPort":2222}],"publishNotReadyAddresses":true,"sessionAffinity":"None","type":"ClusterIP"}})");
  s["metadata"] = ChildMetadataJson(job, name, child, ReplicaLabels(job, type, index, false));
  s["spec"]["selector"] = ReplicaLabels(job, type, index, false);
  return s;
}

json JobSecret(int job) {
  json s = json::parse(
      R"({"apiVersion":"v1","data":{"token":"NjhlMWI1ZDllN2YxMTRjNWE1NjMxOGNhODg4MDhhYzVmNDE5OTU5NTlkN2I2MDRkNmM4ZjI4MzRkYTFmYzFlMw=="},"kind":"Secret","type":"Opaque"})");
  s["metadata"] = ChildMetadataJson(job, "job-" + std::to_string(job) + "-token", 9,
                                    {{"lockstep.io/job-name", "job-" + std::to_string(job)}});
  return s;
}

json Job(int job) {
  json j = json::parse(
      R"({"apiVersion":"lockstep.io/v1alpha1","kind":"TrainingJob","spec":{"replicaSpecs":{"Chief":{"replicas":1,"restartPolicy":"ExitCode","template":{"spec":{"containers":[{"args":["--model=mlp"],"image":"lockstep/trainer:0.1.0","name":"lockstep"}]}}},"Worker":{"replicas":3,"restartPolicy":"ExitCode","template":{"spec":{"containers":[{"args":["--model=mlp"],"image":"lockstep/trainer:0.1.0","name":"lockstep"}]}}}},"runPolicy":{"backoffLimit":6,"cleanPodPolicy":"Running","pendingTimeoutSeconds":600,"suspend":false},"strategy":"MultiWorkerMirrored","successPolicy":"Default","tfConfig":{"clusterDomain":"","includeEvaluator":true}},"status":{"attempt":0,"conditions":[{"lastTransitionTime":"2026-11-25T15:57:37Z","message":"the job was accepted; creating pods and services","observedGeneration":1,"reason":"Created","status":"True","type":"Created"},{"lastTransitionTime":"2026-11-25T15:57:38Z","message":"4 training pods of attempt 0 are running","observedGeneration":1,"reason":"AllReplicasRunning","status":"True","type":"Running"}],"lastReconcileTime":"2026-11-25T15:57:38Z","observedGeneration":1,"ready":"4/4","replicaStatuses":{"Chief":{"active":1,"failed":0,"ready":1,"restarts":0,"selector":"lockstep.io/job-name=job-1234,lockstep.io/replica-type=chief","succeeded":0},"Worker":{"active":3,"failed":0,"ready":3,"restarts":0,"selector":"lockstep.io/job-name=job-1234,lockstep.io/replica-type=worker","succeeded":0}},"restartCount":0,"startTime":"2026-11-25T15:57:37Z","state":"Running"}})");
  j["metadata"] = {{"creationTimestamp", "2026-11-25T15:57:37Z"},
                   {"generation", 1},
                   {"name", "job-" + std::to_string(job)},
                   {"namespace", "default"},
                   {"resourceVersion", std::to_string(job * 16 + 15)},
                   {"uid", Uid(job, 0)}};
  json& counted = j["status"]["countedFailures"];
  for (int c = 1; c <= 4; ++c) counted[Uid(job, c)] = 0;
  return j;
}

template <typename T, typename Decode>
double CacheBytes(const std::vector<json>& objects, Decode decode, int jobs) {
  runtime::Cache<T> cache;
  size_t before = HeapInUse();
  for (const json& o : objects) cache.Upsert(std::make_shared<const T>(*decode(o)));
  double per_job = static_cast<double>(HeapInUse() - before) / jobs;
  if (cache.size() != objects.size()) per_job = -1;  // a decode or key clash lost objects
  return per_job;
}

void BM_ControllerCacheMemory(benchmark::State& state) {
  constexpr int kJobs = 2000;
  std::vector<json> jobs, pods, services, secrets;
  for (int j = 0; j < kJobs; ++j) {
    jobs.push_back(Job(j));
    secrets.push_back(JobSecret(j));
    for (int r = 0; r < 4; ++r) {
      std::string type = r == 0 ? "chief" : "worker";
      int index = r == 0 ? 0 : r - 1;
      pods.push_back(JobPod(j, type, index, 1 + r));
      services.push_back(JobService(j, type, index, 5 + r));
    }
  }
  double job = 0, pod = 0, service = 0, secret = 0;
  for (auto _ : state) {
    job = CacheBytes<trainingjob::JobObject>(jobs, trainingjob::DecodeJobObject, kJobs);
    pod = CacheBytes<trainingjob::ObservedPod>(pods, trainingjob::DecodeObservedPod, kJobs * 4);
    service =
        CacheBytes<trainingjob::ObjectHeader>(services, trainingjob::DecodeObjectHeader, kJobs * 4);
    secret = CacheBytes<trainingjob::ObjectHeader>(secrets, trainingjob::DecodeObjectHeader, kJobs);
  }
  state.counters["job_bytes"] = job;
  state.counters["pod_bytes"] = pod;
  state.counters["service_bytes"] = service;
  state.counters["secret_bytes"] = secret;
  // A job of 4 replicas, everything the controller caches for it.
  state.counters["bytes_per_job"] = job + 4 * pod + 4 * service + secret;
}
BENCHMARK(BM_ControllerCacheMemory)->Unit(benchmark::kMillisecond)->Iterations(1);

// What a reconcile pays to read its job from the cache: decoding the cached JSON, against the
// copy of an already decoded job that it made before the cache kept JSON.
void BM_ReconcileReadsCachedJob(benchmark::State& state) {
  const bool decode = state.range(0) == 1;
  absl::StatusOr<trainingjob::JobObject> cached = trainingjob::DecodeJobObject(Job(1234));
  const api::TrainingJob decoded = cached->Decode().job;
  for (auto _ : state) {
    if (decode) {
      trainingjob::JobObject::Decoded d = cached->Decode();
      benchmark::DoNotOptimize(d);
    } else {
      api::TrainingJob copy = decoded;
      benchmark::DoNotOptimize(copy);
    }
  }
  state.SetLabel(decode ? "decode the cached JSON" : "copy a decoded job");
}
BENCHMARK(BM_ReconcileReadsCachedJob)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace lockstep

BENCHMARK_MAIN();
