// NumPy arrays written by NumPy itself (trainer/data/testdata/write_numpy.py): every numeric
// dtype, half floats, format version 2, .npz members (compressed or not) as a keras.datasets
// archive holds them, and the refusals: Fortran order, big-endian, truncation, a missing member.
#include "trainer/data/numpy.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "trainer/testing/python_peer.h"

namespace lockstep::trainer {
namespace {

namespace fs = std::filesystem;

class NumpyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("numpy_test." + std::to_string(getpid()));
    fs::create_directories(dir_);
    absl::StatusOr<nlohmann::json> w =
        testing::RunPythonPeer("trainer/data/testdata/write_numpy.py", {dir_.string()});
    if (absl::IsUnavailable(w.status())) GTEST_SKIP() << w.status();
    ASSERT_TRUE(w.ok()) << w.status();
    written_ = *w;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  std::vector<float> Want(const std::string& name) const {
    return written_.at(name).get<std::vector<float>>();
  }

  fs::path dir_;
  nlohmann::json written_;
};

TEST_F(NumpyTest, EveryNumericDtypeReadsAsFloat) {
  for (const char* dtype : {"float32", "float64", "float16", "uint8", "int8", "int16", "uint16",
                            "int32", "uint32", "int64", "uint64", "bool"}) {
    absl::StatusOr<NpyArray> a = ReadNumpy(Path(std::string(dtype) + ".npy"));
    ASSERT_TRUE(a.ok()) << dtype << ": " << a.status();
    EXPECT_EQ(a->values.shape(), (Shape{2, 3})) << dtype;
    EXPECT_EQ(a->values.values(), Want(dtype)) << dtype;
  }
  absl::StatusOr<NpyArray> half = ReadNumpy(Path("half.npy"));
  ASSERT_TRUE(half.ok()) << half.status();
  EXPECT_EQ(half->dtype, "<f2");
  EXPECT_EQ(half->values.values(), Want("half"));
  EXPECT_TRUE(std::signbit(half->values[4]));  // -0.0
  absl::StatusOr<NpyArray> v2 = ReadNumpy(Path("v2.npy"));
  ASSERT_TRUE(v2.ok()) << v2.status();
  EXPECT_EQ(v2->values.shape(), (Shape{4, 3}));
  EXPECT_EQ(v2->values.values(), Want("v2"));
}

TEST_F(NumpyTest, ArchivesAndDatasets) {
  absl::StatusOr<Dataset> d =
      LoadNumpyDataset(Path("dataset.npz") + ":x_train", Path("dataset.npz") + ":y_train");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->inputs[0].shape(), (Shape{60, 8, 8}));
  EXPECT_EQ(d->inputs[0].values(), Want("x_train"));
  EXPECT_EQ(d->targets[0].values(), Want("y_train"));
  // Labels [N, 1] from an uncompressed archive.
  absl::StatusOr<Dataset> p = LoadNumpyDataset(Path("plain.npz") + ":x", Path("plain.npz") + ":y");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->targets[0].values(), Want("y_test"));
  // Lengths that differ, a missing member, an archive without a key.
  absl::Status s =
      LoadNumpyDataset(Path("dataset.npz") + ":x_train", Path("dataset.npz") + ":y_test").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("20 rows; " + Path("dataset.npz") + ":x_train has 60"),
            std::string::npos)
      << s;
  s = ReadNumpy(Path("dataset.npz") + ":x_val").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.message().find("has no array 'x_val'"), std::string::npos) << s;
  EXPECT_EQ(ReadNumpy(Path("dataset.npz")).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadNumpy(Path("none.npy")).status().code(), absl::StatusCode::kNotFound);
  // Several inputs and targets, each an array of its own shape (the trainer fits them to the
  // model); float targets are values (a regression's).
  absl::StatusOr<Dataset> several =
      LoadNumpyDataset(std::vector<std::string>{Path("v2.npy"), Path("v2.npy")},
                       std::vector<std::string>{Path("v2.npy")});
  ASSERT_TRUE(several.ok()) << several.status();
  EXPECT_EQ(several->inputs.size(), 2u);
  EXPECT_EQ(several->targets[0].values(), Want("v2"));
}

TEST_F(NumpyTest, WhatCannotBeReadIsNamed) {
  auto refused = [&](const std::string& file, const std::string& want) {
    absl::Status s = ReadNumpy(Path(file)).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << file << ": " << s;
    EXPECT_NE(s.message().find(Path(file)), std::string::npos) << s;
    EXPECT_NE(s.message().find(want), std::string::npos) << s;
  };
  refused("fortran.npy", "Fortran-ordered");
  refused("big.npy", "dtype >i4 is big-endian");
  std::string bytes;
  {
    std::ifstream in(Path("float64.npy"), std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::ofstream(Path("cut.npy"), std::ios::binary) << bytes.substr(0, bytes.size() - 8);
  refused("cut.npy", "needs 48");
  std::ofstream(Path("text.npy"), std::ios::binary) << "x,y\n1,2\n";
  refused("text.npy", "no \\x93NUMPY magic");
}

}  // namespace
}  // namespace lockstep::trainer
