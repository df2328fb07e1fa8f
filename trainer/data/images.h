#pragma once
// A directory of images by class folder, as Keras's image_dataset_from_directory reads one:
// DIR/<class>/*.png|jpg|jpeg, the classes in alphanumeric order of their folder names (a class's
// id is its place), every image decoded with Debian's libpng or libjpeg, converted to the
// model's channels (grayscale or RGB) and resized to its height and width with bilinear
// interpolation as tf.image.resize does it (half-pixel centres, no antialiasing). Values stay
// in [0, 255], as Keras's are; the data spec's input_scale scales them.
// Thread-safety: plain functions.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/data/dataset.h"

namespace lockstep::trainer {

struct Image {
  int64_t height = 0, width = 0, channels = 0;
  std::vector<float> pixels;  // [height, width, channels], 0-255
};

// One PNG or JPEG file (told apart by its first bytes) as `channels` (1 or 3) channels.
// DataLoss names the file and what the library said.
absl::StatusOr<Image> DecodeImage(const std::string& path, int64_t channels);

// `image` resized to height x width (bilinear, half-pixel centres).
Image Resize(const Image& image, int64_t height, int64_t width);

// Every image under `dir`'s class folders as [N, height, width, channels]; `classes` gets the
// class names. NotFound when `dir` has no class folder or no image. Decoded on `threads`
// threads (0: the machine's, data/parallel_for.h).
absl::StatusOr<Dataset> LoadImageFolder(const std::string& dir, int64_t height, int64_t width,
                                        int64_t channels, std::vector<std::string>* classes,
                                        int threads = 0);

}  // namespace lockstep::trainer
