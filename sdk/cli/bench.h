// bench.h: `edgefl bench`, the codec benchmark (compression.md section 5 rules: every byte counted,
// vNMSE and bias reported, throughput as a ratio to memcpy measured in the same run).
//
// For each dataset (Bench-1M and every --input .npy) and each codec spec, bench_codec() encodes the
// data `reps` times with seeds 1..reps, decodes each encoding into a dense buffer and decode_add()s
// it into an accumulator, and reports the median times and the error statistics. Two baselines are
// measured on the same data: memcpy of the 4n input bytes, and an exact 1% top-k by
// std::nth_element on a copy of |x|.
#ifndef EDGEFL_CLI_BENCH_H_
#define EDGEFL_CLI_BENCH_H_

#include <stddef.h>
#include <stdint.h>

#include <iosfwd>
#include <limits>
#include <string>
#include <vector>

namespace edgefl {
namespace cli {

// Every codec family, `;`-separated (specs contain commas). `<auto>` is resolved per dataset by
// resolve_auto_spec().
extern const char* const kDefaultBenchCodecs;

constexpr size_t kBench1MSize = size_t{1} << 20;
constexpr uint64_t kBench1MSeed = 42;
constexpr size_t kBench1MBlock = 256;
constexpr int kBenchDefaultReps = 7;
constexpr int kBenchQuickReps = 3;

struct BenchOptions {
  std::vector<std::string> inputs;  // .npy files (float32 or float16), each a dataset
  std::string codecs;               // `;`-separated specs; empty = kDefaultBenchCodecs
  int reps = 0;                     // 0: kBenchDefaultReps, or kBenchQuickReps with quick
  bool quick = false;
  bool bench1m = true;      // include the synthetic Bench-1M dataset
  bool real_update = true;  // include a real CNN update trained on Fashion-MNIST (sim.h)
  bool sparse = false;      // include Sparse-1M@1% and @10% (make_sparse_gaussian)
  bool kernels = false;     // measure skc bucketing and the entropy decoders (GB/s, vs memcpy)
  bool peers = false;       // add BytePS's onebit, randomk and topk (bench_byteps_peers)
  std::string json_path;    // JSONL output, one object per line; empty = none
};

// Bench-1M: n float32 values x_i = z_i * s_{i / 256} * 1e-3, z_i ~ N(0,1), s_j = exp(N(0,1)) per
// 256-element block (lognormal(0,1)). The normals come from splitmix64 + Box-Muller (both outputs
// used, in order cos, sin); for each block the scale's normal is drawn first, then its 256 values.
// Computed in double and rounded to float; identical on every IEEE-754 platform up to libm's
// last-ulp differences in exp/log/cos/sin, which the final rounding to float almost always hides.
std::vector<float> make_bench1m(size_t n = kBench1MSize, uint64_t seed = kBench1MSeed);

// An already sparse update like the SKCompress re-simulation of ../shared/reference/compression.md:
// n = 10^6 coordinates, exactly round(density * n) non-zeros at uniform random positions, values
// N(0, 1) x 1e-3 (splitmix64 + Box-Muller).
std::vector<float> make_sparse_gaussian(double density, size_t n = 1000000, uint64_t seed = 7);

// Splits `list` at ';', trims spaces, drops empty entries.
std::vector<std::string> split_codec_list(const std::string& list);

// Replaces `<auto>` in `spec` with a value computed from x[0, n):
//   shared=<auto>  -> step = max|x| / (2^(b-1) - 1) for the value stage's b bits, nudged up so that
//                     max|x| / step never exceeds 2^(b-1) - 1 in float arithmetic;
//   thresh:<auto>  -> the threshold that keeps the top 1% of |x| (the value at rank
//                     n - k of |x| sorted ascending, k = round(0.01 n)).
// Floats are printed with 9 significant digits (exact round trip). Specs without `<auto>` are
// returned unchanged. Fails (false, *error set) when `<auto>` appears elsewhere or x is all zero.
bool resolve_auto_spec(const std::string& spec, const float* x, size_t n, std::string* resolved,
                       std::string* error);

// One line of results. Any double that is NaN is reported as null (not applicable).
struct BenchResult {
  std::string dataset;
  std::string codec;      // canonical spec (format_codec_spec), or "memcpy" / "nth_element:0.01"
  std::string requested;  // the spec as given (before <auto> resolution and canonicalization)
  std::string error;      // non-empty: the codec failed; the numbers below are then NaN
  uint64_t n = 0;
  int reps = 0;
  bool sparse = false;
  double nnz = 0;             // mean over reps
  double encoded_bytes = 0;   // mean over reps, header included
  double bits_per_coord = 0;  // encoded_bytes * 8 / n
  double bits_per_nnz = 0;    // encoded_bytes * 8 / nnz (sparse codecs), else NaN
  double vnmse = 0;           // ||x - x_hat||^2 / ||x||^2, mean over reps
  double bias = 0;            // ||mean_reps(x_hat) - x||^2 / ||x||^2
  double shrink = 0;          // <x_hat - x, x> / ||x||^2, mean over reps
  // The Shannon rate-distortion bound of an i.i.d. Gaussian source at this vNMSE,
  // max(0, log2(1 / vnmse) / 2) bits per coordinate (NaN when lossless), and bits_per_coord
  // minus it. The Gaussian has the largest R(D) of all sources of its variance: on a sparse or
  // heavy-tailed update a codec can sit below it (a negative gap).
  double gaussian_rd_bits = 0;
  double rd_gap_bits = 0;
  double encode_gbps = 0;      // 4n bytes / median encode seconds / 1e9
  double decode_gbps = 0;      // 4n bytes / median decode seconds / 1e9
  double decode_add_gbps = 0;  // 4n bytes / median decode_add seconds / 1e9
  // Sparse codecs: carried coordinates / median decode_add seconds / 1e6 (else NaN).
  double decode_add_mnnz = std::numeric_limits<double>::quiet_NaN();
  double workspace_bytes = 0;  // workspace_size(spec, n)
  double workspace_ratio = 0;  // workspace_bytes / (4n)
  double count_error = 0;      // nnz / k_target - 1 (sparsifiers), else NaN
  // memcpy of the same 4n bytes timed inside this row's own repetitions, right after an untimed
  // copy, as each encode is timed right after an untimed encode: the same cache state as the
  // encode (NaN for the baseline rows).
  double memcpy_paired_gbps = std::numeric_limits<double>::quiet_NaN();
  // encode_gbps / memcpy_paired_gbps; the dataset's back-to-back memcpy row where a row has no
  // paired copy.
  double ratio_to_memcpy = 0;
  bool deterministic = true;          // seed 1 gave the same bytes into a zeroed and a dirty buffer
  bool decode_add_consistent = true;  // decode_add into zeros matched decode (within 1e-5 rel.)
  double decode_add_max_abs_diff = 0;
  // skc: fraction of carried keys decoded to their true bucket (mean over reps), else NaN.
  double exact_bucket_rate = std::numeric_limits<double>::quiet_NaN();
  // cs: |decoded support & true top-k| / k, k = the heavy hitters decoded (mean over reps), else NaN.
  double topk_recall = std::numeric_limits<double>::quiet_NaN();
};

// BytePS's onebit, randomk (1%, 10%) and topk (1%) compressors, re-implemented from their
// published algorithms (bench_peers.cpp), measured like the codecs: encode, decode and decode_add
// (decompress, then add densely, as BytePS's server does) GB/s of fp32, bits and vNMSE.
std::vector<BenchResult> bench_byteps_peers(const std::string& dataset, const float* x, size_t n, int reps);

// Measures memcpy of the 4n bytes of x (median over max(reps, 15) runs).
BenchResult bench_memcpy(const std::string& dataset, const float* x, size_t n, int reps);

// Measures an exact top-k (k = round(density * n), at least 1) by std::nth_element on a copy of
// |x| followed by the index selection (ties go to the lowest indices). vnmse is that of keeping the
// k values exactly; workspace_bytes is the 4n-byte copy.
BenchResult bench_nth_element(const std::string& dataset, const float* x, size_t n, double density, int reps);

// Benchmarks `spec` (already resolved: no <auto>) on x[0, n). Never throws for a failing codec:
// the failure is reported in result.error as "<status_name>: <status_message>".
BenchResult bench_codec(const std::string& dataset, const float* x, size_t n, const std::string& spec,
                        int reps);

// The result as one JSON object (no newline).
std::string bench_result_json(const BenchResult& r);

// An aligned table of `results` (all of one dataset) on `out`.
void print_bench_table(const std::vector<BenchResult>& results, std::ostream& out);

// The whole `edgefl bench` command. Returns 0 when every codec succeeded, 1 when any failed or
// broke a contract (bytes that depend on the prior buffer contents, decode_add != decode; the
// others are still measured), 2 on a usage error.
int run_bench(const BenchOptions& options, std::ostream& out, std::ostream& err);

}  // namespace cli
}  // namespace edgefl

#endif  // EDGEFL_CLI_BENCH_H_
