#include "trainer/data/numpy.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "trainer/data/zip_archive.h"

namespace lockstep::trainer {
namespace {

constexpr int64_t kMaxElements = int64_t{1} << 40;

absl::Status NpyError(const std::string& name, const std::string& why) {
  return absl::DataLossError(name + ": " + why);
}

// The value of `key` in the header's Python dict literal ("{'descr': '<f4', 'fortran_order':
// False, 'shape': (3, 4), }"): a quoted string with its quotes, a tuple with its parentheses,
// or a bare word; empty when the key is absent.
std::string Field(const std::string& header, const std::string& key) {
  size_t at = std::string::npos;
  for (const char q : {'\'', '"'}) {
    at = header.find(std::string(1, q) + key + q);
    if (at != std::string::npos) break;
  }
  if (at == std::string::npos) return "";
  size_t i = header.find(':', at + key.size() + 2);
  if (i == std::string::npos) return "";
  i = header.find_first_not_of(" \t", i + 1);
  if (i == std::string::npos) return "";
  const char c = header[i];
  size_t end = std::string::npos;
  if (c == '(') {
    end = header.find(')', i);
  } else if (c == '\'' || c == '"') {
    end = header.find(c, i + 1);
  } else {
    end = header.find_first_of(",}", i);
    if (end != std::string::npos) --end;
  }
  if (end == std::string::npos) return "";
  return header.substr(i, end - i + 1);
}

template <typename T>
void Convert(const char* src, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, src + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
    out[i] = static_cast<float>(v);
  }
}

// fp16 to float (IEEE half).
float Half(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal
      int e = -1;
      uint32_t m = mant;
      do {
        ++e;
        m <<= 1;
      } while ((m & 0x400) == 0);
      bits = sign | ((127 - 15 - e) << 23) | ((m & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace

absl::StatusOr<NpyArray> ParseNpy(std::string_view bytes, const std::string& name) {
  if (bytes.size() < 10 || bytes.substr(0, 6) != std::string_view("\x93NUMPY", 6)) {
    return NpyError(name, "not a NumPy .npy file (no \\x93NUMPY magic)");
  }
  const auto major = static_cast<unsigned char>(bytes[6]);
  size_t header_len = 0, start = 0;
  if (major == 1) {
    header_len = static_cast<unsigned char>(bytes[8]) |
                 (static_cast<size_t>(static_cast<unsigned char>(bytes[9])) << 8);
    start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return NpyError(name, "a truncated .npy header");
    for (int i = 0; i < 4; ++i) {
      header_len |= static_cast<size_t>(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
    }
    start = 12;
  } else {
    return NpyError(name, absl::StrCat(".npy format version ", major, " is not 1, 2 or 3"));
  }
  if (bytes.size() < start + header_len) return NpyError(name, "a truncated .npy header");
  const std::string header(bytes.substr(start, header_len));
  NpyArray a;
  std::string descr = Field(header, "descr");
  const std::string fortran = Field(header, "fortran_order");
  const std::string shape = Field(header, "shape");
  if (descr.size() < 3 || shape.empty() || fortran.empty()) {
    return NpyError(name, "a .npy header without descr, fortran_order and shape: " + header);
  }
  descr = descr.substr(1, descr.size() - 2);  // unquoted
  a.dtype = descr;
  if (fortran.rfind("True", 0) == 0) {
    return NpyError(name, "a Fortran-ordered array (save it with np.ascontiguousarray)");
  }
  Shape dims;
  int64_t total = 1;
  for (size_t k = 0; k < shape.size();) {  // the tuple's numbers: "(60, 8, 8)", "(5,)", "()"
    if (std::isdigit(static_cast<unsigned char>(shape[k])) == 0) {
      ++k;
      continue;
    }
    int64_t v = 0;
    for (; k < shape.size() && std::isdigit(static_cast<unsigned char>(shape[k])) != 0; ++k) {
      v = v * 10 + (shape[k] - '0');
      if (v > kMaxElements) return NpyError(name, "a shape " + shape + " beyond any file");
    }
    if (v > 0 && total > kMaxElements / v)
      return NpyError(name, "a shape " + shape + " beyond any file");
    total *= v;
    dims.push_back(v);
  }
  if (descr.size() < 3 || (descr[0] != '<' && descr[0] != '|' && descr[0] != '=')) {
    return NpyError(name, "dtype " + descr + " is big-endian or not a number");
  }
  const char kind = descr[1];
  const int size = std::atoi(descr.c_str() + 2);
  const int64_t n = NumElements(dims);
  const std::string_view data = bytes.substr(start + header_len);
  if (static_cast<int64_t>(data.size()) < n * size) {
    return NpyError(name, absl::StrCat("holds ", data.size(), " bytes of data; shape ",
                                       ShapeString(dims), " of ", descr, " needs ", n * size));
  }
  a.values = Tensor(dims);
  float* out = a.values.data();
  const char* src = data.data();
  if (kind == 'f' && size == 4) {
    Convert<float>(src, n, out);
  } else if (kind == 'f' && size == 8) {
    Convert<double>(src, n, out);
  } else if (kind == 'f' && size == 2) {
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, src + 2 * i, 2);
      out[i] = Half(h);
    }
  } else if ((kind == 'u' || kind == 'b') && size == 1) {
    Convert<uint8_t>(src, n, out);
  } else if (kind == 'i' && size == 1) {
    Convert<int8_t>(src, n, out);
  } else if (kind == 'u' && size == 2) {
    Convert<uint16_t>(src, n, out);
  } else if (kind == 'i' && size == 2) {
    Convert<int16_t>(src, n, out);
  } else if (kind == 'u' && size == 4) {
    Convert<uint32_t>(src, n, out);
  } else if (kind == 'i' && size == 4) {
    Convert<int32_t>(src, n, out);
  } else if (kind == 'u' && size == 8) {
    Convert<uint64_t>(src, n, out);
  } else if (kind == 'i' && size == 8) {
    Convert<int64_t>(src, n, out);
  } else {
    return NpyError(
        name,
        "dtype " + descr + " is not a bool, integer or float (strings and objects are not read)");
  }
  return a;
}

absl::StatusOr<NpyArray> ReadNumpy(const std::string& where) {
  // FILE.npz:KEY: one member of the archive.
  if (const size_t colon = where.rfind(':');
      colon != std::string::npos && where.substr(0, colon).ends_with(".npz")) {
    const std::string path = where.substr(0, colon), key = where.substr(colon + 1);
    if (access(path.c_str(), F_OK) != 0) return absl::NotFoundError(path + ": no such file");
    absl::StatusOr<std::string> member = ReadZipMember(path, key + ".npy");
    if (!member.ok()) {
      if (absl::IsNotFound(member.status())) {
        return absl::NotFoundError(path + " has no array '" + key + "'");
      }
      return absl::DataLossError(std::string(member.status().message()));
    }
    return ParseNpy(*member, where);
  }
  if (where.ends_with(".npz")) {
    return absl::InvalidArgumentError(where + ": name the array in the archive, as FILE.npz:KEY");
  }
  const int fd = open(where.c_str(), O_RDONLY);
  if (fd < 0) {
    if (errno == ENOENT) return absl::NotFoundError(where + ": no such file");
    return absl::PermissionDeniedError(
        absl::StrCat("cannot read ", where, ": ", std::strerror(errno)));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || st.st_size == 0) {
    close(fd);
    return NpyError(where, "an empty file");
  }
  const auto size = static_cast<size_t>(st.st_size);
  void* map = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (map == MAP_FAILED) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot map ", where, ": ", std::strerror(errno)));
  }
  absl::StatusOr<NpyArray> a =
      ParseNpy(std::string_view(static_cast<const char*>(map), size), where);
  munmap(map, size);
  return a;
}

absl::StatusOr<Dataset> LoadNumpyDataset(const std::vector<std::string>& x,
                                         const std::vector<std::string>& y,
                                         const std::string& sample_weight) {
  Dataset d;
  std::string first;  // the first array, whose length the others must have
  for (size_t k = 0; k < x.size() + y.size(); ++k) {
    const bool input = k < x.size();
    const std::string& where = input ? x[k] : y[k - x.size()];
    absl::StatusOr<NpyArray> a = ReadNumpy(where);
    if (!a.ok()) return a.status();
    const Shape& shape = a->values.shape();
    if (shape.empty()) return NpyError(where, "a scalar, not [examples, ...]");
    if (k == 0) {
      first = where;
    } else if (shape[0] != d.size()) {
      return NpyError(where, absl::StrCat(shape[0], " rows; ", first, " has ", d.size()));
    }
    (input ? d.inputs : d.targets).push_back(std::move(a->values));
  }
  if (!sample_weight.empty()) {
    absl::StatusOr<NpyArray> w = ReadNumpy(sample_weight);
    if (!w.ok()) return w.status();
    const Shape& shape = w->values.shape();
    if (shape.empty() || NumElements(shape) != shape[0] || shape[0] != d.size()) {
      return NpyError(sample_weight, "sample weights of shape " + ShapeString(shape) + " for the " +
                                         std::to_string(d.size()) + " examples of " + first +
                                         "; one weight per example");
    }
    d.sample_weights = w->values.Reshaped({shape[0]});
  }
  return d;
}

absl::StatusOr<Dataset> LoadNumpyDataset(const std::string& x, const std::string& y) {
  return LoadNumpyDataset(std::vector{x}, std::vector{y});
}

}  // namespace lockstep::trainer
