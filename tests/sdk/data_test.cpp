// tests/sdk/data_test.cpp: IDX / Fashion-MNIST loading and client partitions (edgefl/data.h).
//
// The real Fashion-MNIST is installed by the project's setup script; the tests that need it fail
// (with the loader's message) when it is missing, they never skip. Small IDX fixtures are written
// to a fresh temporary directory.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <zlib.h>

#include "edgefl/data.h"

namespace {

namespace fs = std::filesystem;
using edgefl::Dataset;
using edgefl::IdxArray;
using edgefl::PartitionKind;
using edgefl::PartitionSpec;
using Partition = std::vector<std::vector<uint32_t>>;

// A fresh directory under the system temp dir, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "edgefl_data_test_XXXXXX").string();
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    REQUIRE(mkdtemp(buf.data()) != nullptr);
    path_ = buf.data();
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::vector<uint8_t> idx_bytes(uint8_t type, const std::vector<uint32_t>& dims,
                               const std::vector<uint8_t>& data) {
  std::vector<uint8_t> b = {0, 0, type, uint8_t(dims.size())};
  for (uint32_t d : dims) {
    for (int s = 24; s >= 0; s -= 8) b.push_back(uint8_t(d >> s));
  }
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

void write_plain(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  REQUIRE(f.good());
  f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  REQUIRE(f.good());
}

std::vector<uint8_t> gzip_bytes(const std::vector<uint8_t>& raw) {
  z_stream z{};
  REQUIRE(deflateInit2(&z, 9, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK);  // +16: gzip wrapper
  std::vector<uint8_t> out(deflateBound(&z, uLong(raw.size())) + 64);
  z.next_in = const_cast<Bytef*>(raw.data());
  z.avail_in = uInt(raw.size());
  z.next_out = out.data();
  z.avail_out = uInt(out.size());
  REQUIRE(deflate(&z, Z_FINISH) == Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// Pixels of a small fixture: count images of rows x cols, distinct and covering 0..255.
std::vector<uint8_t> fixture_pixels(size_t count, size_t rows, size_t cols) {
  std::vector<uint8_t> p(count * rows * cols);
  for (size_t i = 0; i < p.size(); ++i) p[i] = uint8_t((i * 37 + 11) % 256);
  return p;
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// read_idx_file() on `bytes` written to a file: must fail, with an error naming the file and
// containing `expect`.
void expect_idx_rejected(const TempDir& dir, const std::vector<uint8_t>& bytes, const std::string& expect,
                         const edgefl::IdxLimits& limits = edgefl::IdxLimits()) {
  const std::string path = dir.file("bad.idx");
  write_plain(path, bytes);
  IdxArray out;
  out.dims = {7};
  std::string error;
  CHECK_FALSE(edgefl::read_idx_file(path, &out, &error, limits));
  INFO("error: ", error);
  CHECK(contains(error, path));
  CHECK(contains(error, expect));
  CHECK(out.dims == std::vector<uint32_t>{7});  // unchanged on failure
}

Dataset load_fashion_or_fail(bool train, bool normalize = true) {
  Dataset d;
  std::string error;
  const bool ok = edgefl::load_fashion_mnist("", train, &d, &error, normalize);
  INFO(
      "Fashion-MNIST is installed by the project's setup script (package dataset-fashion-mnist) into "
      "/usr/share/datasets/fashion-mnist, or set EDGEFL_FASHION_MNIST_DIR; loader said: ",
      error);
  REQUIRE(ok);
  return d;
}

// The training set, loaded once for all partition tests.
const Dataset& fashion_train() {
  static const Dataset d = load_fashion_or_fail(true);
  return d;
}

std::vector<double> distribution(const std::vector<size_t>& hist) {
  double total = 0;
  for (size_t h : hist) total += double(h);
  std::vector<double> p(hist.size());
  for (size_t i = 0; i < hist.size(); ++i) p[i] = total > 0 ? double(hist[i]) / total : 0.0;
  return p;
}

// Mean over clients of the total-variation distance between a client's label distribution and
// the global one: 0 for identical mixtures, 1 for disjoint ones.
double mean_tv_distance(const std::vector<uint8_t>& labels, const Partition& parts, size_t classes) {
  std::vector<uint32_t> all(labels.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = uint32_t(i);
  const std::vector<double> global = distribution(edgefl::label_histogram(labels, all, classes));
  double sum = 0;
  for (const auto& part : parts) {
    const std::vector<double> local = distribution(edgefl::label_histogram(labels, part, classes));
    double tv = 0;
    for (size_t c = 0; c < classes; ++c) tv += std::fabs(local[c] - global[c]);
    sum += tv / 2;
  }
  return sum / double(parts.size());
}

// Every index in [0, n) exactly once; every client non-empty and ascending.
void check_exact_cover(const Partition& parts, size_t n, size_t clients) {
  REQUIRE(parts.size() == clients);
  std::vector<uint8_t> seen(n, 0);
  size_t total = 0;
  for (size_t c = 0; c < parts.size(); ++c) {
    INFO("client ", c);
    CHECK_FALSE(parts[c].empty());
    CHECK(std::is_sorted(parts[c].begin(), parts[c].end()));
    for (uint32_t i : parts[c]) {
      REQUIRE(i < n);
      CHECK(seen[i] == 0);
      seen[i] = 1;
    }
    total += parts[c].size();
  }
  CHECK(total == n);
}

PartitionSpec spec_of(const std::string& text) {
  PartitionSpec spec;
  std::string error;
  INFO("spec: ", text, " error: ", error);
  REQUIRE(edgefl::parse_partition_spec(text, &spec, &error));
  return spec;
}

Partition partition_ok(const std::vector<uint8_t>& labels, size_t clients, const std::string& spec,
                       uint64_t seed) {
  std::string error;
  Partition p = edgefl::partition(labels, clients, spec_of(spec), seed, &error);
  INFO("spec ", spec, ": ", error);
  REQUIRE(p.size() == clients);
  return p;
}

// FNV-1a over the client sizes and indices: pins a partition in one number.
uint64_t fingerprint(const Partition& parts) {
  uint64_t h = 0xCBF29CE484222325ull;
  auto mix = [&h](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xFF;
      h *= 0x100000001B3ull;
    }
  };
  for (const auto& p : parts) {
    mix(p.size());
    for (uint32_t i : p) mix(i);
  }
  return h;
}

// A fixed synthetic label vector: 5000 labels over 10 classes with unequal class sizes.
std::vector<uint8_t> synthetic_labels() {
  std::vector<uint8_t> l(5000);
  for (size_t i = 0; i < l.size(); ++i) l[i] = uint8_t((i * i + 3 * i) % 10 < 7 ? i % 10 : (i / 7) % 10);
  return l;
}

}  // namespace

TEST_SUITE("data") {
  // ----- Fashion-MNIST -----------------------------------------------------------------------------

  TEST_CASE("the Fashion-MNIST training set has 60000 28x28 images with 6000 of each class") {
    const Dataset& d = fashion_train();
    CHECK(d.count == 60000);
    CHECK(d.rows == 28);
    CHECK(d.cols == 28);
    CHECK(d.dim() == 784);
    CHECK(d.num_classes == 10);
    REQUIRE(d.labels.size() == d.count);
    REQUIRE(d.inputs.size() == d.count * d.dim());
    std::vector<size_t> counts(256, 0);
    for (uint8_t l : d.labels) ++counts[l];
    for (size_t c = 0; c < 10; ++c) CHECK(counts[c] == 6000);
    for (size_t c = 10; c < 256; ++c) CHECK(counts[c] == 0);
  }

  TEST_CASE("the Fashion-MNIST normalization constants make the training inputs zero-mean, unit-variance") {
    const Dataset& d = fashion_train();
    CHECK(d.normalization.mean == edgefl::kFashionMnistNormalization.mean);
    CHECK(d.normalization.stddev == edgefl::kFashionMnistNormalization.stddev);
    double sum = 0, sq = 0;
    for (float x : d.inputs) {
      sum += x;
      sq += double(x) * x;
    }
    const double mean = sum / double(d.inputs.size());
    const double var = sq / double(d.inputs.size()) - mean * mean;
    CHECK(std::fabs(mean) < 0.01);  // 0.2860 and 0.3530 are rounded to 4 digits
    CHECK(std::fabs(std::sqrt(var) - 1.0) < 0.01);
  }

  TEST_CASE(
      "the Fashion-MNIST test set has 10000 images with 1000 of each class, scaled to [0, 1] on request") {
    const Dataset d = load_fashion_or_fail(false, /*normalize=*/false);
    CHECK(d.count == 10000);
    CHECK(d.rows == 28);
    CHECK(d.cols == 28);
    CHECK(d.num_classes == 10);
    std::vector<size_t> counts(10, 0);
    for (uint8_t l : d.labels) {
      REQUIRE(l < 10);
      ++counts[l];
    }
    for (size_t c = 0; c < 10; ++c) CHECK(counts[c] == 1000);
    float lo = 1, hi = 0;
    for (float x : d.inputs) {
      lo = std::min(lo, x);
      hi = std::max(hi, x);
    }
    CHECK(lo == 0.0f);
    CHECK(hi == 1.0f);
    CHECK(d.normalization.mean == 0.0f);
    CHECK(d.normalization.stddev == 1.0f);
  }

  TEST_CASE("EDGEFL_FASHION_MNIST_DIR overrides the default Fashion-MNIST directory") {
    TempDir dir;
    const std::vector<uint8_t> pixels = fixture_pixels(3, 28, 28);
    write_plain(dir.file("train-images-idx3-ubyte"), idx_bytes(0x08, {3, 28, 28}, pixels));  // plain
    write_plain(dir.file("train-labels-idx1-ubyte.gz"), gzip_bytes(idx_bytes(0x08, {3}, {9, 0, 4})));

    const char* old = getenv("EDGEFL_FASHION_MNIST_DIR");
    const std::string saved = old != nullptr ? old : "";
    REQUIRE(setenv("EDGEFL_FASHION_MNIST_DIR", dir.path().c_str(), 1) == 0);
    CHECK(edgefl::fashion_mnist_dir() == dir.path());
    Dataset d;
    std::string error;
    const bool ok = edgefl::load_fashion_mnist("", true, &d, &error);
    if (old != nullptr) {
      setenv("EDGEFL_FASHION_MNIST_DIR", saved.c_str(), 1);
    } else {
      unsetenv("EDGEFL_FASHION_MNIST_DIR");
    }
    INFO("error: ", error);
    REQUIRE(ok);
    CHECK(d.count == 3);
    CHECK(d.labels == std::vector<uint8_t>{9, 0, 4});
    CHECK(d.num_classes == 10);
    if (old == nullptr) CHECK(edgefl::fashion_mnist_dir() == "/usr/share/datasets/fashion-mnist");
  }

  TEST_CASE("a missing Fashion-MNIST directory is an error naming the files and the override") {
    Dataset d;
    std::string error;
    CHECK_FALSE(edgefl::load_fashion_mnist("/nonexistent/edgefl-fmnist", false, &d, &error));
    INFO("error: ", error);
    CHECK(contains(error, "/nonexistent/edgefl-fmnist/t10k-images-idx3-ubyte"));
    CHECK(contains(error, "EDGEFL_FASHION_MNIST_DIR"));
    CHECK(d.count == 0);
  }

  TEST_CASE("Fashion-MNIST rejects images that are not 28x28 and labels above 9") {
    TempDir dir;
    write_plain(dir.file("t10k-images-idx3-ubyte"), idx_bytes(0x08, {2, 27, 28}, fixture_pixels(2, 27, 28)));
    write_plain(dir.file("t10k-labels-idx1-ubyte"), idx_bytes(0x08, {2}, {1, 2}));
    Dataset d;
    std::string error;
    CHECK_FALSE(edgefl::load_fashion_mnist(dir.path(), false, &d, &error));
    CHECK(contains(error, "28 x 28"));
    write_plain(dir.file("t10k-images-idx3-ubyte"), idx_bytes(0x08, {2, 28, 28}, fixture_pixels(2, 28, 28)));
    write_plain(dir.file("t10k-labels-idx1-ubyte"), idx_bytes(0x08, {2}, {1, 10}));
    CHECK_FALSE(edgefl::load_fashion_mnist(dir.path(), false, &d, &error));
    CHECK(contains(error, "0..9"));
    write_plain(dir.file("t10k-labels-idx1-ubyte"), idx_bytes(0x08, {2}, {1, 9}));
    CHECK(edgefl::load_fashion_mnist(dir.path(), false, &d, &error));
  }

  // ----- IDX files ---------------------------------------------------------------------------------

  TEST_CASE("gzip and plain IDX files load to the same dataset") {
    TempDir dir;
    const std::vector<uint8_t> pixels = fixture_pixels(5, 4, 3);
    const std::vector<uint8_t> labels = {3, 1, 4, 1, 5};
    const auto images_idx = idx_bytes(0x08, {5, 4, 3}, pixels);
    const auto labels_idx = idx_bytes(0x08, {5}, labels);
    write_plain(dir.file("img"), images_idx);
    write_plain(dir.file("lab"), labels_idx);
    write_plain(dir.file("img.gz"), gzip_bytes(images_idx));
    write_plain(dir.file("lab.gz"), gzip_bytes(labels_idx));

    Dataset plain, gz, mixed;
    std::string error;
    REQUIRE(edgefl::load_idx_dataset(dir.file("img"), dir.file("lab"), &plain, &error));
    REQUIRE(edgefl::load_idx_dataset(dir.file("img.gz"), dir.file("lab.gz"), &gz, &error));
    // Detection is by content, not by name: a gzip file without .gz loads too.
    write_plain(dir.file("img_noext"), gzip_bytes(images_idx));
    REQUIRE(edgefl::load_idx_dataset(dir.file("img_noext"), dir.file("lab"), &mixed, &error));

    for (const Dataset* d : {&plain, &gz, &mixed}) {
      CHECK(d->count == 5);
      CHECK(d->rows == 4);
      CHECK(d->cols == 3);
      CHECK(d->dim() == 12);
      CHECK(d->num_classes == 6);  // largest label + 1
      CHECK(d->labels == labels);
      REQUIRE(d->inputs.size() == pixels.size());
      for (size_t i = 0; i < pixels.size(); ++i) CHECK(d->inputs[i] == float(pixels[i]) / 255.0f);
      CHECK(d->input(2)[0] == float(pixels[24]) / 255.0f);
    }

    IdxArray raw;
    REQUIRE(edgefl::read_idx_file(dir.file("img.gz"), &raw, &error));
    CHECK(raw.dims == std::vector<uint32_t>{5, 4, 3});
    CHECK(raw.data == pixels);
  }

  TEST_CASE("normalization maps pixel p to (p / 255 - mean) / stddev") {
    TempDir dir;
    std::vector<uint8_t> pixels(256);
    for (int i = 0; i < 256; ++i) pixels[i] = uint8_t(i);
    write_plain(dir.file("img"), idx_bytes(0x08, {4, 8, 8}, pixels));
    write_plain(dir.file("lab"), idx_bytes(0x08, {4}, {0, 1, 2, 3}));
    Dataset d;
    std::string error;
    REQUIRE(edgefl::load_idx_dataset(dir.file("img"), dir.file("lab"), &d, &error,
                                     edgefl::kFashionMnistNormalization));
    for (int p = 0; p < 256; ++p) {
      const double expect = (p / 255.0 - 0.2860) / 0.3530;
      CHECK(d.inputs[p] == doctest::Approx(expect).epsilon(1e-5));
    }
    CHECK_FALSE(edgefl::load_idx_dataset(dir.file("img"), dir.file("lab"), &d, &error,
                                         edgefl::Normalization{0.0f, 0.0f}));
    CHECK(contains(error, "stddev"));
  }

  TEST_CASE("truncated IDX files are rejected, plain and gzip") {
    TempDir dir;
    const auto good = idx_bytes(0x08, {10, 4, 4}, fixture_pixels(10, 4, 4));
    // Data one byte short, plain and gzip.
    std::vector<uint8_t> short_data(good.begin(), good.end() - 1);
    expect_idx_rejected(dir, short_data, "truncated");
    expect_idx_rejected(dir, gzip_bytes(short_data), "truncated");
    // Header cut inside the dimension sizes, and an empty file.
    expect_idx_rejected(dir, std::vector<uint8_t>(good.begin(), good.begin() + 9), "truncated header");
    expect_idx_rejected(dir, {}, "truncated");
    expect_idx_rejected(dir, {0, 0}, "truncated");
    // A gzip stream cut in the middle (zlib: unexpected end of file).
    const auto gz = gzip_bytes(good);
    expect_idx_rejected(dir, std::vector<uint8_t>(gz.begin(), gz.begin() + long(gz.size() / 2)), "gzip");
    // A gzip stream without its 8-byte trailer (CRC32 + length).
    expect_idx_rejected(dir, std::vector<uint8_t>(gz.begin(), gz.end() - 8), "gzip");
  }

  TEST_CASE("corrupt gzip streams are rejected") {
    TempDir dir;
    const auto good = idx_bytes(0x08, {10, 4, 4}, fixture_pixels(10, 4, 4));
    const auto gz = gzip_bytes(good);
    auto bad_crc = gz;
    bad_crc[bad_crc.size() - 8] ^= 0x5A;  // the CRC32 of the trailer
    expect_idx_rejected(dir, bad_crc, "corrupt gzip");
    auto bad_length = gz;
    bad_length[bad_length.size() - 1] ^= 0x01;  // the ISIZE of the trailer
    expect_idx_rejected(dir, bad_length, "corrupt gzip");
    auto bad_method = gz;
    bad_method[2] = 7;  // compression method (only 8, deflate, exists)
    expect_idx_rejected(dir, bad_method, "gzip");
  }

  TEST_CASE("bad magic, unsupported types and impossible dimension counts are rejected") {
    TempDir dir;
    auto b = idx_bytes(0x08, {2, 2, 2}, fixture_pixels(2, 2, 2));
    auto bad = b;
    bad[0] = 0x12;
    expect_idx_rejected(dir, bad, "bad magic 12 00 08 03");
    bad = b;
    bad[1] = 0x01;
    expect_idx_rejected(dir, bad, "bad magic");
    expect_idx_rejected(dir, idx_bytes(0x0D, {2, 2, 2}, std::vector<uint8_t>(32, 0)), "float32");
    expect_idx_rejected(dir, idx_bytes(0x0D, {2, 2, 2}, std::vector<uint8_t>(32, 0)), "not supported");
    expect_idx_rejected(dir, idx_bytes(0x42, {2}, {1, 2}), "unknown");
    expect_idx_rejected(dir, {0, 0, 8, 0}, "dimension count 0");
    expect_idx_rejected(dir, idx_bytes(0x08, {1, 1, 1, 1, 1}, {7}), "dimension count 5");
    // A text file and a PNG signature.
    const std::string text = "hello, this is not an IDX file\n";
    expect_idx_rejected(dir, std::vector<uint8_t>(text.begin(), text.end()), "bad magic");
    expect_idx_rejected(dir, {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A}, "bad magic");
  }

  TEST_CASE("oversized and zero dimensions are rejected before anything is allocated") {
    TempDir dir;
    // Headers only: a reader that trusted them would allocate gigabytes.
    expect_idx_rejected(dir, idx_bytes(0x08, {10000001, 28, 28}, {}), "dimension 0 has size 10000001");
    expect_idx_rejected(dir, idx_bytes(0x08, {0xFFFFFFFFu}, {}), "dimension 0 has size 4294967295");
    expect_idx_rejected(dir, idx_bytes(0x08, {10, 4097, 28}, {}), "dimension 1 has size 4097");
    expect_idx_rejected(dir, idx_bytes(0x08, {10, 28, 0}, {}), "dimension 2 has size 0");
    expect_idx_rejected(dir, idx_bytes(0x08, {0}, {}), "dimension 0 has size 0");
    // Within every per-dimension bound but over the total: 10M x 4096 x 4096.
    expect_idx_rejected(dir, idx_bytes(0x08, {10000000, 4096, 4096}, {}), "too large");
    // The header is believed only up to the bytes that really exist.
    expect_idx_rejected(dir, idx_bytes(0x08, {1000000, 28, 28}, std::vector<uint8_t>(1000, 1)), "truncated");
    edgefl::IdxLimits tight;
    tight.max_total_bytes = 100;
    expect_idx_rejected(dir, idx_bytes(0x08, {10, 4, 4}, fixture_pixels(10, 4, 4)), "exceed the limit of 100",
                        tight);
  }

  TEST_CASE("trailing bytes after the declared data are rejected") {
    TempDir dir;
    auto b = idx_bytes(0x08, {3}, {1, 2, 3});
    b.push_back(4);
    expect_idx_rejected(dir, b, "trailing bytes");
    expect_idx_rejected(dir, gzip_bytes(b), "trailing bytes");
  }

  TEST_CASE("a file that cannot be opened is an error naming it") {
    IdxArray out;
    std::string error;
    CHECK_FALSE(edgefl::read_idx_file("/nonexistent/edgefl/labels.idx", &out, &error));
    CHECK(contains(error, "/nonexistent/edgefl/labels.idx"));
    CHECK(contains(error, "cannot open"));
    TempDir dir;  // a directory is not a file
    CHECK_FALSE(edgefl::read_idx_file(dir.path(), &out, &error));
    CHECK(contains(error, dir.path()));
  }

  TEST_CASE("load_idx_dataset rejects mismatched counts and wrong ranks") {
    TempDir dir;
    write_plain(dir.file("img"), idx_bytes(0x08, {3, 2, 2}, fixture_pixels(3, 2, 2)));
    write_plain(dir.file("lab2"), idx_bytes(0x08, {2}, {0, 1}));
    write_plain(dir.file("lab3"), idx_bytes(0x08, {3}, {0, 1, 2}));
    write_plain(dir.file("img2d"), idx_bytes(0x08, {3, 4}, fixture_pixels(3, 2, 2)));
    Dataset d;
    std::string error;
    CHECK_FALSE(edgefl::load_idx_dataset(dir.file("img"), dir.file("lab2"), &d, &error));
    CHECK(contains(error, "counts differ"));
    CHECK_FALSE(edgefl::load_idx_dataset(dir.file("img2d"), dir.file("lab3"), &d, &error));
    CHECK(contains(error, "3-dimensional"));
    CHECK_FALSE(edgefl::load_idx_dataset(dir.file("img"), dir.file("img"), &d, &error));
    CHECK(contains(error, "1-dimensional"));
    CHECK(d.count == 0);  // unchanged
    CHECK(edgefl::load_idx_dataset(dir.file("img"), dir.file("lab3"), &d, &error));
  }

  TEST_CASE("damaged copies of a valid file never crash the reader and never load wrong data") {
    TempDir dir;
    const auto pixels = fixture_pixels(6, 5, 5);
    const auto good = idx_bytes(0x08, {6, 5, 5}, pixels);
    const auto gz = gzip_bytes(good);
    uint64_t state = 12345;
    auto next = [&state]() {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      return uint32_t(state >> 33);
    };
    int rejected = 0, accepted = 0;
    for (int trial = 0; trial < 300; ++trial) {
      std::vector<uint8_t> b = trial % 2 ? gz : good;
      switch (next() % 3) {
        case 0:
          b.resize(next() % b.size());  // truncate
          break;
        case 1:
          b[next() % b.size()] ^= uint8_t(1u << (next() % 8));  // flip a bit
          break;
        default:
          b.insert(b.begin() + long(next() % b.size()), uint8_t(next()));  // insert a byte
          break;
      }
      const std::string path = dir.file("fuzz.idx");
      write_plain(path, b);
      IdxArray out;
      std::string error;
      if (edgefl::read_idx_file(path, &out, &error)) {
        ++accepted;
        // Only a flipped data bit of the plain file can still parse; then the shape must hold.
        size_t total = 1;
        for (uint32_t d : out.dims) total *= d;
        CHECK(out.data.size() == total);
      } else {
        ++rejected;
        CHECK_FALSE(error.empty());
      }
    }
    CHECK(rejected > 200);
    MESSAGE("damaged files: ", rejected, " rejected, ", accepted, " accepted (data bits flipped)");
  }

  // ----- partitions --------------------------------------------------------------------------------

  TEST_CASE("partition specs parse, and format back to the same text") {
    PartitionSpec s = spec_of("iid");
    CHECK(s.kind == PartitionKind::kIid);
    s = spec_of("dirichlet:0.5");
    CHECK(s.kind == PartitionKind::kDirichlet);
    CHECK(s.alpha == 0.5);
    s = spec_of("dirichlet:1e-3");
    CHECK(s.alpha == 0.001);
    s = spec_of("dirichlet:.25");
    CHECK(s.alpha == 0.25);
    s = spec_of("dirichlet:2.5E+1");
    CHECK(s.alpha == 25.0);
    CHECK(edgefl::format_partition_spec(s) == "dirichlet:25");
    s = spec_of("shards:2");
    CHECK(s.kind == PartitionKind::kShards);
    CHECK(s.shards_per_client == 2);
    for (const char* text : {"iid", "dirichlet:0.5", "dirichlet:100", "dirichlet:0.1", "dirichlet:0.001",
                             "dirichlet:1000000", "dirichlet:0.37", "shards:2", "shards:10"}) {
      CHECK(edgefl::format_partition_spec(spec_of(text)) == text);
    }
  }

  TEST_CASE("malformed partition specs are rejected with a message, leaving the spec unchanged") {
    for (const char* text : {"",
                             "iid:1",
                             "IID",
                             "random",
                             "dirichlet",
                             "dirichlet:",
                             "dirichlet:-1",
                             "dirichlet:0",
                             "dirichlet:0.0001",
                             "dirichlet:2e6",
                             "dirichlet:abc",
                             "dirichlet:0.5x",
                             "dirichlet:inf",
                             "dirichlet:nan",
                             "dirichlet: 0.5",
                             "shards",
                             "shards:0",
                             "shards:-1",
                             "shards:1.5",
                             "shards:2000000",
                             "shards:99999999999",
                             "shards:4294967297",
                             "shards:+2",
                             "shards: 2"}) {
      PartitionSpec spec;
      spec.kind = PartitionKind::kShards;
      spec.shards_per_client = 7;
      std::string error;
      INFO("spec: '", text, "'");
      CHECK_FALSE(edgefl::parse_partition_spec(text, &spec, &error));
      CHECK_FALSE(error.empty());
      CHECK(spec.kind == PartitionKind::kShards);
      CHECK(spec.shards_per_client == 7);
    }
  }

  TEST_CASE("every sample goes to exactly one client, and every client gets one") {
    const auto& labels = fashion_train().labels;
    for (const char* spec :
         {"iid", "dirichlet:0.1", "dirichlet:0.5", "dirichlet:100", "shards:2", "shards:3"}) {
      for (size_t clients : {1, 7, 100}) {
        INFO("spec ", spec, ", clients ", clients);
        check_exact_cover(partition_ok(labels, clients, spec, 2024), labels.size(), clients);
      }
    }
    const auto synth = synthetic_labels();
    for (const char* spec : {"iid", "dirichlet:0.05", "shards:1", "shards:5"}) {
      INFO("synthetic, spec ", spec);
      check_exact_cover(partition_ok(synth, 33, spec, 1), synth.size(), 33);
    }
    // As many clients as samples: one sample each.
    check_exact_cover(partition_ok(std::vector<uint8_t>(50, 3), 50, "dirichlet:0.5", 9), 50, 50);
  }

  TEST_CASE("IID and shard partitions give sizes that differ by at most one") {
    const auto& labels = fashion_train().labels;
    for (size_t clients : {10, 7, 100, 997}) {
      const Partition p = partition_ok(labels, clients, "iid", 5);
      size_t lo = SIZE_MAX, hi = 0;
      for (const auto& part : p) {
        lo = std::min(lo, part.size());
        hi = std::max(hi, part.size());
      }
      CHECK(hi - lo <= 1);
      CHECK(lo == labels.size() / clients);
    }
    // 100 clients x 2 shards of 300: every client holds exactly 600 samples.
    for (const auto& part : partition_ok(labels, 100, "shards:2", 5)) CHECK(part.size() == 600);
    // Uneven: 5000 samples, 33 x 5 = 165 shards of 30 or 31.
    for (const auto& part : partition_ok(synthetic_labels(), 33, "shards:5", 5)) {
      CHECK(part.size() >= 150);
      CHECK(part.size() <= 155);
    }
  }

  TEST_CASE("a seed gives the same partition every time, and another seed a different one") {
    const auto& labels = fashion_train().labels;
    for (const char* spec : {"iid", "dirichlet:0.5", "shards:2"}) {
      INFO("spec ", spec);
      const Partition a = partition_ok(labels, 50, spec, 77);
      const Partition b = partition_ok(labels, 50, spec, 77);
      const Partition c = partition_ok(labels, 50, spec, 78);
      CHECK(a == b);
      CHECK(a != c);
    }
  }

  TEST_CASE("partitions of a fixed label vector are pinned on every platform") {
    // Golden fingerprints: the algorithms use only integer arithmetic and IEEE + - * / sqrt (no
    // std:: distributions, no libm log/exp), so these hold for every compiler, standard library
    // and ISA. A change here changes every published experiment's client data: bump deliberately.
    const auto labels = synthetic_labels();
    CHECK(fingerprint(partition_ok(labels, 10, "iid", 42)) == 0x6FD12F1239AD47F1ull);
    CHECK(fingerprint(partition_ok(labels, 10, "dirichlet:0.5", 42)) == 0xF037CAF7DEEC518Eull);
    CHECK(fingerprint(partition_ok(labels, 10, "dirichlet:0.01", 42)) == 0x2E5E318A30A14255ull);
    CHECK(fingerprint(partition_ok(labels, 10, "shards:2", 42)) == 0x7F3A3355DB39BE3Dull);
  }

  TEST_CASE("IID clients see the global label distribution") {
    const auto& labels = fashion_train().labels;
    const Partition p = partition_ok(labels, 10, "iid", 3);
    // 6000 samples per client: a class share has standard deviation sqrt(0.1 * 0.9 / 6000) = 0.004.
    for (const auto& part : p) {
      const auto share = distribution(edgefl::label_histogram(labels, part, 10));
      for (double s : share) CHECK(std::fabs(s - 0.1) < 0.02);
    }
    CHECK(mean_tv_distance(labels, p, 10) < 0.03);
  }

  TEST_CASE("Dirichlet(0.1) skews client labels far more than Dirichlet(100)") {
    const auto& labels = fashion_train().labels;
    const double skewed = mean_tv_distance(labels, partition_ok(labels, 100, "dirichlet:0.1", 11), 10);
    const double mild = mean_tv_distance(labels, partition_ok(labels, 100, "dirichlet:100", 11), 10);
    const double iid = mean_tv_distance(labels, partition_ok(labels, 100, "iid", 11), 10);
    MESSAGE("mean TV distance from the global label distribution: dirichlet:0.1 ", skewed, ", dirichlet:100 ",
            mild, ", iid ", iid);
    CHECK(skewed > 0.5);
    CHECK(mild < 0.15);
    CHECK(skewed > 4 * mild);
    // Dirichlet(0.1): most clients are dominated by one or two classes.
    size_t dominated = 0;
    const Partition p = partition_ok(labels, 100, "dirichlet:0.1", 11);
    for (const auto& part : p) {
      auto share = distribution(edgefl::label_histogram(labels, part, 10));
      std::sort(share.rbegin(), share.rend());
      if (share[0] + share[1] > 0.8) ++dominated;
    }
    CHECK(dominated > 60);
  }

  TEST_CASE("Dirichlet shares of two clients follow Beta(alpha, alpha)") {
    // With one class and two clients, client 0's share is p ~ Beta(alpha, alpha): mean 1/2,
    // variance 1 / (4 (2 alpha + 1)). This checks the gamma sampler on both of its branches
    // (alpha < 1 boosts through alpha + 1). 2000 draws: the sample variance is within ~4% (1 sigma).
    const std::vector<uint8_t> one_class(10000, 0);
    for (double alpha : {0.3, 1.0, 4.0}) {
      PartitionSpec spec;
      spec.kind = PartitionKind::kDirichlet;
      spec.alpha = alpha;
      double sum = 0, sq = 0;
      const int draws = 2000;
      for (int seed = 0; seed < draws; ++seed) {
        const Partition p = edgefl::partition(one_class, 2, spec, uint64_t(seed));
        REQUIRE(p.size() == 2);
        const double share = double(p[0].size()) / double(one_class.size());
        sum += share;
        sq += share * share;
      }
      const double mean = sum / draws;
      const double var = sq / draws - mean * mean;
      const double expect_var = 1.0 / (4.0 * (2.0 * alpha + 1.0));
      INFO("alpha ", alpha, ": mean ", mean, ", variance ", var, " (expected ", expect_var, ")");
      CHECK(std::fabs(mean - 0.5) < 0.03);
      CHECK(std::fabs(var / expect_var - 1.0) < 0.15);
    }
  }

  TEST_CASE("Dirichlet with a tiny alpha still gives every client a sample") {
    const auto& labels = fashion_train().labels;
    // alpha = 0.001: each class goes almost entirely to one client, so most clients start empty.
    check_exact_cover(partition_ok(labels, 300, "dirichlet:0.001", 4), labels.size(), 300);
    check_exact_cover(partition_ok(synthetic_labels(), 1000, "dirichlet:0.001", 4), 5000, 1000);
  }

  TEST_CASE("shard partitions give each client at most k labels when shards do not straddle classes") {
    const auto& labels = fashion_train().labels;
    // 6000 per class and shards of 300: every shard holds one label.
    for (uint32_t k : {1u, 2u, 4u}) {
      const Partition p = partition_ok(labels, 100, "shards:" + std::to_string(k), 8);
      for (const auto& part : p) {
        const auto hist = edgefl::label_histogram(labels, part, 10);
        CHECK(size_t(std::count_if(hist.begin(), hist.end(), [](size_t h) { return h > 0; })) <= k);
      }
    }
    // Unequal classes: a shard may straddle two labels, so at most 2k, and mostly at most k.
    const auto synth = synthetic_labels();
    const Partition p = partition_ok(synth, 40, "shards:2", 8);
    size_t over = 0;
    for (const auto& part : p) {
      const auto hist = edgefl::label_histogram(synth, part, 10);
      const size_t distinct = size_t(std::count_if(hist.begin(), hist.end(), [](size_t h) { return h > 0; }));
      CHECK(distinct <= 4);
      if (distinct > 2) ++over;
    }
    CHECK(over <= 8);
  }

  TEST_CASE("impossible partitions return nothing and say why") {
    const std::vector<uint8_t> labels(10, 1);
    std::string error;
    CHECK(edgefl::partition(labels, 0, spec_of("iid"), 1, &error).empty());
    CHECK(contains(error, "at least 1"));
    CHECK(edgefl::partition(labels, 11, spec_of("iid"), 1, &error).empty());
    CHECK(contains(error, "10 samples"));
    CHECK(edgefl::partition(labels, 4, spec_of("shards:3"), 1, &error).empty());
    CHECK(contains(error, "shards"));
    PartitionSpec bad;
    bad.kind = PartitionKind::kDirichlet;
    bad.alpha = 0.0;
    CHECK(edgefl::partition(labels, 2, bad, 1, &error).empty());
    CHECK(contains(error, "alpha"));
    CHECK(edgefl::partition(labels, 2, bad, 1).empty());  // error is optional
    CHECK(edgefl::partition(labels, 5, spec_of("shards:2"), 1, &error).size() == 5);
  }

  TEST_CASE("label_histogram counts the labels of a client's indices") {
    const std::vector<uint8_t> labels = {0, 1, 1, 2, 9};
    CHECK(edgefl::label_histogram(labels, {0, 1, 2, 4}, 3) == std::vector<size_t>{1, 2, 0});
    CHECK(edgefl::label_histogram(labels, {4, 99}, 10)[9] == 1);
  }

}  // TEST_SUITE("data")
