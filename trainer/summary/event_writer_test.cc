// TensorBoard event files: named so TensorBoard finds them, and read back by an independent
// reader (TFRecord CRCs recomputed with crcmod, each record decoded with python3-protobuf as
// tensorflow.Event declared from TensorFlow's field numbers): the file version first, then
// every scalar at its step.
#include "trainer/summary/event_writer.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "trainer/testing/python_peer.h"

namespace lockstep::trainer {
namespace {

namespace fs = std::filesystem;

TEST(EventWriterTest, TensorBoardReadsTheScalars) {
  const fs::path dir = fs::temp_directory_path() / ("events_test." + std::to_string(getpid()));
  fs::remove_all(dir);
  auto w = EventWriter::Create((dir / "train").string());
  ASSERT_TRUE(w.ok()) << w.status();
  const std::string name = fs::path((*w)->path()).filename().string();
  EXPECT_EQ(name.rfind("events.out.tfevents.", 0), 0u) << name;  // TensorBoard's glob
  EXPECT_EQ(fs::path((*w)->path()).parent_path(), dir / "train");
  ASSERT_TRUE((*w)->Scalars(100, {{"batch_loss", 0.75}, {"batch_accuracy", 0.5}}, 1.7e9).ok());
  ASSERT_TRUE((*w)->Scalars(200, {{"batch_loss", 0.25}, {"learning_rate", 1e-3}}).ok());
  // Flushed events are readable while the file is open, as TensorBoard reads a live run.
  ASSERT_TRUE((*w)->Flush().ok());
  absl::StatusOr<nlohmann::json> events =
      testing::RunPythonPeer("trainer/summary/testdata/read_events.py", {(*w)->path()});
  if (absl::IsUnavailable(events.status())) {
    fs::remove_all(dir);
    GTEST_SKIP() << events.status();
  }
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 3u) << *events;
  EXPECT_EQ((*events)[0].at("file_version"), "brain.Event:2");
  EXPECT_GT((*events)[0].at("wall_time").get<double>(), 1.6e9);
  EXPECT_EQ((*events)[1].at("step"), 100);
  EXPECT_DOUBLE_EQ((*events)[1].at("wall_time").get<double>(), 1.7e9);
  EXPECT_FLOAT_EQ((*events)[1].at("scalars").at("batch_loss").get<float>(), 0.75f);
  EXPECT_FLOAT_EQ((*events)[1].at("scalars").at("batch_accuracy").get<float>(), 0.5f);
  EXPECT_EQ((*events)[2].at("step"), 200);
  EXPECT_FLOAT_EQ((*events)[2].at("scalars").at("learning_rate").get<float>(), 1e-3f);
  ASSERT_TRUE((*w)->Close().ok());
  // A second writer in the same directory makes its own file.
  auto w2 = EventWriter::Create((dir / "train").string());
  ASSERT_TRUE(w2.ok());
  EXPECT_NE((*w2)->path(), (*w)->path());
  fs::remove_all(dir);
}

TEST(EventWriterTest, AnUnwritableDirectoryIsNamed) {
  auto w = EventWriter::Create("/proc/no-such-place/train");
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("/proc/no-such-place/train"), std::string::npos)
      << w.status();
}

}  // namespace
}  // namespace lockstep::trainer
