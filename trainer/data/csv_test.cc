// CSV files as a dataset: quoting, CRLF, blank lines, chosen or default input columns, string
// labels through a vocabulary, missing values, several files with one header, no header with
// the spec's columns; and every bad row named with the file and line.
#include "trainer/data/csv.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "trainer/testing/temp_dir.h"

namespace lockstep::trainer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

TEST(CsvLineTest, SplitsQuotedAndEmptyFields) {
  EXPECT_EQ(*SplitCsvLine("a,b,,c", ','), (std::vector<std::string>{"a", "b", "", "c"}));
  EXPECT_EQ(*SplitCsvLine("\"x, y\",\"say \"\"hi\"\"\",3", ','),
            (std::vector<std::string>{"x, y", "say \"hi\"", "3"}));
  EXPECT_EQ(*SplitCsvLine("1;2;", ';'), (std::vector<std::string>{"1", "2", ""}));
  EXPECT_EQ(SplitCsvLine("\"open,1", ',').status().message(), "a quote left open");
  EXPECT_EQ(SplitCsvLine("\"a\"b,1", ',').status().message(), "text after a closing quote");
}

class CsvTest : public ::testing::Test {
 protected:
  std::string Put(const std::string& name, const std::string& text) const {
    const std::string p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }
  DataSpec Spec(json j) const {
    j["format"] = "csv";
    if (!j.contains("files")) j["files"] = (dir_ / "*.csv").string();
    absl::StatusOr<DataSpec> s = ParseDataSpec(j);
    EXPECT_TRUE(s.ok()) << s.status();
    return *s;
  }
  testing::TempDir tmp_{"csv_test"};
  const fs::path& dir_ = tmp_.path();
};

TEST_F(CsvTest, ReadsRowsAcrossFilesWithVocabularyAndMissingValues) {
  Put("a.csv",
      "sepal_length,sepal_width,species,note\r\n5.1,3.5,setosa,\"a, b\"\r\n\r\n"
      "4.9, 3.0 ,versicolor,x\r\n");
  Put("b.csv", "sepal_length,sepal_width,species,note\n7.0,,virginica,y\n");
  const DataSpec spec = Spec({{"label", "species"},
                              {"input", {"sepal_width", "sepal_length"}},
                              {"label_vocabulary", {"setosa", "versicolor", "virginica"}},
                              {"missing", -1}});
  FileSet files;
  absl::StatusOr<Dataset> d = LoadCsv(spec.files, spec, &files);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(files.files.size(), 2u);
  EXPECT_FALSE(files.sharded);
  EXPECT_EQ(d->inputs[0], Tensor({3, 2}, {3.5f, 5.1f, 3.0f, 4.9f, -1.0f, 7.0f}));
  EXPECT_EQ(ClassIds(d->targets[0]), (std::vector<int32_t>{0, 1, 2}));
  // Two files for two workers: the second reads the second file only; for three, every file.
  absl::StatusOr<Dataset> second = LoadCsv(spec.files, spec, &files, {.index = 1, .count = 2});
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE(files.sharded);
  EXPECT_EQ(files.matched, 2);
  ASSERT_EQ(files.files.size(), 1u);
  EXPECT_EQ(second->size() + LoadCsv(spec.files, spec, nullptr, {.index = 0, .count = 2})->size(),
            3);
  absl::StatusOr<Dataset> all = LoadCsv(spec.files, spec, &files, {.index = 2, .count = 3});
  ASSERT_TRUE(all.ok());
  EXPECT_FALSE(files.sharded);
  EXPECT_EQ(all->size(), 3);
}

// Several label columns, several inputs by the model's names, a sample-weight column (neither
// an input nor a label).
TEST_F(CsvTest, InputsAndLabelsByNameAndASampleWeightColumn) {
  // A column that is a label and an input is refused when the spec is read.
  EXPECT_TRUE(absl::IsInvalidArgument(
      ParseDataSpec(
          {{"format", "csv"}, {"files", "x"}, {"label", "temp"}, {"input", {"temp", "wind"}}})
          .status()));
  Put("h.csv", "lat,lon,temp,wind,hour,w\n1,2,10,3,5,0.5\n3,4,12,1,6,2\n");
  const DataSpec ok = Spec({{"files", (dir_ / "h.csv").string()},
                            {"label", {{"position", {"lat", "lon"}}, {"weather", "temp"}}},
                            {"input", {{"time", {"hour"}}, {"air", {"wind"}}}},
                            {"sample_weight", "w"}});
  absl::StatusOr<Dataset> d = LoadCsv(ok.files, ok);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->inputs.size(), 2u);
  // The spec's objects in name order (FitToModel matches them to the model by name).
  EXPECT_EQ(ok.input_columns[0].feeds, "air");
  EXPECT_EQ(d->inputs[0], Tensor({2, 1}, {3, 1}));
  EXPECT_EQ(d->inputs[1], Tensor({2, 1}, {5, 6}));
  ASSERT_EQ(d->targets.size(), 2u);
  EXPECT_EQ(d->targets[0], Tensor({2, 2}, {1, 2, 3, 4}));  // "position"
  EXPECT_EQ(d->targets[1], Tensor({2}, {10, 12}));         // "weather": one column
  EXPECT_EQ(d->sample_weights, Tensor({2}, {0.5f, 2}));
  // Without inputs named, every column but the labels and the weight.
  const DataSpec rest =
      Spec({{"files", (dir_ / "h.csv").string()}, {"label", "temp"}, {"sample_weight", "w"}});
  d = LoadCsv(rest.files, rest);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->inputs[0].shape(), Shape({2, 4}));
}

TEST_F(CsvTest, DefaultInputsAndNoHeader) {
  Put("n.csv", "1,2,0\n3,4,1\n");
  const DataSpec spec = Spec({{"header", false}, {"columns", {"a", "b", "y"}}, {"label", "y"}});
  absl::StatusOr<Dataset> d = LoadCsv(spec.files, spec);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->inputs[0], Tensor({2, 2}, {1, 2, 3, 4}));
  EXPECT_EQ(ClassIds(d->targets[0]), (std::vector<int32_t>{0, 1}));
}

TEST_F(CsvTest, BadRowsAreNamedWithFileAndLine) {
  auto refused = [&](const std::string& text, const std::string& want, json spec) {
    const std::string path = Put("bad.csv", text);
    const DataSpec s = Spec(spec);
    absl::StatusOr<Dataset> d = LoadCsv(path, s);
    ASSERT_FALSE(d.ok()) << want;
    EXPECT_EQ(d.status().code(), absl::StatusCode::kDataLoss) << d.status();
    EXPECT_NE(d.status().message().find(want), std::string::npos) << d.status();
  };
  const json y = {{"label", "y"}};
  const std::string p = (dir_ / "bad.csv").string();
  refused("a,b,y\n1,2,0\n1,2\n", p + ":3: 2 fields; the columns are 3 (a, b, y)", y);
  refused("a,b,y\n1,x,0\n", p + ":2: column \"b\" is \"x\", not a number", y);
  refused("a,b,y\n1,,0\n", p + ":2: column \"b\" is empty", y);
  refused("a,b,y\n1,2,\n", p + ":2: column \"y\" is empty (a label has a value)", y);
  refused("a,b,y\n1,2,cat\n", p + ":2: label \"cat\" is not in label_vocabulary",
          {{"label", "y"}, {"label_vocabulary", {"dog"}}});
  refused("a,b,y\n\"1,2,0\n", p + ":2: a quote left open", y);
  refused("a,b,z\n1,2,0\n", p + ": no column \"y\" (the columns are a, b, z)", y);
  refused("a,b,y\n1,2,0\n", "no column \"c\"", {{"label", "y"}, {"input", {"c"}}});
  // A second file whose header differs.
  Put("x1.csv", "a,b,y\n1,2,0\n");
  Put("x2.csv", "a,c,y\n1,2,0\n");
  const DataSpec s = Spec({{"label", "y"}, {"files", (dir_ / "x*.csv").string()}});
  absl::StatusOr<Dataset> d = LoadCsv(s.files, s);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(
      d.status().message().find("x2.csv:1: the header (a, c, y) is not the columns (a, b, y)"),
      std::string::npos)
      << d.status();
}

TEST_F(CsvTest, SpecMistakesAreNamed) {
  absl::StatusOr<DataSpec> s = ParseDataSpec(
      json{{"format", "csv"}, {"files", "/d/*.csv"}, {"header", false}, {"label", "y"}});
  EXPECT_NE(s.status().message().find("columns: is required when the files have no header"),
            std::string::npos)
      << s.status();
  s = ParseDataSpec(
      json{{"format", "csv"}, {"files", "/d/*.csv"}, {"label", "y"}, {"input", {"y"}}});
  EXPECT_NE(s.status().message().find("input: holds the label's column"), std::string::npos)
      << s.status();
  s = ParseDataSpec(
      json{{"format", "csv"}, {"files", "/d/*.csv"}, {"label", "y"}, {"delimiter", ";;"}});
  EXPECT_NE(s.status().message().find("delimiter: must be one character"), std::string::npos)
      << s.status();
  s = ParseDataSpec(json{{"format", "csv"}, {"files", "/d/*.csv"}, {"label", "y"}, {"x", "a.npy"}});
  EXPECT_NE(s.status().message().find("x: is not a field of the csv format"), std::string::npos)
      << s.status();
}

}  // namespace
}  // namespace lockstep::trainer
