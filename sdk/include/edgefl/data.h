// edgefl/data.h: datasets and client partitions for simulation, examples and tests (hosted only).
//
// edgefl::data is a hosted C++17 library (std::vector, std::string, zlib); the freestanding SDK
// never depends on it. Errors are values: loaders return false and describe the problem in
// *error (path, what was expected, what was found); nothing throws for bad input, only
// std::bad_alloc can escape if memory runs out.
//
//   edgefl::Dataset train;
//   std::string error;
//   if (!edgefl::load_fashion_mnist("", /*train=*/true, &train, &error)) { fail(error); }
//   edgefl::PartitionSpec spec;
//   if (!edgefl::parse_partition_spec("dirichlet:0.5", &spec, &error)) { fail(error); }
//   auto clients = edgefl::partition(train.labels, 100, spec, /*seed=*/42, &error);
//   // clients[c] = ascending indices into train of client c's samples
//
// Everything random here is seeded and computed with explicit integer and IEEE arithmetic
// (SplitMix64, Fisher-Yates, Marsaglia-Tsang), never std:: engines or distributions, so that a
// seed gives the same partition with every standard library and on every platform.
#ifndef EDGEFL_DATA_H_
#define EDGEFL_DATA_H_

#include <stddef.h>
#include <stdint.h>

#include <string>
#include <vector>

namespace edgefl {

// ----- IDX files (LeCun's MNIST format) ----------------------------------------------------------
//
//   bytes 0-1: 0x00 0x00; byte 2: element type (only 0x08, unsigned byte, is read here);
//   byte 3: number of dimensions d; then d big-endian uint32 sizes; then the elements, row-major.
//
// Files may be gzip-compressed (detected by the magic 1f 8b, not by the name) or plain.

// Bounds a reader enforces before it trusts a header (a crafted header cannot make it allocate
// more than the file really holds, and never more than max_total_bytes).
struct IdxLimits {
  uint32_t max_dims = 4;                  // dimensions per file (1..max_dims)
  uint32_t max_items = 10000000;          // the first dimension (number of items)
  uint32_t max_dim = 4096;                // every further dimension (e.g. rows, cols)
  uint64_t max_total_bytes = 1ull << 30;  // product of all dimensions
};

// The contents of one unsigned-byte IDX file.
struct IdxArray {
  std::vector<uint32_t> dims;  // dims[0] = items
  std::vector<uint8_t> data;   // product(dims) bytes, row-major
};

// Reads and validates one IDX file (gzip or plain). Fails, with *error naming the file and the
// problem, if it cannot be opened, if the gzip stream is corrupt or truncated, on a bad magic,
// an element type other than unsigned byte, a dimension count or size out of `limits`, a zero
// dimension, fewer data bytes than the header implies (truncated) or any byte after them.
// *out is unchanged on failure. `error` may be null.
bool read_idx_file(const std::string& path, IdxArray* out, std::string* error,
                   const IdxLimits& limits = IdxLimits());

// ----- Datasets ----------------------------------------------------------------------------------

// How raw pixels become inputs: x = (pixel / 255 - mean) / stddev.
struct Normalization {
  float mean = 0.0f;
  float stddev = 1.0f;
};
// The Fashion-MNIST training-set pixel mean and standard deviation (of pixel / 255).
constexpr Normalization kFashionMnistNormalization{0.2860f, 0.3530f};

// A labelled image classification dataset, row-major in memory.
struct Dataset {
  std::vector<float> inputs;    // count x dim(), normalized as `normalization` says
  std::vector<uint8_t> labels;  // count, each < num_classes
  size_t count = 0;
  size_t rows = 0, cols = 0;
  uint32_t num_classes = 0;
  Normalization normalization;  // what was applied to inputs

  size_t dim() const { return rows * cols; }
  const float* input(size_t i) const { return inputs.data() + i * dim(); }  // i < count
};

// Loads an image file (idx3: count x rows x cols) and a label file (idx1: count) into *out.
// num_classes = largest label + 1. Fails (with *error; *out unchanged) as read_idx_file(), and if
// the images are not 3-dimensional, the labels not 1-dimensional, the counts differ, or either is
// empty. `error` may be null.
bool load_idx_dataset(const std::string& images_path, const std::string& labels_path, Dataset* out,
                      std::string* error, const Normalization& normalization = Normalization(),
                      const IdxLimits& limits = IdxLimits());

// The directory of the Fashion-MNIST files: $EDGEFL_FASHION_MNIST_DIR if set and non-empty, else
// /usr/share/datasets/fashion-mnist (where the project's setup script installs it).
std::string fashion_mnist_dir();

// Loads Fashion-MNIST (Xiao, Rasul, Vollgraf 2017) from `dir` (fashion_mnist_dir() when empty):
// {train,t10k}-images-idx3-ubyte[.gz] and {train,t10k}-labels-idx1-ubyte[.gz] (the .gz name is
// tried first). Inputs are normalized with kFashionMnistNormalization when `normalize`, else
// scaled to [0, 1]. Besides load_idx_dataset()'s checks it requires 28 x 28 images and labels
// < 10, and sets num_classes = 10. The error names the directory and how to override it.
bool load_fashion_mnist(const std::string& dir, bool train, Dataset* out, std::string* error,
                        bool normalize = true);

// ----- Partitions --------------------------------------------------------------------------------

enum class PartitionKind : uint8_t {
  kIid = 0,        // shuffle, then split into sizes differing by at most 1
  kDirichlet = 1,  // label skew: per class, client proportions ~ Dirichlet(alpha)
  kShards = 2,     // pathological non-IID: sort by label, deal k shards per client
};

// A parsed partition spec:  'iid'  |  'dirichlet:' ALPHA  |  'shards:' K
// ALPHA is a decimal in [1e-3, 1e6] (small = skewed, large = near IID); K an integer in [1, 1e6].
struct PartitionSpec {
  PartitionKind kind = PartitionKind::kIid;
  double alpha = 0.5;              // kDirichlet
  uint32_t shards_per_client = 2;  // kShards
};

// Parses `text`. Fails (false, *error says why, *spec unchanged) on anything else.
bool parse_partition_spec(const std::string& text, PartitionSpec* spec, std::string* error);

// The canonical spelling ("iid", "dirichlet:0.5", "shards:2"); parses back to the same spec.
std::string format_partition_spec(const PartitionSpec& spec);

// Splits the sample indices [0, labels.size()) among `clients` clients: every index appears in
// exactly one client, each client's list is ascending, and every client gets at least one sample.
// Deterministic: the same (labels, clients, spec, seed) gives the same result on every platform.
//  - kIid: Fisher-Yates shuffle, then contiguous pieces of floor or ceil(count / clients).
//  - kDirichlet: for each class, its shuffled indices are cut in proportions p ~ Dir(alpha 1_N)
//    (boundaries floor(cumsum(p) * n_class)); the label-skew scheme of Hsu, Qi, Brown 2019
//    (arXiv:1909.06335) as drawn per class by Yurochkin et al. 2019 and Li et al. (NIID-Bench,
//    ICDE 2022). Gamma variates: Marsaglia-Tsang (ACM TOMS 2000). A client left empty then takes
//    one sample from the largest client (lowest index on ties), repeated until none is empty.
//  - kShards: indices sorted by (label, index), cut into clients * k contiguous shards of sizes
//    differing by at most 1, shuffled, k to each client (McMahan et al., AISTATS 2017).
// Returns an empty vector (and, if `error` is not null, the reason) when clients == 0, labels has
// fewer than `clients` samples (fewer than clients * k for shards), more than 2^32 - 1 samples,
// or the spec is invalid.
std::vector<std::vector<uint32_t>> partition(const std::vector<uint8_t>& labels, size_t clients,
                                             const PartitionSpec& spec, uint64_t seed,
                                             std::string* error = nullptr);

// histogram[c] = number of indices i in `indices` with labels[i] == c, for c < num_classes
// (labels >= num_classes and indices out of range are not counted).
std::vector<size_t> label_histogram(const std::vector<uint8_t>& labels, const std::vector<uint32_t>& indices,
                                    size_t num_classes);

}  // namespace edgefl

#endif  // EDGEFL_DATA_H_
