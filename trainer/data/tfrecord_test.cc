// TFRecord files: round trips through our writer and reader (plain and gzip, empty and large
// records), both directions against an independent Python peer (its own gzip and crcmod's
// CRC-32C), CRC-32C against published check values, and every kind of damage named with the
// file and the offset.
#include "trainer/data/tfrecord.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "absl/strings/escaping.h"
#include "trainer/data/crc32c.h"
#include "trainer/testing/python_peer.h"
#include "trainer/testing/temp_dir.h"

namespace lockstep::trainer {
namespace {

namespace fs = std::filesystem;

class TfRecordTest : public ::testing::Test {
 protected:
  std::string Path(const std::string& name) const { return tmp_.Path(name); }

  static std::vector<std::string> Records() {
    std::mt19937_64 rng(7);
    std::vector<std::string> out = {"", "a", std::string(1, '\0'), "tf.train.Example"};
    for (size_t n : {7u, 8u, 9u, 1000u, 300000u}) {
      std::string r(n, '\0');
      for (char& c : r) c = static_cast<char>(rng());
      out.push_back(r);
    }
    return out;
  }
  static void WriteAll(const std::string& path, Compression c,
                       const std::vector<std::string>& records) {
    auto w = RecordWriter::Create(path, c);
    ASSERT_TRUE(w.ok()) << w.status();
    for (const std::string& r : records) ASSERT_TRUE((*w)->Write(r).ok());
    ASSERT_TRUE((*w)->Close().ok());
  }
  // Every record of `path`, or the first error.
  static absl::StatusOr<std::vector<std::string>> ReadAll(const std::string& path) {
    auto r = RecordReader::Open(path);
    if (!r.ok()) return r.status();
    std::vector<std::string> out;
    std::string rec;
    for (;;) {
      absl::StatusOr<bool> more = (*r)->Next(&rec);
      if (!more.ok()) return more.status();
      if (!*more) return out;
      out.push_back(rec);
    }
  }
  static std::string Bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  static void Put(const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  }

  testing::TempDir tmp_{"tfrecord_test"};
  const fs::path& dir_ = tmp_.path();
};

TEST(Crc32cTest, MatchesPublishedCheckValues) {
  EXPECT_EQ(Crc32c("123456789"), 0xe3069283u);            // the CRC-32C check value
  EXPECT_EQ(Crc32c(std::string(32, '\0')), 0x8a9136aau);  // RFC 3720 B.4
  EXPECT_EQ(Crc32c(std::string(32, '\xff')), 0x62a8ab43u);
  EXPECT_EQ(Crc32c(""), 0u);
  // Continuing over a split gives the CRC of the whole; unaligned tails included.
  const std::string s = "The quick brown fox jumps over the lazy dog, twice over.";
  for (size_t cut = 0; cut <= s.size(); ++cut) {
    EXPECT_EQ(Crc32c(s.substr(cut), Crc32c(s.substr(0, cut))), Crc32c(s)) << cut;
  }
  for (uint32_t c : {0u, 1u, 0xa282ead8u, 0xffffffffu}) EXPECT_EQ(UnmaskCrc(MaskCrc(c)), c);
}

TEST_F(TfRecordTest, RoundTripsPlainAndGzip) {
  for (Compression c : {Compression::kNone, Compression::kGzip}) {
    const std::string path = Path(c == Compression::kGzip ? "r.tfrecord.gz" : "r.tfrecord");
    WriteAll(path, c, Records());
    auto r = RecordReader::Open(path);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ((*r)->compressed(), c == Compression::kGzip);
    absl::StatusOr<std::vector<std::string>> got = ReadAll(path);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, Records());
  }
  // An empty file is a file of no records.
  WriteAll(Path("empty"), Compression::kNone, {});
  EXPECT_TRUE(ReadAll(Path("empty"))->empty());
  EXPECT_EQ(RecordReader::Open(Path("missing")).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(TfRecordTest, AnIndependentPeerReadsOursAndWeReadItsFiles) {
  const std::vector<std::string> records = {"", "x", "hello tfrecord", std::string(5000, 'z')};
  for (Compression c : {Compression::kNone, Compression::kGzip}) {
    const bool gz = c == Compression::kGzip;
    // Ours, read by the peer.
    WriteAll(Path("ours"), c, records);
    absl::StatusOr<nlohmann::json> peer =
        testing::RunPythonPeer("trainer/data/testdata/tfrecord_peer.py", {"read", Path("ours")});
    if (absl::IsUnavailable(peer.status())) GTEST_SKIP() << peer.status();
    ASSERT_TRUE(peer.ok()) << peer.status();
    ASSERT_EQ(peer->size(), records.size());
    for (size_t i = 0; i < records.size(); ++i) {
      EXPECT_EQ((*peer)[i].get<std::string>(), absl::BytesToHexString(records[i])) << i;
    }
    // The peer's, read by us.
    std::vector<std::string> args = {"write", Path("theirs"), gz ? "gzip" : "none"};
    for (const std::string& r : records) args.push_back(absl::BytesToHexString(r));
    absl::StatusOr<nlohmann::json> wrote =
        testing::RunPythonPeer("trainer/data/testdata/tfrecord_peer.py", args);
    ASSERT_TRUE(wrote.ok()) << wrote.status();
    EXPECT_EQ(wrote->at("written").get<size_t>(), records.size());
    absl::StatusOr<std::vector<std::string>> got = ReadAll(Path("theirs"));
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, records);
  }
}

TEST_F(TfRecordTest, DamageIsNamedWithTheFileAndTheOffset) {
  WriteAll(Path("good"), Compression::kNone, {"first", "second record", "third"});
  const std::string good = Bytes(Path("good"));
  const int64_t second = 16 + 5;  // the first record's frame
  auto expect_loss = [&](const std::string& name, const std::string& bytes, int64_t offset,
                         const std::string& what, size_t before) {
    Put(Path(name), bytes);
    auto r = RecordReader::Open(Path(name));
    ASSERT_TRUE(r.ok());
    std::string rec;
    for (size_t i = 0; i < before; ++i) ASSERT_TRUE(*(*r)->Next(&rec)) << name;
    absl::StatusOr<bool> more = (*r)->Next(&rec);
    ASSERT_FALSE(more.ok()) << name;
    EXPECT_EQ(more.status().code(), absl::StatusCode::kDataLoss);
    const std::string msg(more.status().message());
    EXPECT_NE(msg.find(Path(name)), std::string::npos) << msg;
    EXPECT_NE(msg.find("offset " + std::to_string(offset)), std::string::npos) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
  };
  // Truncated inside the second record's header, and inside its data.
  expect_loss("header", good.substr(0, second + 5), second, "ends inside its 12-byte header", 1);
  expect_loss("data", good.substr(0, second + 12 + 4), second, "ends inside its 13-byte data", 1);
  // A flipped bit in the second record's length, and in its data.
  std::string bad_len = good;
  bad_len[second + 1] ^= 0x10;
  expect_loss("length", bad_len, second, "the length's CRC does not match", 1);
  std::string bad_data = good;
  bad_data[second + 12 + 3] ^= 0x01;
  expect_loss("crc", bad_data, second, "the data's CRC does not match", 1);
  // After a bad data CRC the next record is still read (a caller may skip the corrupt one);
  // after a bad length nothing more is.
  {
    Put(Path("skip"), bad_data);
    auto r = RecordReader::Open(Path("skip"));
    std::string rec;
    ASSERT_TRUE(*(*r)->Next(&rec));
    EXPECT_FALSE((*r)->Next(&rec).ok());
    absl::StatusOr<bool> more = (*r)->Next(&rec);
    ASSERT_TRUE(more.ok() && *more) << more.status();
    EXPECT_EQ(rec, "third");
    Put(Path("stop"), bad_len);
    r = RecordReader::Open(Path("stop"));
    ASSERT_TRUE(*(*r)->Next(&rec));
    EXPECT_FALSE((*r)->Next(&rec).ok());
    more = (*r)->Next(&rec);
    ASSERT_TRUE(more.ok());
    EXPECT_FALSE(*more);
  }
  // A length over the limit with a valid CRC is refused, not allocated.
  {
    std::string huge(12, '\0');
    const uint64_t n = RecordReader::kMaxRecord + 1;
    for (int i = 0; i < 8; ++i) huge[static_cast<size_t>(i)] = static_cast<char>(n >> (8 * i));
    const uint32_t crc = MaskCrc(Crc32c(huge.substr(0, 8)));
    for (int i = 0; i < 4; ++i)
      huge[static_cast<size_t>(8 + i)] = static_cast<char>(crc >> (8 * i));
    expect_loss("huge", huge, 0, "over the", 0);
  }
  // A truncated gzip stream: its records up to the cut, then an error naming the file.
  WriteAll(Path("good.gz"), Compression::kGzip, {"first", std::string(100000, 'q'), "third"});
  const std::string gz = Bytes(Path("good.gz"));
  Put(Path("cut.gz"), gz.substr(0, gz.size() / 2));
  absl::StatusOr<std::vector<std::string>> got = ReadAll(Path("cut.gz"));
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(got.status().message().find(Path("cut.gz")), std::string::npos) << got.status();
}

}  // namespace
}  // namespace lockstep::trainer
