// The CRD is checked the way a Kubernetes API server would check it (structural schema rules),
// its defaults are compared with the C++ defaults, and every example must pass it.

#include <functional>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "operator/api/cel_rules.h"
#include "operator/api/crd_schema.h"
#include "operator/api/test_util.h"
#include "operator/api/trainingjob_json.h"
#include "operator/api/validation.h"

namespace lockstep::api {
namespace {

using ::nlohmann::json;
using ::testing::HasSubstr;
using testing::MinimalJob;
using testing::Replica;

json Crd() {
  auto docs = ReadManifestFile(testing::SourcePath("crds/lockstep.io_trainingjobs.yaml"));
  EXPECT_TRUE(docs.ok()) << docs.status();
  EXPECT_EQ(docs->size(), 1u);
  return docs->front();
}

const json& Version(const json& crd) { return crd["spec"]["versions"][0]; }
const json& Schema(const json& crd) { return Version(crd)["schema"]["openAPIV3Schema"]; }

std::vector<std::string> Render(const FieldErrors& errors) {
  std::vector<std::string> out;
  for (const FieldError& e : errors) out.push_back(e.ToString());
  return out;
}

TEST(CrdTest, IsAStructuralSchema) {
  json crd = Crd();
  EXPECT_THAT(Render(CheckStructuralSchema(Schema(crd), FieldPath("openAPIV3Schema"))),
              ::testing::IsEmpty());
}

TEST(CrdTest, NamesSubresourcesAndColumns) {
  json crd = Crd();
  EXPECT_EQ(crd["apiVersion"], "apiextensions.k8s.io/v1");
  EXPECT_EQ(crd["metadata"]["name"], "trainingjobs.lockstep.io");
  EXPECT_EQ(crd["spec"]["group"], kGroup);
  EXPECT_EQ(crd["spec"]["scope"], "Namespaced");
  EXPECT_EQ(crd["spec"]["names"]["kind"], kKind);
  EXPECT_EQ(crd["spec"]["names"]["plural"], kPlural);
  EXPECT_EQ(crd["spec"]["names"]["shortNames"], json::array({"tj"}));
  const json& v = Version(crd);
  EXPECT_EQ(v["name"], kVersion);
  EXPECT_TRUE(v["served"].get<bool>());
  EXPECT_TRUE(v["storage"].get<bool>());
  EXPECT_TRUE(v["subresources"]["status"].is_object());
  EXPECT_EQ(v["subresources"]["scale"]["specReplicasPath"], ".spec.replicaSpecs.Worker.replicas");
  EXPECT_EQ(v["subresources"]["scale"]["statusReplicasPath"],
            ".status.replicaStatuses.Worker.active");
  std::vector<std::string> columns;
  for (const json& c : v["additionalPrinterColumns"]) columns.push_back(c["name"]);
  EXPECT_EQ(columns,
            (std::vector<std::string>{"State", "Ready", "Restarts", "Progress", "Result", "Age"}));
}

// The printer columns and the scale subresource point at fields the status really has.
TEST(CrdTest, ColumnsAndScalePointAtEncodedFields) {
  TrainingJob job;
  ASSERT_TRUE(CheckTrainingJob(MinimalJob(), &job).empty());
  TrainingJobStatus status;
  status.state = JobState::kRunning;
  status.ready = "3/3";
  status.replica_statuses[ReplicaType::kWorker] = {2, 2, 0, 0, 0, "lockstep.io/job-name=job"};
  status.progress = Progress{.step = 1, .summary = "1%"};
  status.evaluation = Evaluation{.loss = 0.3, .summary = "loss 0.3000"};
  job.status = status;
  job.metadata.creation_timestamp = absl::FromUnixSeconds(1);
  json encoded = EncodeTrainingJob(job);
  json crd = Crd();
  std::vector<std::string> paths;
  for (const json& c : Version(crd)["additionalPrinterColumns"]) paths.push_back(c["jsonPath"]);
  const json& scale = Version(crd)["subresources"]["scale"];
  for (const char* key : {"specReplicasPath", "statusReplicasPath", "labelSelectorPath"}) {
    paths.push_back(scale[key]);
  }
  for (const std::string& path : paths) {
    std::string pointer = path;
    std::replace(pointer.begin(), pointer.end(), '.', '/');
    EXPECT_TRUE(encoded.contains(json::json_pointer(pointer))) << path;
  }
}

TEST(CrdTest, ChiefAndEvaluatorAreLimitedToOneReplica) {
  json crd = Crd();
  const json& specs = Schema(crd)["properties"]["spec"]["properties"]["replicaSpecs"]["properties"];
  EXPECT_EQ(specs["Chief"]["properties"]["replicas"]["maximum"], 1);
  EXPECT_EQ(specs["Evaluator"]["properties"]["replicas"]["maximum"], 1);
  EXPECT_FALSE(specs["Worker"]["properties"]["replicas"].contains("maximum"));
  json j = MinimalJob();
  j["spec"]["replicaSpecs"]["Chief"]["replicas"] = 2;
  EXPECT_THAT(Render(ValidateAgainstSchema(Schema(crd), j, FieldPath())),
              ::testing::Contains(HasSubstr("spec.replicaSpecs.Chief.replicas: Invalid value: 2: "
                                            "must be less than or equal to 1")));
}

// The CRD's CEL rules each have a native counterpart (lockstep local evaluates them through
// it), and the elastic bounds refuse a Worker count outside runPolicy.elastic on any write,
// /scale included, while a job without elastic bounds is not constrained.
TEST(CrdTest, CelRulesHaveNativeCounterpartsAndTheElasticBoundsHold) {
  json crd = Crd();
  std::vector<std::string> rules;
  std::function<void(const json&)> walk = [&](const json& node) {
    if (node.is_object()) {
      if (auto it = node.find("x-kubernetes-validations"); it != node.end()) {
        for (const json& r : *it) rules.push_back(r["rule"]);
      }
      for (const auto& [k, v] : node.items()) walk(v);
    } else if (node.is_array()) {
      for (const json& v : node) walk(v);
    }
  };
  walk(Schema(crd));
  ASSERT_EQ(rules.size(), 2u);
  EXPECT_EQ(rules[0], kElasticBoundsRule);
  EXPECT_EQ(rules[1], kFixedReplicasRule);
  for (const std::string& r : rules) {
    EXPECT_TRUE(EvaluateKnownRule(r, json::object()).has_value()) << r;
  }

  json j = MinimalJob();
  ApplySchemaDefaults(Schema(crd), &j);
  j["spec"]["replicaSpecs"]["Worker"]["replicas"] = 9;
  EXPECT_THAT(Render(ValidateAgainstSchema(Schema(crd), j, FieldPath())), ::testing::IsEmpty());
  j["spec"]["runPolicy"]["elastic"] = {{"maxReplicas", 4}};
  ApplySchemaDefaults(Schema(crd), &j);
  EXPECT_EQ(j["spec"]["runPolicy"]["elastic"]["minReplicas"], 1);
  EXPECT_THAT(Render(ValidateAgainstSchema(Schema(crd), j, FieldPath())),
              ::testing::Contains(HasSubstr("spec: Invalid value: \"object\": replicaSpecs.Worker."
                                            "replicas must lie within runPolicy.elastic")));
  for (int n : {1, 4}) {
    j["spec"]["replicaSpecs"]["Worker"]["replicas"] = n;
    EXPECT_THAT(Render(ValidateAgainstSchema(Schema(crd), j, FieldPath())), ::testing::IsEmpty())
        << n;
  }
  j["spec"]["replicaSpecs"]["Worker"]["replicas"] = 0;
  EXPECT_FALSE(Render(ValidateAgainstSchema(Schema(crd), j, FieldPath())).empty());
}

// Issue 42's finding: kubectl scale on a job that is not elastic answered "scaled" and the job
// then failed. The transition rule refuses a changed replica count on an update (not on a
// create), except an elastic job's Worker count, and any count while the job was and stays
// suspended.
TEST(CrdTest, ReplicaCountsAreFixedOnUpdateUnlessElasticOrSuspended) {
  json crd = Crd();
  json old = MinimalJob();
  ApplySchemaDefaults(Schema(crd), &old);
  json j = old;
  j["spec"]["replicaSpecs"]["Worker"]["replicas"] = 3;
  EXPECT_THAT(Render(ValidateAgainstSchema(Schema(crd), j, FieldPath())), ::testing::IsEmpty());
  EXPECT_THAT(Render(ValidateAgainstSchema(Schema(crd), j, FieldPath(), &old)),
              ::testing::Contains(HasSubstr(std::string(kFixedReplicasMessage))));
  EXPECT_THAT(Render(ValidateAgainstSchema(Schema(crd), old, FieldPath(), &old)),
              ::testing::IsEmpty());
  json suspended = old;
  suspended["spec"]["runPolicy"]["suspend"] = true;
  json resized = suspended;
  resized["spec"]["replicaSpecs"]["Worker"]["replicas"] = 3;
  EXPECT_THAT(Render(ValidateAgainstSchema(Schema(crd), resized, FieldPath(), &suspended)),
              ::testing::IsEmpty());
  EXPECT_THAT(Render(ValidateAgainstSchema(Schema(crd), resized, FieldPath(), &old)),
              ::testing::Not(::testing::IsEmpty()));  // suspending and resizing at once
  json elastic = old;
  elastic["spec"]["runPolicy"]["elastic"] = {{"minReplicas", 1}, {"maxReplicas", 4}};
  json grown = elastic;
  grown["spec"]["replicaSpecs"]["Worker"]["replicas"] = 3;
  EXPECT_THAT(Render(ValidateAgainstSchema(Schema(crd), grown, FieldPath(), &elastic)),
              ::testing::IsEmpty());
}

// The enums in the CRD are exactly the C++ enum tables.
TEST(CrdTest, EnumsMatchTheCppTables) {
  json crd = Crd();
  const json& spec = Schema(crd)["properties"]["spec"]["properties"];
  auto names = [](auto table) {
    json out = json::array();
    for (const auto& e : table) out.push_back(std::string(e.name));
    return out;
  };
  EXPECT_EQ(spec["strategy"]["enum"], names(kStrategyNames));
  EXPECT_EQ(spec["replicaSpecs"]["properties"]["Worker"]["properties"]["restartPolicy"]["enum"],
            names(kRestartPolicyNames));
  EXPECT_EQ(spec["runPolicy"]["properties"]["cleanPodPolicy"]["enum"], names(kCleanPodPolicyNames));
  EXPECT_EQ(spec["successPolicy"]["enum"], names(kSuccessPolicyNames));
  const json& rule = spec["failurePolicy"]["properties"]["rules"]["items"]["properties"];
  EXPECT_EQ(rule["action"]["enum"], names(kFailureActionNames));
  EXPECT_EQ(rule["onExitCodes"]["properties"]["operator"]["enum"], names(kExitCodeOperatorNames));
  EXPECT_EQ(rule["replicaTypes"]["items"]["enum"], names(kReplicaTypeNames));
  const json& status = Schema(crd)["properties"]["status"]["properties"];
  EXPECT_EQ(status["state"]["enum"], names(kJobStateNames));
  EXPECT_EQ(status["conditions"]["items"]["properties"]["type"]["enum"],
            names(kConditionTypeNames));
  EXPECT_EQ(status["conditions"]["items"]["properties"]["status"]["enum"],
            names(kConditionStatusNames));
}

// Defaulting by the API server (from the CRD) and by the C++ decoder give the same object.
TEST(CrdTest, SchemaDefaultsAgreeWithCppDefaults) {
  json crd = Crd();
  std::vector<json> manifests;
  manifests.push_back(MinimalJob());
  json all_types = MinimalJob();
  all_types["spec"].erase("strategy");
  all_types["spec"]["replicaSpecs"]["PS"] = {{"template", Replica(1)["template"]}};
  all_types["spec"]["replicaSpecs"]["Evaluator"] = {{"template", Replica(1)["template"]}};
  all_types["spec"]["replicaSpecs"]["Worker"].erase("replicas");
  manifests.push_back(all_types);
  json partial = MinimalJob();
  partial["spec"]["runPolicy"] = {{"activeDeadlineSeconds", 60},
                                  {"schedulingPolicy", json::object()}};
  partial["spec"]["tfConfig"] = {{"clusterDomain", "cluster.local"}};
  partial["spec"]["failurePolicy"] = {
      {"rules", {{{"action", "Ignore"}, {"onReasons", {"Evicted"}}}}}};
  manifests.push_back(partial);
  for (const auto& [file, doc] : testing::Examples()) manifests.push_back(doc);

  for (const json& m : manifests) {
    json by_server = m;
    ApplySchemaDefaults(Schema(crd), &by_server);
    FieldErrors errors;
    json server_then_cpp = EncodeTrainingJob(DecodeTrainingJob(by_server, &errors));
    json cpp_only = EncodeTrainingJob(DecodeTrainingJob(m, &errors));
    ASSERT_TRUE(errors.empty()) << errors.front().ToString();
    EXPECT_EQ(server_then_cpp.dump(2), cpp_only.dump(2));
    // And the C++ encoding adds nothing the schema would not have defaulted.
    by_server.erase("status");
    EXPECT_EQ(by_server["spec"].dump(2), cpp_only["spec"].dump(2));
  }
}

TEST(CrdTest, EveryExamplePassesTheSchemaWithNothingPruned) {
  json crd = Crd();
  for (const auto& [file, doc] : testing::Examples()) {
    SCOPED_TRACE(file);
    json obj = doc;
    ApplySchemaDefaults(Schema(crd), &obj);
    EXPECT_THAT(PruneUnknownFields(Schema(crd), &obj), ::testing::IsEmpty());
    EXPECT_THAT(Render(ValidateAgainstSchema(Schema(crd), obj, FieldPath())), ::testing::IsEmpty());
  }
}

TEST(CrdTest, EncodedStatusPassesTheSchema) {
  TrainingJob job;
  ASSERT_TRUE(CheckTrainingJob(MinimalJob(), &job).empty());
  TrainingJobStatus s;
  s.conditions.push_back({ConditionType::kCreated, ConditionStatus::kTrue, "Created", "ok",
                          absl::FromUnixSeconds(10), 1});
  s.replica_statuses[ReplicaType::kWorker].active = 2;
  s.start_time = absl::FromUnixSeconds(11);
  s.progress = Progress{.step = 5, .total_steps = 10, .loss = 0.5, .metrics = {{"accuracy", 0.9}}};
  job.status = s;
  json crd = Crd();
  json obj = EncodeTrainingJob(job);
  EXPECT_THAT(PruneUnknownFields(Schema(crd), &obj), ::testing::IsEmpty());
  EXPECT_THAT(Render(ValidateAgainstSchema(Schema(crd), obj, FieldPath())), ::testing::IsEmpty());
}

// The structural checker is not a rubber stamp: each rule catches its violation.
TEST(CrdSchemaTest, CatchesNonStructuralSchemas) {
  struct Case {
    json schema;
    std::string expected;
  };
  std::vector<Case> cases = {
      {{{"type", "object"}, {"properties", {{"spec", json::object()}}}},
       "properties[spec].type: Required value"},
      {{{"properties", json::object()}}, "type: Required value: must not be empty at the root"},
      {{{"type", "object"}, {"properties", {{"a", {{"type", "array"}}}}}},
       "properties[a].items: Required value"},
      {{{"type", "object"},
        {"properties", json::object()},
        {"additionalProperties", {{"type", "string"}}}},
       "additionalProperties: Forbidden"},
      {{{"type", "object"}, {"properties", {{"a", {{"type", "string"}, {"defualt", "x"}}}}}},
       "properties[a].defualt: Unknown field"},
      {{{"type", "object"}, {"properties", {{"a", {{"type", "integer"}, {"default", "x"}}}}}},
       "properties[a].default: Invalid value: \"x\": must be of type integer"},
      {{{"type", "object"}, {"properties", {{"a", {{"type", "string"}, {"enum", {"x", 1}}}}}}},
       "properties[a].enum[1]: Invalid value: 1: must be of type string"},
      {{{"type", "object"},
        {"properties", {{"a", {{"type", "string"}, {"anyOf", {{{"type", "string"}}}}}}}}},
       "properties[a].anyOf[0].type: Forbidden"},
      {{{"type", "object"}, {"properties", {{"a", {{"type", "object"}, {"default", {{"b", 1}}}}}}}},
       "properties[a].default.b: Invalid value"},
      {{{"type", "object"},
        {"properties",
         {{"metadata", {{"type", "object"}, {"properties", {{"labels", {{"type", "object"}}}}}}}}}},
       "properties[metadata].properties[labels]: Forbidden"},
      {{{"type", "object"}, {"x-kubernetes-preserve-unknown-fields", false}},
       "x-kubernetes-preserve-unknown-fields: Invalid value: false: must be true or undefined"},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(Render(CheckStructuralSchema(c.schema, FieldPath())),
                ::testing::Contains(HasSubstr(c.expected)))
        << c.schema.dump();
  }
}

TEST(CrdSchemaTest, PrunesUnknownFieldsButKeepsPreservedOnes) {
  json schema = {
      {"type", "object"},
      {"properties",
       {{"spec",
         {{"type", "object"},
          {"properties",
           {{"known", {{"type", "string"}}},
            {"free", {{"type", "object"}, {"x-kubernetes-preserve-unknown-fields", true}}}}}}}}}};
  json obj = {{"apiVersion", "v"},
              {"kind", "k"},
              {"metadata", {{"name", "n"}}},
              {"spec", {{"known", "a"}, {"unknown", 1}, {"free", {{"anything", {1, 2}}}}}},
              {"extra", true}};
  std::vector<std::string> pruned = PruneUnknownFields(schema, &obj);
  EXPECT_THAT(pruned, ::testing::UnorderedElementsAre("spec.unknown", "extra"));
  EXPECT_EQ(obj["spec"]["free"]["anything"], json({1, 2}));
  EXPECT_EQ(obj["metadata"]["name"], "n");
}

}  // namespace
}  // namespace lockstep::api
