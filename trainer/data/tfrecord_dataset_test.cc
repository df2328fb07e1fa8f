// TFRecord datasets: the data spec's checks, records of tf.train.Example read into a dataset
// (fixed-length, var_len with padding, defaults, gzip files, a glob over several files in name
// order), files written by an independent writer (TensorFlow's Example declared in Python from
// its field numbers), and every bad input named with the file, the record and the feature.
#include "trainer/data/tfrecord_dataset.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "trainer/data/tfrecord.h"
#include "trainer/proto/example.pb.h"
#include "trainer/testing/python_peer.h"
#include "trainer/testing/temp_dir.h"

namespace lockstep::trainer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

absl::StatusOr<DataSpec> Spec(json j) { return ParseDataSpec(j); }

json BaseSpec() {
  return json{
      {"format", "tfrecord"},
      {"files", "/data/*.tfrecord"},
      {"features", {{"x", {{"dtype", "float32"}, {"shape", {2, 2}}}}, {"y", {{"dtype", "int64"}}}}},
      {"input", "x"},
      {"label", "y"}};
}

TEST(DataSpecTest, ParsesAndNamesEveryMistake) {
  absl::StatusOr<DataSpec> s = Spec(BaseSpec());
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->input_features.size(), 1u);
  EXPECT_EQ(s->input_features[0].feeds, "");
  EXPECT_EQ(s->input_features[0].what.name, "x");
  EXPECT_EQ(s->input_features[0].what.shape, (Shape{2, 2}));
  ASSERT_EQ(s->label_features.size(), 1u);
  EXPECT_EQ(s->label_features[0].what.name, "y");
  EXPECT_EQ(s->label_features[0].what.size(), 1);
  // Several inputs and labels: a list by position, or by the model's names.
  json named = BaseSpec();
  named["features"]["z"] = {{"dtype", "float32"}, {"shape", {3}}};
  named["input"] = {{"image", "x"}, {"extra", "z"}};
  named["label"] = json::array({"y"});
  s = Spec(named);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->input_features.size(), 2u);
  EXPECT_EQ(s->input_features[1].feeds, "image");
  EXPECT_EQ(s->input_features[1].what.name, "x");
  EXPECT_EQ(s->label_features[0].feeds, "");
  // A float label of any shape is a target (regression, one-hot rows, masks).
  json regression = BaseSpec();
  regression["features"]["y"] = {{"dtype", "float32"}, {"shape", {2, 2}}};
  EXPECT_TRUE(Spec(regression).ok());
  auto refused = [](json j, const std::string& want) {
    absl::StatusOr<DataSpec> r = ParseDataSpec(j);
    ASSERT_FALSE(r.ok()) << j.dump();
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(want), std::string::npos) << r.status();
  };
  json j = BaseSpec();
  j["format"] = "parquet";
  refused(j, "format: \"parquet\" is not \"tfrecord\"");
  j = BaseSpec();
  j.erase("files");
  refused(j, "files: is required");
  j = BaseSpec();
  j["input"] = "z";
  refused(j, "input: \"z\" is not one of the features");
  j = BaseSpec();
  j["features"]["x"]["shape"] = {2, 0};
  refused(j, "features.x.shape: [2,0] is not a list of positive sizes");
  j = BaseSpec();
  j["features"]["x"]["dtype"] = "string";
  refused(j, "features.x.dtype: string features");
  j = BaseSpec();
  j["features"]["y"]["var_len"] = true;
  j["features"]["y"]["shape"] = {3};
  refused(j, "features.y: a label has a fixed shape");
  j = BaseSpec();
  j["input"] = {{"a", "x"}};
  j["label"] = {{"a", "x"}};
  refused(j, "feature \"x\" is given twice");
  j = BaseSpec();
  j["sample_weight"] = "w";
  refused(j, "sample_weight: \"w\" is not one of the features");
  j["sample_weight"] = "y";
  refused(j, "sample_weight: feature \"y\" is an input or a label");
  j["features"]["w"] = {{"dtype", "float32"}, {"shape", {2}}};
  j["sample_weight"] = "w";
  refused(j, "features.w: a sample weight is one value per example");
  j = BaseSpec();
  j["target"] = "output";
  refused(j, "target: the one value is \"input\"");
  j = BaseSpec();
  j["features"]["x"]["var_len"] = true;
  refused(j, "features.x.shape: a var_len feature has a one-axis shape");
  j = BaseSpec();
  j["validation_split"] = 1.5;
  refused(j, "validation_split: must be a fraction in [0, 1)");
  j = BaseSpec();
  j["validation_files"] = "/v/*";
  j["validation_split"] = 0.1;
  refused(j, "give validation files or validation_split, not both");
  j = BaseSpec();
  j["shuffle"] = true;
  refused(j, "shuffle: unknown field");
  EXPECT_EQ(LoadDataSpec("/no/such/spec.json").status().code(), absl::StatusCode::kInvalidArgument);
}

class TfRecordDatasetTest : public ::testing::Test {
 protected:
  std::string Path(const std::string& name) const { return tmp_.Path(name); }

  static std::string Example(const std::vector<float>& x, std::optional<int64_t> y,
                             const std::string& x_name = "x") {
    tfexample::Example e;
    auto& f = *e.mutable_features()->mutable_feature();
    for (float v : x) f[x_name].mutable_float_list()->add_value(v);
    if (y) f["y"].mutable_int64_list()->add_value(*y);
    return e.SerializeAsString();
  }
  static void Write(const std::string& path, const std::vector<std::string>& records,
                    Compression c = Compression::kNone) {
    auto w = RecordWriter::Create(path, c);
    ASSERT_TRUE(w.ok());
    for (const std::string& r : records) ASSERT_TRUE((*w)->Write(r).ok());
    ASSERT_TRUE((*w)->Close().ok());
  }
  DataSpec TheSpec(json changes = json::object()) const {
    json j = BaseSpec();
    j["files"] = Path("*.tfrecord*");
    j.merge_patch(changes);
    absl::StatusOr<DataSpec> s = ParseDataSpec(j);
    EXPECT_TRUE(s.ok()) << s.status();
    return *s;
  }
  testing::TempDir tmp_{"tfrecord_dataset_test"};
  const fs::path& dir_ = tmp_.path();
};

TEST_F(TfRecordDatasetTest, ReadsRecordsAcrossFilesInNameOrder) {
  Write(Path("b.tfrecord.gz"), {Example({5, 6, 7, 8}, 1)}, Compression::kGzip);
  Write(Path("a.tfrecord"), {Example({1, 2, 3, 4}, 0), Example({-1, -2, -3, -4}, 2)});
  TfRecordReport report;
  absl::StatusOr<Dataset> d = LoadTfRecords(Path("*.tfrecord*"), TheSpec(), &report);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(report.files, (std::vector<std::string>{Path("a.tfrecord"), Path("b.tfrecord.gz")}));
  EXPECT_EQ(report.records, 3);
  EXPECT_EQ(d->inputs[0], Tensor({3, 2, 2}, {1, 2, 3, 4, -1, -2, -3, -4, 5, 6, 7, 8}));
  EXPECT_EQ(d->targets[0], Tensor({3}, {0, 2, 1}));
  EXPECT_EQ(LoadTfRecords(Path("*.nothing"), TheSpec()).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(TfRecordDatasetTest, VarLenFeaturesArePaddedOrCutAndDefaultsFillMissingOnes) {
  tfexample::Example e;
  auto& f = *e.mutable_features()->mutable_feature();
  for (int64_t id : {7, 8}) f["tokens"].mutable_int64_list()->add_value(id);
  f["y"].mutable_int64_list()->add_value(1);
  tfexample::Example longer = e;
  for (int64_t id : {9, 10, 11}) {
    (*longer.mutable_features()->mutable_feature())["tokens"].mutable_int64_list()->add_value(id);
  }
  tfexample::Example none;
  (*none.mutable_features()->mutable_feature())["y"].mutable_int64_list()->add_value(0);
  Write(Path("t.tfrecord"),
        {e.SerializeAsString(), longer.SerializeAsString(), none.SerializeAsString()});
  const DataSpec spec =
      TheSpec({{"features", {{"tokens", {{"dtype", "int64"}, {"shape", {4}}, {"var_len", true}}}}},
               {"input", "tokens"}});
  absl::StatusOr<Dataset> d = LoadTfRecords(Path("t.tfrecord"), spec);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->inputs[0], Tensor({3, 4}, {7, 8, 0, 0, 7, 8, 9, 10, 0, 0, 0, 0}));
  // A fixed-length feature's default fills a missing one.
  Write(Path("t.tfrecord"), {Example({}, 1, "other")});
  absl::StatusOr<Dataset> dd =
      LoadTfRecords(Path("t.tfrecord"), TheSpec({{"features", {{"x", {{"default", -1}}}}}}));
  ASSERT_TRUE(dd.ok()) << dd.status();
  EXPECT_EQ(dd->inputs[0], Tensor({1, 2, 2}, -1.0f));
}

TEST_F(TfRecordDatasetTest, BadRecordsAreNamedWithFileRecordAndFeature) {
  auto refused = [&](const std::vector<std::string>& records, const std::string& want,
                     DataSpec spec) {
    Write(Path("bad.tfrecord"), records);
    absl::StatusOr<Dataset> d = LoadTfRecords(Path("bad.tfrecord"), spec);
    ASSERT_FALSE(d.ok()) << want;
    EXPECT_EQ(d.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(d.status().message().find(Path("bad.tfrecord")), std::string::npos) << d.status();
    EXPECT_NE(d.status().message().find(want), std::string::npos) << d.status();
  };
  const std::string good = Example({1, 2, 3, 4}, 0);
  refused({good, Example({1, 2, 3}, 0)},
          "record 1 (offset " + std::to_string(16 + good.size()) +
              "): feature 'x' has 3 values; its shape [2, 2] takes 4",
          TheSpec());
  refused({Example({1, 2, 3, 4}, std::nullopt)}, "record 0 (offset 0): feature 'y' is missing",
          TheSpec());
  refused({"\xff\xff not a proto"}, "not a tf.train.Example", TheSpec());
  {
    tfexample::Example e;
    auto& f = *e.mutable_features()->mutable_feature();
    for (int64_t v : {1, 2, 3, 4}) f["x"].mutable_int64_list()->add_value(v);
    f["y"].mutable_int64_list()->add_value(0);
    refused({e.SerializeAsString()}, "feature 'x' is a int64_list; the spec says float32",
            TheSpec());
  }
  // A corrupt record fails the load, or is skipped and counted when the spec says so.
  Write(Path("c.tfrecord"), {good, good, Example({5, 6, 7, 8}, 1)});
  std::string bytes;
  {
    std::ifstream in(Path("c.tfrecord"), std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  bytes[16 + good.size() + 12 + 2] ^= 0x40;  // inside the second record's data
  std::ofstream(Path("c.tfrecord"), std::ios::binary | std::ios::trunc) << bytes;
  EXPECT_EQ(LoadTfRecords(Path("c.tfrecord"), TheSpec()).status().code(),
            absl::StatusCode::kDataLoss);
  TfRecordReport report;
  absl::StatusOr<Dataset> d =
      LoadTfRecords(Path("c.tfrecord"), TheSpec({{"skip_corrupt", true}}), &report);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(report.skipped, 1);
  EXPECT_EQ(d->targets[0], Tensor({2}, {0, 1}));
  ASSERT_EQ(report.corrupt.size(), 1u);
  EXPECT_EQ(report.corrupt[0].file, Path("c.tfrecord"));
  EXPECT_EQ(report.corrupt[0].records_skipped, 1);
  EXPECT_EQ(report.corrupt[0].unreadable_bytes, 0);  // a bad data CRC: the next record follows
  EXPECT_NE(report.corrupt[0].first_problem.find("the data's CRC does not match"),
            std::string::npos);

  // The issue's finding: a flipped length byte loses every record after it, and only "1
  // corrupt record skipped" was said. The rest of the file is counted in bytes, per file, and
  // a clean file beside it is not named.
  std::vector<std::string> many(20, good);
  Write(Path("d.tfrecord"), many);
  Write(Path("e.tfrecord"), {good});
  {
    std::ifstream in(Path("d.tfrecord"), std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const size_t record = 16 + good.size();
  bytes[5 * record + 1] ^= 0x01;  // the sixth record's length
  std::ofstream(Path("d.tfrecord"), std::ios::binary | std::ios::trunc) << bytes;
  TfRecordReport lost;
  absl::StatusOr<Dataset> partial =
      LoadTfRecords(Path("[de].tfrecord"), TheSpec({{"skip_corrupt", true}}), &lost);
  ASSERT_TRUE(partial.ok()) << partial.status();
  EXPECT_EQ(lost.records, 6);  // five of d, one of e
  ASSERT_EQ(lost.corrupt.size(), 1u);
  EXPECT_EQ(lost.corrupt[0].file, Path("d.tfrecord"));
  EXPECT_EQ(lost.corrupt[0].records_skipped, 1);
  EXPECT_EQ(lost.corrupt[0].unreadable_bytes, static_cast<int64_t>(15 * record));
  EXPECT_EQ(lost.unreadable_bytes, static_cast<int64_t>(15 * record));
  EXPECT_NE(lost.corrupt[0].first_problem.find("the length's CRC does not match"),
            std::string::npos);
}

TEST_F(TfRecordDatasetTest, ASampleWeightFeatureIsEachExamplesWeight) {
  std::vector<std::string> records;
  for (float w : {0.5f, 2.0f}) {
    tfexample::Example e;
    e.ParseFromString(Example({1, 2, 3, 4}, 1));
    (*e.mutable_features()->mutable_feature())["w"].mutable_float_list()->add_value(w);
    records.push_back(e.SerializeAsString());
  }
  Write(Path("w.tfrecord"), records);
  absl::StatusOr<Dataset> d = LoadTfRecords(
      Path("w.tfrecord"),
      TheSpec({{"features", {{"w", {{"dtype", "float32"}}}}}, {"sample_weight", "w"}}));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->sample_weights, Tensor({2}, {0.5f, 2.0f}));
  EXPECT_EQ(d->targets.size(), 1u);
}

// Decoding on several threads gives the dataset one thread gives, and reports the same first
// bad record however the records are split.
TEST_F(TfRecordDatasetTest, ThreadsChangeNeitherTheDataNorTheError) {
  std::vector<std::string> records;
  for (int i = 0; i < 101; ++i) {
    records.push_back(Example({static_cast<float>(i), 1, 2, static_cast<float>(-i)}, i % 7));
  }
  Write(Path("many.tfrecord"), records);
  absl::StatusOr<Dataset> one = LoadTfRecords(Path("many.tfrecord"), TheSpec(), nullptr, 1);
  ASSERT_TRUE(one.ok()) << one.status();
  for (int threads : {2, 3, 8}) {
    absl::StatusOr<Dataset> many =
        LoadTfRecords(Path("many.tfrecord"), TheSpec(), nullptr, threads);
    ASSERT_TRUE(many.ok()) << many.status();
    EXPECT_EQ(many->inputs, one->inputs) << threads;
    EXPECT_EQ(many->targets, one->targets) << threads;
  }
  // The same records over three files (read side by side): the same rows, in file order.
  for (int f = 0; f < 3; ++f) {
    Write(Path("part-" + std::to_string(f) + ".tfrecord"),
          std::vector<std::string>(records.begin() + f * 34,
                                   records.begin() + std::min(101, (f + 1) * 34)));
  }
  for (int threads : {1, 2, 3, 8}) {
    absl::StatusOr<Dataset> parts =
        LoadTfRecords(Path("part-*.tfrecord"), TheSpec(), nullptr, threads);
    ASSERT_TRUE(parts.ok()) << parts.status();
    EXPECT_EQ(parts->inputs, one->inputs) << threads;
    EXPECT_EQ(parts->targets, one->targets) << threads;
  }
  records[40] = Example({1, 2, 3}, 0);
  records[90] = Example({1, 2, 3}, 0);
  Write(Path("many.tfrecord"), records);
  Write(Path("part-1.tfrecord"),
        std::vector<std::string>(records.begin() + 34, records.begin() + 68));
  Write(Path("part-2.tfrecord"), std::vector<std::string>(records.begin() + 68, records.end()));
  for (int threads : {1, 2, 3, 8}) {
    absl::Status s = LoadTfRecords(Path("many.tfrecord"), TheSpec(), nullptr, threads).status();
    EXPECT_NE(s.message().find("record 40 "), std::string::npos) << threads << ": " << s;
    s = LoadTfRecords(Path("part-*.tfrecord"), TheSpec(), nullptr, threads).status();
    EXPECT_NE(s.message().find("part-1.tfrecord: record 6 "), std::string::npos)
        << threads << ": " << s;
  }
}

TEST_F(TfRecordDatasetTest, FilesFromAnIndependentWriterAreRead) {
  absl::StatusOr<json> wrote = testing::RunPythonPeer("trainer/data/testdata/write_examples.py",
                                                      {dir_.string(), "3", "5", "4", "3", "gzip"});
  if (absl::IsUnavailable(wrote.status())) GTEST_SKIP() << wrote.status();
  ASSERT_TRUE(wrote.ok()) << wrote.status();
  absl::StatusOr<Dataset> d = LoadTfRecords(Path("part-*.tfrecord.gz"), TheSpec());
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->size(), 15);
  EXPECT_EQ(d->inputs[0].shape(), (Shape{15, 2, 2}));
  for (float y : d->targets[0].values()) EXPECT_TRUE(y >= 0 && y < 3) << y;
}

}  // namespace
}  // namespace lockstep::trainer
