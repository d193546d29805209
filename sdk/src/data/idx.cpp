// IDX (MNIST format) reading, gzip or plain, strictly validated; the Fashion-MNIST loader.
//
// zlib's gzread() reads both: it looks for the gzip magic 1f 8b and otherwise copies the file
// as is ("transparent" mode), so one code path validates both forms. Memory grows with the bytes
// actually read, never with what a header claims, and never past IdxLimits::max_total_bytes.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include <zlib.h>

#include "edgefl/data.h"

namespace edgefl {

namespace {

constexpr const char* kDefaultFashionMnistDir = "/usr/share/datasets/fashion-mnist";
constexpr size_t kReadChunk = size_t(1) << 20;

bool fail(std::string* error, std::string message) {
  if (error != nullptr) *error = std::move(message);
  return false;
}

std::string hex_bytes(const uint8_t* p, size_t n) {
  static const char kHex[] = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) s += ' ';
    s += kHex[p[i] >> 4];
    s += kHex[p[i] & 15];
  }
  return s;
}

const char* idx_type_name(uint8_t type) {
  switch (type) {
    case 0x08: return "unsigned byte";
    case 0x09: return "signed byte";
    case 0x0B: return "int16";
    case 0x0C: return "int32";
    case 0x0D: return "float32";
    case 0x0E: return "float64";
    default: return "unknown";
  }
}

std::string dims_text(const std::vector<uint32_t>& dims) {
  std::string s;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i > 0) s += " x ";
    s += std::to_string(dims[i]);
  }
  return s;
}

// A gzFile that closes itself; reads report zlib's message without the path zlib prefixes.
class GzReader {
 public:
  explicit GzReader(const std::string& path) : path_(path) {}
  ~GzReader() {
    if (file_ != nullptr) gzclose(file_);
  }
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;

  bool open(std::string* message) {
    errno = 0;
    file_ = gzopen(path_.c_str(), "rb");
    if (file_ == nullptr) {
      *message = std::string("cannot open: ") + (errno != 0 ? strerror(errno) : "out of memory");
      return false;
    }
    gzbuffer(file_, 128 * 1024);         // before the first read; larger buffers read faster
    compressed_ = gzdirect(file_) == 0;  // looks at the first bytes: gzip magic or not
    return true;
  }

  const char* format() const { return compressed_ ? "gzip" : "plain"; }

  // Reads up to `n` bytes into `dst`; returns the count read. On a zlib or I/O error returns the
  // bytes read so far and sets *message (empty otherwise). A short count without a message is
  // the end of the (decompressed) data.
  size_t read(uint8_t* dst, size_t n, std::string* message) {
    size_t got = 0;
    message->clear();
    while (got < n) {
      const unsigned ask = unsigned(std::min(n - got, kReadChunk));
      const int r = gzread(file_, dst + got, ask);
      if (r < 0) {
        *message = zlib_message();
        return got;
      }
      if (r == 0) break;
      got += size_t(r);
    }
    if (got < n) {
      // gzread() reports a truncated or corrupt gzip stream through gzerror(), sometimes after
      // returning the bytes it managed to decode.
      std::string m = zlib_message();
      if (!m.empty()) *message = std::move(m);
    }
    return got;
  }

 private:
  std::string zlib_message() {
    int code = Z_OK;
    const char* m = gzerror(file_, &code);
    if (code == Z_OK || code == Z_STREAM_END) return std::string();
    std::string s = m != nullptr ? m : "unknown zlib error";
    const std::string prefix = path_ + ": ";
    if (s.compare(0, prefix.size(), prefix) == 0) s.erase(0, prefix.size());
    if (code == Z_ERRNO) return "read error: " + s;
    if (code == Z_BUF_ERROR) return "truncated gzip stream (" + s + ")";  // input ended early
    return "corrupt gzip stream (" + s + ")";
  }

  std::string path_;
  gzFile file_ = nullptr;
  bool compressed_ = false;
};

bool file_exists(const std::string& path) {
  FILE* f = fopen(path.c_str(), "rb");
  if (f == nullptr) return false;
  fclose(f);
  return true;
}

}  // namespace

bool read_idx_file(const std::string& path, IdxArray* out, std::string* error, const IdxLimits& limits) {
  if (out == nullptr) return fail(error, "read_idx_file: out is null");
  const std::string where = path + ": ";
  GzReader reader(path);
  std::string message;
  if (!reader.open(&message)) return fail(error, where + message);
  const std::string format = reader.format();

  uint8_t head[4];
  size_t got = reader.read(head, 4, &message);
  if (!message.empty()) return fail(error, where + message);
  if (got < 4) {
    return fail(error, where + "truncated: " + std::to_string(got) + " bytes (" + format +
                           "), an IDX header needs at least 4");
  }
  if (head[0] != 0 || head[1] != 0) {
    return fail(error, where + "bad magic " + hex_bytes(head, 4) + " (" + format +
                           "): an IDX file starts with 00 00 <type> <dims>");
  }
  if (head[2] != 0x08) {
    return fail(error, where + "element type 0x" + hex_bytes(head + 2, 1) + " (" + idx_type_name(head[2]) +
                           ") is not supported: only unsigned byte (0x08) is read");
  }
  const uint32_t ndims = head[3];
  if (ndims < 1 || ndims > limits.max_dims) {
    return fail(error, where + "bad dimension count " + std::to_string(ndims) + " (expected 1.." +
                           std::to_string(limits.max_dims) + ")");
  }
  uint8_t dim_bytes[4 * 255];
  got = reader.read(dim_bytes, 4 * size_t(ndims), &message);
  if (!message.empty()) return fail(error, where + message);
  if (got < 4 * size_t(ndims)) {
    return fail(error, where + "truncated header: " + std::to_string(ndims) + " dimension sizes need " +
                           std::to_string(4 * ndims) + " bytes after the magic, the file has " +
                           std::to_string(got));
  }
  std::vector<uint32_t> dims(ndims);
  uint64_t total = 1;
  for (uint32_t d = 0; d < ndims; ++d) {
    const uint8_t* p = dim_bytes + 4 * d;
    dims[d] = uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | uint32_t(p[3]);
  }
  for (uint32_t d = 0; d < ndims; ++d) {
    const uint32_t bound = d == 0 ? limits.max_items : limits.max_dim;
    if (dims[d] == 0 || dims[d] > bound) {
      return fail(error, where + "dimension " + std::to_string(d) + " has size " + std::to_string(dims[d]) +
                             " (allowed 1.." + std::to_string(bound) + "; dims " + dims_text(dims) + ")");
    }
    if (dims[d] > limits.max_total_bytes / total) {  // total * dims[d] > max, without overflow
      return fail(error, where + "too large: dims " + dims_text(dims) + " exceed the limit of " +
                             std::to_string(limits.max_total_bytes) + " bytes");
    }
    total *= dims[d];
  }

  // Grow with the bytes that really arrive: a lying header costs nothing.
  std::vector<uint8_t> data;
  data.reserve(size_t(std::min<uint64_t>(total, uint64_t(64) << 20)));
  while (data.size() < total) {
    const size_t want = size_t(std::min<uint64_t>(total - data.size(), kReadChunk));
    const size_t old = data.size();
    data.resize(old + want);
    got = reader.read(data.data() + old, want, &message);
    data.resize(old + got);
    if (!message.empty()) return fail(error, where + message);
    if (got < want) {
      return fail(error, where + "truncated: dims " + dims_text(dims) + " need " + std::to_string(total) +
                             " data bytes, the " + format + " file holds " + std::to_string(data.size()));
    }
  }
  // Exactly `total` bytes: one more read must find the end (and makes zlib check the gzip CRC).
  uint8_t extra = 0;
  got = reader.read(&extra, 1, &message);
  if (!message.empty()) return fail(error, where + message);
  if (got != 0) {
    return fail(error, where + "trailing bytes after the " + std::to_string(total) +
                           " data bytes that dims " + dims_text(dims) + " imply");
  }
  out->dims = std::move(dims);
  out->data = std::move(data);
  return true;
}

bool load_idx_dataset(const std::string& images_path, const std::string& labels_path, Dataset* out,
                      std::string* error, const Normalization& normalization, const IdxLimits& limits) {
  if (out == nullptr) return fail(error, "load_idx_dataset: out is null");
  if (!(normalization.stddev > 0.0f && normalization.stddev < 1e30f) ||
      !(normalization.mean > -1e30f && normalization.mean < 1e30f)) {
    return fail(error, "load_idx_dataset: normalization needs a finite mean and a finite stddev > 0");
  }
  IdxArray images, labels;
  if (!read_idx_file(images_path, &images, error, limits)) return false;
  if (images.dims.size() != 3) {
    return fail(error, images_path + ": images must be 3-dimensional (count x rows x cols), found dims " +
                           dims_text(images.dims));
  }
  if (!read_idx_file(labels_path, &labels, error, limits)) return false;
  if (labels.dims.size() != 1) {
    return fail(error,
                labels_path + ": labels must be 1-dimensional (count), found dims " + dims_text(labels.dims));
  }
  if (images.dims[0] != labels.dims[0]) {
    return fail(error, "image and label counts differ: " + images_path + " has " +
                           std::to_string(images.dims[0]) + ", " + labels_path + " has " +
                           std::to_string(labels.dims[0]));
  }

  Dataset d;
  d.count = images.dims[0];
  d.rows = images.dims[1];
  d.cols = images.dims[2];
  d.normalization = normalization;
  // One table for the 256 pixel values: the same float for the same byte, everywhere.
  float table[256];
  for (int p = 0; p < 256; ++p) {
    table[p] = (float(p) / 255.0f - normalization.mean) / normalization.stddev;
  }
  d.inputs.resize(images.data.size());
  for (size_t i = 0; i < images.data.size(); ++i) d.inputs[i] = table[images.data[i]];
  d.labels = std::move(labels.data);
  uint8_t max_label = 0;
  for (uint8_t l : d.labels) max_label = std::max(max_label, l);
  d.num_classes = uint32_t(max_label) + 1;
  *out = std::move(d);
  return true;
}

std::string fashion_mnist_dir() {
  const char* env = getenv("EDGEFL_FASHION_MNIST_DIR");
  if (env != nullptr && env[0] != '\0') return env;
  return kDefaultFashionMnistDir;
}

bool load_fashion_mnist(const std::string& dir, bool train, Dataset* out, std::string* error,
                        bool normalize) {
  if (out == nullptr) return fail(error, "load_fashion_mnist: out is null");
  const std::string base = dir.empty() ? fashion_mnist_dir() : dir;
  const std::string prefix = base + "/" + (train ? "train" : "t10k");
  std::string paths[2];
  const char* kinds[2] = {"-images-idx3-ubyte", "-labels-idx1-ubyte"};
  for (int k = 0; k < 2; ++k) {
    const std::string plain = prefix + kinds[k];
    if (file_exists(plain + ".gz")) {
      paths[k] = plain + ".gz";
    } else if (file_exists(plain)) {
      paths[k] = plain;
    } else {
      return fail(error, "Fashion-MNIST not found: neither " + plain + ".gz nor " + plain +
                             " can be opened (install the dataset with the project's setup script, or point "
                             "EDGEFL_FASHION_MNIST_DIR at a directory holding the four IDX files)");
    }
  }
  Dataset d;
  const Normalization norm = normalize ? kFashionMnistNormalization : Normalization();
  if (!load_idx_dataset(paths[0], paths[1], &d, error, norm)) return false;
  if (d.rows != 28 || d.cols != 28) {
    return fail(error, paths[0] + ": Fashion-MNIST images are 28 x 28, found " + std::to_string(d.rows) +
                           " x " + std::to_string(d.cols));
  }
  if (d.num_classes > 10) {
    return fail(error,
                paths[1] + ": Fashion-MNIST labels are 0..9, found " + std::to_string(d.num_classes - 1));
  }
  d.num_classes = 10;
  *out = std::move(d);
  return true;
}

}  // namespace edgefl
