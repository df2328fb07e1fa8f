#include "trainer/data/images.h"

#include <jpeglib.h>
#include <png.h>

#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "trainer/data/parallel_for.h"

namespace lockstep::trainer {
namespace {

namespace fs = std::filesystem;

absl::StatusOr<Image> DecodePng(const std::string& path, int64_t channels) {
  png_image img{};
  img.version = PNG_IMAGE_VERSION;
  if (png_image_begin_read_from_file(&img, path.c_str()) == 0) {
    return absl::DataLossError(path + ": not a readable PNG (" + img.message + ")");
  }
  img.format = channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  // A 16-bit image is scaled to 8 bits as TensorFlow's decoder does (its values taken as
  // sRGB-encoded, not linear light).
  img.flags |= PNG_IMAGE_FLAG_16BIT_sRGB;
  std::vector<png_byte> buf(PNG_IMAGE_SIZE(img));
  if (png_image_finish_read(&img, nullptr, buf.data(), 0, nullptr) == 0) {
    std::string why = img.message;
    png_image_free(&img);
    return absl::DataLossError(path + ": a damaged PNG (" + why + ")");
  }
  Image out{.height = img.height, .width = img.width, .channels = channels, .pixels = {}};
  out.pixels.assign(buf.begin(), buf.end());
  return out;
}

// libjpeg reports errors through a callback that must not return: it jumps back here.
struct JpegError {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};
void JpegFail(j_common_ptr cinfo) {
  auto* e = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, e->message);
  std::longjmp(e->jump, 1);
}
void JpegQuiet(j_common_ptr, int) {}

absl::StatusOr<Image> DecodeJpeg(const std::string& path, int64_t channels) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return absl::PermissionDeniedError("cannot read " + path);
  jpeg_decompress_struct cinfo{};
  JpegError err{};
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = JpegFail;
  err.mgr.emit_message = JpegQuiet;
  // Declared before the jump point, and not read after a jump (their values are then
  // indeterminate).
  std::vector<unsigned char> pixels;
  Image out;
  if (setjmp(err.jump) != 0) {
    jpeg_destroy_decompress(&cinfo);
    std::fclose(f);
    return absl::DataLossError(path + ": a damaged JPEG (" + std::string(err.message) + ")");
  }
  jpeg_create_decompress(&cinfo);
  jpeg_stdio_src(&cinfo, f);
  jpeg_read_header(&cinfo, TRUE);
  cinfo.out_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_start_decompress(&cinfo);
  const size_t row = static_cast<size_t>(cinfo.output_width) * cinfo.output_components;
  pixels.assign(row * cinfo.output_height, 0);
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW r = pixels.data() + row * cinfo.output_scanline;
    jpeg_read_scanlines(&cinfo, &r, 1);
  }
  jpeg_finish_decompress(&cinfo);
  out = Image{.height = cinfo.output_height,
              .width = cinfo.output_width,
              .channels = cinfo.output_components,
              .pixels = {}};
  jpeg_destroy_decompress(&cinfo);
  std::fclose(f);
  out.pixels.assign(pixels.begin(), pixels.end());
  return out;
}

bool IsImage(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return ext == ".png" || ext == ".jpg" || ext == ".jpeg";
}

}  // namespace

absl::StatusOr<Image> DecodeImage(const std::string& path, int64_t channels) {
  if (channels != 1 && channels != 3) {
    return absl::InvalidArgumentError("images have 1 (grayscale) or 3 (RGB) channels, not " +
                                      std::to_string(channels));
  }
  unsigned char magic[4] = {0, 0, 0, 0};
  {
    std::ifstream in(path, std::ios::binary);
    if (!in) return absl::NotFoundError(path + ": cannot be read");
    in.read(reinterpret_cast<char*>(magic), 4);
  }
  if (magic[0] == 0x89 && magic[1] == 'P' && magic[2] == 'N' && magic[3] == 'G') {
    return DecodePng(path, channels);
  }
  if (magic[0] == 0xff && magic[1] == 0xd8) return DecodeJpeg(path, channels);
  return absl::DataLossError(path + ": neither a PNG nor a JPEG");
}

Image Resize(const Image& in, int64_t height, int64_t width) {
  if (in.height == height && in.width == width) return in;
  Image out{.height = height, .width = width, .channels = in.channels, .pixels = {}};
  out.pixels.resize(static_cast<size_t>(height * width * in.channels));
  const float sy = static_cast<float>(in.height) / static_cast<float>(height);
  const float sx = static_cast<float>(in.width) / static_cast<float>(width);
  for (int64_t y = 0; y < height; ++y) {
    const float fy = std::max(0.0f, (static_cast<float>(y) + 0.5f) * sy - 0.5f);
    const auto y0 = std::min(static_cast<int64_t>(fy), in.height - 1);
    const int64_t y1 = std::min(y0 + 1, in.height - 1);
    const float wy = fy - static_cast<float>(y0);
    for (int64_t x = 0; x < width; ++x) {
      const float fx = std::max(0.0f, (static_cast<float>(x) + 0.5f) * sx - 0.5f);
      const auto x0 = std::min(static_cast<int64_t>(fx), in.width - 1);
      const int64_t x1 = std::min(x0 + 1, in.width - 1);
      const float wx = fx - static_cast<float>(x0);
      for (int64_t c = 0; c < in.channels; ++c) {
        auto at = [&](int64_t yy, int64_t xx) {
          return in.pixels[static_cast<size_t>((yy * in.width + xx) * in.channels + c)];
        };
        const float top = at(y0, x0) + (at(y0, x1) - at(y0, x0)) * wx;
        const float bottom = at(y1, x0) + (at(y1, x1) - at(y1, x0)) * wx;
        out.pixels[static_cast<size_t>((y * width + x) * in.channels + c)] =
            top + (bottom - top) * wy;
      }
    }
  }
  return out;
}

absl::StatusOr<Dataset> LoadImageFolder(const std::string& dir, int64_t height, int64_t width,
                                        int64_t channels, std::vector<std::string>* classes,
                                        int threads) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return absl::NotFoundError(dir + ": not a directory");
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.is_directory()) names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  if (names.empty()) {
    return absl::NotFoundError(dir + ": no class folders (images go in DIR/<class>/)");
  }
  Dataset d;
  std::vector<fs::path> files;
  std::vector<int32_t> labels;
  for (size_t k = 0; k < names.size(); ++k) {
    std::vector<fs::path> mine;
    for (const auto& e : fs::recursive_directory_iterator(fs::path(dir) / names[k], ec)) {
      if (e.is_regular_file() && IsImage(e.path())) mine.push_back(e.path());
    }
    std::sort(mine.begin(), mine.end());
    files.insert(files.end(), mine.begin(), mine.end());
    labels.insert(labels.end(), mine.size(), static_cast<int32_t>(k));
  }
  if (labels.empty()) return absl::NotFoundError(dir + ": no .png, .jpg or .jpeg images");
  // Decoded and resized across threads, each image into its own row.
  const int64_t row = height * width * channels;
  std::vector<float> values(files.size() * static_cast<size_t>(row));
  absl::Status decoded = ParallelFor(
      static_cast<int64_t>(files.size()), threads > 0 ? threads : DecodeThreads(),
      [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          absl::StatusOr<Image> img = DecodeImage(files[static_cast<size_t>(i)].string(), channels);
          if (!img.ok()) return img.status();
          const Image sized = Resize(*img, height, width);
          std::copy(sized.pixels.begin(), sized.pixels.end(), values.begin() + i * row);
        }
        return absl::OkStatus();
      });
  if (!decoded.ok()) return decoded;
  d.inputs.emplace_back(Shape{static_cast<int64_t>(labels.size()), height, width, channels},
                        std::move(values));
  d.targets.push_back(ClassTargets(labels));
  if (classes != nullptr) *classes = names;
  return d;
}

}  // namespace lockstep::trainer
