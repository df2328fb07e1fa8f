#include "operator/api/manifest.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

namespace lockstep::api {
namespace {

using ::nlohmann::json;
using ::testing::HasSubstr;

json One(std::string_view yaml) {
  auto docs = ParseYamlDocuments(yaml);
  EXPECT_TRUE(docs.ok()) << docs.status();
  EXPECT_EQ(docs->size(), 1u);
  return docs->empty() ? json() : docs->front();
}

TEST(ManifestTest, ScalarsResolveLikeKubectl) {
  json j = One(R"(
a: 1
b: -7
c: 0x1f
d: 1.5
e: 1e3
f: true
g: "true"
h: yes
i: ~
j:
k: hello
l: '0x1f'
m: 12345678901234567890123
n: 2.0.1
o: .inf
)");
  EXPECT_EQ(j["a"], 1);
  EXPECT_EQ(j["b"], -7);
  EXPECT_EQ(j["c"], 31);
  EXPECT_EQ(j["d"], 1.5);
  EXPECT_EQ(j["e"], 1000.0);
  EXPECT_EQ(j["f"], true);
  EXPECT_EQ(j["g"], "true");
  EXPECT_EQ(j["h"], true);
  EXPECT_TRUE(j["i"].is_null());
  EXPECT_TRUE(j["j"].is_null());
  EXPECT_EQ(j["k"], "hello");
  EXPECT_EQ(j["l"], "0x1f");
  EXPECT_TRUE(j["m"].is_number_float());
  EXPECT_EQ(j["n"], "2.0.1");
  EXPECT_TRUE(std::isinf(j["o"].get<double>()));
}

TEST(ManifestTest, MultipleDocumentsSkipEmptyOnes) {
  auto docs = ParseYamlDocuments("---\na: 1\n---\n---\nb: [1, {c: d}]\n");
  ASSERT_TRUE(docs.ok());
  ASSERT_EQ(docs->size(), 2u);
  EXPECT_EQ((*docs)[1]["b"][1]["c"], "d");
}

TEST(ManifestTest, JsonIsYamlToo) {
  json j = One(R"({"a": [1, 2, {"b": null}], "c": "x"})");
  EXPECT_EQ(j, json::parse(R"({"a": [1, 2, {"b": null}], "c": "x"})"));
}

struct BadInput {
  std::string name;
  std::string text;
  std::string expected;
  friend void PrintTo(const BadInput& c, std::ostream* os) { *os << c.name; }
};

class BadYamlTest : public ::testing::TestWithParam<BadInput> {};

TEST_P(BadYamlTest, IsAnErrorNotACrash) {
  auto docs = ParseYamlDocuments(GetParam().text);
  ASSERT_FALSE(docs.ok());
  EXPECT_EQ(docs.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(docs.status().message()), HasSubstr(GetParam().expected));
}

INSTANTIATE_TEST_SUITE_P(
    All, BadYamlTest,
    ::testing::Values(BadInput{"Unclosed", "spec: [1, 2", "malformed YAML"},
                      BadInput{"BadIndent", "a:\n  b: 1\n c: 2\n", "malformed YAML"},
                      BadInput{"DuplicateKey", "a: 1\na: 2\n", "key \"a\" is repeated"},
                      BadInput{"ComplexKey", "? [a]\n: 1\n", "mapping keys must be scalars"},
                      BadInput{"DeepNesting", std::string(100000, '[') + std::string(100000, ']'),
                               "malformed YAML"},
                      BadInput{"ModeratelyDeep", std::string(300, '[') + std::string(300, ']'),
                               "nests deeper than 256"}),
    [](const auto& p) { return p.param.name; });

TEST(ManifestTest, JsonErrorsSayWhere) {
  auto truncated = ParseJson(R"({"spec": {"replicaSpecs": )");
  ASSERT_FALSE(truncated.ok());
  EXPECT_THAT(std::string(truncated.status().message()), HasSubstr("malformed JSON"));
  EXPECT_THAT(std::string(truncated.status().message()), HasSubstr("line 1, column 27"));
  auto deep = ParseJson(std::string(1000000, '[') + std::string(1000000, ']'));
  ASSERT_FALSE(deep.ok());
  EXPECT_THAT(std::string(deep.status().message()), HasSubstr("nests deeper than 256"));
  auto bad_utf8 = ParseJson("\"\xff\"");
  EXPECT_FALSE(bad_utf8.ok());
  auto ok = ParseJson(R"({"a": 1e400})");
  EXPECT_FALSE(ok.ok());  // out-of-range numbers are refused by the parser
}

// ToYaml reads back as what it wrote: strings that look like other types, empty and nested
// containers, numbers, nulls, and every example manifest.
TEST(ManifestTest, ToYamlReadsBackAsTheSameDocument) {
  json doc = {{"strings",
               {"true", "no", "2222", "0x1F", "1e3", "", "~", "null", "a: b", "- x", "#c", "plain",
                " lead", "multi\nline", "ünï"}},
              {"numbers", {0, -7, 4294967296, 2.5, 1e-9}},
              {"empty", {{"map", json::object()}, {"list", json::array()}}},
              {"bools", {true, false}},
              {"nothing", nullptr},
              {"nested", {{{"k", {{"deeper", {1, {{"x", "y"}}}}}}}}}};
  std::string yaml = ToYaml(doc);
  absl::StatusOr<std::vector<json>> back = ParseYamlDocuments(yaml);
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << yaml;
  ASSERT_EQ(back->size(), 1u);
  EXPECT_EQ(back->front(), doc) << yaml;
  int examples = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator(std::string(LOCKSTEP_SOURCE_DIR) + "/examples")) {
    if (entry.path().extension() != ".yaml") continue;
    absl::StatusOr<std::vector<json>> docs = ReadManifestFile(entry.path().string());
    ASSERT_TRUE(docs.ok()) << docs.status();
    for (const json& d : *docs) {
      absl::StatusOr<std::vector<json>> again = ParseYamlDocuments(ToYaml(d));
      ASSERT_TRUE(again.ok()) << entry.path() << ": " << again.status();
      ASSERT_EQ(again->size(), 1u);
      EXPECT_EQ(again->front(), d) << entry.path();
      ++examples;
    }
  }
  EXPECT_GT(examples, 5);
}

TEST(ManifestTest, MissingFileIsNotFound) {
  auto docs = ReadManifestFile("/nonexistent/job.yaml");
  EXPECT_EQ(docs.status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace lockstep::api
