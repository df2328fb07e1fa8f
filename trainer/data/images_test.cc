// Image folders: files Pillow wrote (PNG RGB, grayscale, RGBA, 16-bit; JPEG) decode to what
// Pillow decodes (JPEG within one level), the resize matches PyTorch's bilinear interpolation
// (tf.image.resize's), classes come in folder-name order, and bad files are named.
#include "trainer/data/images.h"

#include <gtest/gtest.h>

#include <cmath>

#include "trainer/testing/python_peer.h"
#include "trainer/testing/temp_dir.h"

namespace lockstep::trainer {
namespace {

class ImagesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<nlohmann::json> w =
        testing::RunPythonPeer("trainer/data/testdata/write_images.py", {tmp_.path().string()});
    if (absl::IsUnavailable(w.status())) GTEST_SKIP() << w.status();
    ASSERT_TRUE(w.ok()) << w.status();
    written_ = *w;
  }
  std::vector<float> Want(const std::string& file, const char* mode) const {
    return written_.at("pixels").at(file).at(mode).get<std::vector<float>>();
  }
  static float MaxDiff(const std::vector<float>& a, const std::vector<float>& b) {
    if (a.size() != b.size()) return 1e9f;
    float m = 0;
    for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
    return m;
  }
  testing::TempDir tmp_{"images_test"};
  nlohmann::json written_;
};

TEST_F(ImagesTest, DecodesAsPillowDoes) {
  absl::StatusOr<Image> a = DecodeImage(tmp_.Path("train/cat/a.png"), 3);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->height, 5);
  EXPECT_EQ(a->width, 7);
  EXPECT_EQ(a->pixels, Want("train/cat/a.png", "rgb"));
  absl::StatusOr<Image> b = DecodeImage(tmp_.Path("train/cat/b.jpg"), 3);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->height, 6);
  EXPECT_LE(MaxDiff(b->pixels, Want("train/cat/b.jpg", "rgb")), 1.0f);
  // A grayscale PNG, as gray and as RGB (the level on every channel).
  absl::StatusOr<Image> c = DecodeImage(tmp_.Path("train/dog/c.png"), 1);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->pixels, Want("train/dog/c.png", "gray"));
  absl::StatusOr<Image> c3 = DecodeImage(tmp_.Path("train/dog/c.png"), 3);
  ASSERT_TRUE(c3.ok());
  EXPECT_EQ(c3->pixels, Want("train/dog/c.png", "rgb"));
  // RGBA and 16-bit PNGs are read as 8-bit RGB or gray.
  absl::StatusOr<Image> d = DecodeImage(tmp_.Path("train/dog/d.png"), 3);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->pixels.size(), 4u * 5 * 3);
  absl::StatusOr<Image> e = DecodeImage(tmp_.Path("train/dog/e.png"), 1);
  ASSERT_TRUE(e.ok()) << e.status();
  ASSERT_EQ(e->pixels.size(), 12u);
  for (size_t i = 0; i < 12; ++i) {
    EXPECT_NEAR(e->pixels[i], std::round(static_cast<double>(i) * 5000 * 255 / 65535), 1.0) << i;
  }
}

TEST_F(ImagesTest, BilinearResizeMatchesPyTorch) {
  if (!written_.contains("resize")) GTEST_SKIP() << "PyTorch is not installed";
  const nlohmann::json& r = written_.at("resize");
  Image in{.height = r.at("h"), .width = r.at("w"), .channels = r.at("c"), .pixels = {}};
  in.pixels = r.at("in").get<std::vector<float>>();
  const Image out = Resize(in, r.at("out_h"), r.at("out_w"));
  EXPECT_LT(MaxDiff(out.pixels, r.at("out").get<std::vector<float>>()), 1e-3f);
  // The same size is the image itself.
  EXPECT_EQ(Resize(in, in.height, in.width).pixels, in.pixels);
}

TEST_F(ImagesTest, FoldersAreClassesAndBadFilesAreNamed) {
  std::vector<std::string> classes;
  absl::StatusOr<Dataset> d = LoadImageFolder(tmp_.Path("train"), 4, 6, 3, &classes);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(classes, (std::vector<std::string>{"cat", "dog"}));
  EXPECT_EQ(d->inputs[0].shape(), (Shape{5, 4, 6, 3}));  // notes.txt is not an image
  EXPECT_EQ(ClassIds(d->targets[0]), (std::vector<int32_t>{0, 0, 1, 1, 1}));
  for (float v : d->inputs[0].values()) EXPECT_TRUE(v >= 0 && v <= 255) << v;
  absl::Status s = LoadImageFolder(tmp_.Path("bad"), 4, 4, 3, &classes).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find(tmp_.Path("bad/x/broken.png")), std::string::npos) << s;
  s = DecodeImage(tmp_.Path("bad/x/text.jpg"), 3).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("neither a PNG nor a JPEG"), std::string::npos) << s;
  EXPECT_EQ(LoadImageFolder(tmp_.Path("train/cat"), 4, 4, 3, &classes).status().code(),
            absl::StatusCode::kNotFound);  // no class folders
  EXPECT_EQ(DecodeImage(tmp_.Path("train/cat/a.png"), 2).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace lockstep::trainer
