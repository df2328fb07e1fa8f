#pragma once
// Helpers shared by the API tests: the repository's examples and a minimal valid job.

#include <filesystem>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "operator/api/field_errors.h"
#include "operator/api/manifest.h"

namespace lockstep::api::testing {

inline std::string SourcePath(const std::string& relative) {
  return std::string(LOCKSTEP_SOURCE_DIR) + "/" + relative;
}

// The TrainingJobs of every examples/*.yaml, by file name (a file may also hold the ConfigMaps
// its job mounts).
inline std::vector<std::pair<std::string, nlohmann::json>> Examples() {
  std::vector<std::pair<std::string, nlohmann::json>> out;
  for (const auto& entry : std::filesystem::directory_iterator(SourcePath("examples"))) {
    if (entry.path().extension() != ".yaml") continue;
    auto docs = ReadManifestFile(entry.path().string());
    EXPECT_TRUE(docs.ok()) << docs.status();
    if (!docs.ok()) continue;
    for (auto& doc : *docs) {
      if (doc.value("kind", "") != "TrainingJob") continue;
      out.emplace_back(entry.path().filename().string(), std::move(doc));
    }
  }
  return out;
}

inline nlohmann::json Container(const std::string& name = "trainer") {
  return {{"name", name}, {"image", "lockstep/trainer:0.1.0"}};
}

inline nlohmann::json Replica(int replicas) {
  return {{"replicas", replicas},
          {"template", {{"spec", {{"containers", nlohmann::json::array({Container()})}}}}}};
}

// A valid MultiWorkerMirrored job with a chief and two workers.
inline nlohmann::json MinimalJob() {
  return {{"apiVersion", "lockstep.io/v1alpha1"},
          {"kind", "TrainingJob"},
          {"metadata", {{"name", "job"}, {"namespace", "default"}}},
          {"spec",
           {{"strategy", "MultiWorkerMirrored"},
            {"replicaSpecs", {{"Chief", Replica(1)}, {"Worker", Replica(2)}}}}}};
}

// A broken manifest: MinimalJob() changed by `mutate`, and the error a user must see.
struct ManifestCase {
  std::string name;
  std::function<void(nlohmann::json&)> mutate;
  std::string path;     // the field an error must name ("<root>" for the object itself)
  std::string message;  // part of what the user reads for that field
  friend void PrintTo(const ManifestCase& c, std::ostream* os) { *os << c.name; }
};

// Some error names `path`, and every error naming it says `message`.
inline void ExpectErrorAt(const FieldErrors& errors, const std::string& path,
                          const std::string& message) {
  bool found = false;
  for (const FieldError& e : errors) {
    if (e.path != path && !(e.path.empty() && path == "<root>")) continue;
    found = true;
    EXPECT_THAT(e.ToString(), ::testing::HasSubstr(message));
    EXPECT_THAT(e.ToString(), ::testing::StartsWith(path + ": "));
  }
  EXPECT_TRUE(found) << "no error names " << path
                     << (errors.empty() ? "" : "; first: " + errors[0].ToString());
}

}  // namespace lockstep::api::testing
