#include "bench.h"
#include "codec/kernels.h"
#include "core/crc32c.h"
#include "core/rng.h"
#include "entropy/rans.h"
#include "sim.h"
#include "sketch/skc.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <limits>
#include <new>
#include <ostream>

#include "edgefl/codec.h"
#include "edgefl/status.h"
#include "file_io.h"
#include "json_writer.h"
#include "npy.h"
#include "timing.h"

namespace edgefl {
namespace cli {

const char* const kDefaultBenchCodecs =
    "fp32;fp16;bf16;q8;q4;q2;q1;q8:det;q4:block=64;q8:shared=<auto>;q4:shared=<auto>;hq4;hq2;qsgd;tern;"
    "sign;topk:0.01;topk:0.01+q4;topk:0.01+hq4;topk:0.01,approx+q4;topk:0.1+q4;topk:0.001+q4;"
    "topk:0.01,idx=rice+q4;thresh:<auto>+q8;randk:0.01+q8;randk:0.1+q8";

namespace {

constexpr double kNull = std::numeric_limits<double>::quiet_NaN();
constexpr int kMinBaselineReps = 15;
constexpr double kAutoThresholdDensity = 0.01;

// Box-Muller over splitmix64; both outputs of each pair are used (cos first, then sin).
class NormalGenerator {
 public:
  explicit NormalGenerator(uint64_t seed) : rng_(seed) {}
  double next() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u1 = static_cast<double>((rng_.next() >> 11) + 1) * 0x1p-53;  // (0, 1]
    const double u2 = static_cast<double>(rng_.next() >> 11) * 0x1p-53;        // [0, 1)
    const double r = sqrt(-2.0 * log(u1));
    const double theta = 6.283185307179586476925286766559 * u2;
    spare_ = r * sin(theta);
    has_spare_ = true;
    return r * cos(theta);
  }

 private:
  edgefl::SplitMix64 rng_;
  bool has_spare_ = false;
  double spare_ = 0.0;
};

size_t k_for_density(double density, size_t n) {
  double k = floor(density * static_cast<double>(n) + 0.5);
  if (k < 1) k = 1;
  if (k > static_cast<double>(n)) k = static_cast<double>(n);
  return static_cast<size_t>(k);
}

std::string format_float9(float v) {
  char buf[64];
  snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
  return buf;
}

std::string status_text(Status s) {
  std::string text = status_name(s);
  const char* message = status_message(s);
  if (message != nullptr && message[0] != '\0') {
    text += ": ";
    text += message;
  }
  return text;
}

std::string canonical_spec(const CodecSpec& spec) {
  char small[128];
  const size_t need = format_codec_spec(spec, small, sizeof small);
  if (need < sizeof small) return std::string(small, need);
  std::string big(need + 1, '\0');
  format_codec_spec(spec, &big[0], big.size());
  big.resize(need);
  return big;
}

BenchResult failed_result(const std::string& dataset, const std::string& codec, const std::string& requested,
                          size_t n, int reps, const std::string& error) {
  BenchResult r;
  r.dataset = dataset;
  r.codec = codec;
  r.requested = requested;
  r.error = error;
  r.n = n;
  r.reps = reps;
  r.nnz = r.encoded_bytes = r.bits_per_coord = r.bits_per_nnz = kNull;
  r.vnmse = r.bias = r.shrink = r.gaussian_rd_bits = r.rd_gap_bits = kNull;
  r.encode_gbps = r.decode_gbps = r.decode_add_gbps = kNull;
  r.workspace_bytes = r.workspace_ratio = r.count_error = r.ratio_to_memcpy = kNull;
  r.decode_add_max_abs_diff = kNull;
  return r;
}

// skc: the fraction of carried keys whose decoded value is the representative of the bucket the
// true value falls in (the bucket found by binary search over the encoding's own splits).
double skc_exact_bucket_rate(Span<const uint8_t> bytes, const EncodedInfo& info, const float* x,
                             std::vector<uint8_t>* workspace) {
  const skc::Params p = skc::params_from_header(info);
  skc::Layout l;
  const uint8_t* region = bytes.data() + info.header_bytes;
  if (skc::parse(p, info.n, info.nnz, region, info.value_bytes, &l) != Status::kOk) return kNull;
  workspace->assign(decode_workspace_size(info), 0);
  uint32_t* table = reinterpret_cast<uint32_t*>(workspace->data());
  uint8_t* cells = workspace->data() + entropy::huffman_decoder_table_bytes();
  if (skc::decode_sketches(p, l, cells, table) != Status::kOk) return kNull;
  std::vector<float> splits(l.split_count);
  if (!splits.empty()) memcpy(splits.data(), l.splits, splits.size() * 4);
  size_t exact = 0, total = 0;
  const Status s = skc::visit(p, l, info.n, info.seed, cells, true, [&](size_t key, float value) {
    const float v = x[key] == 0.0f ? 0.0f : x[key];
    const unsigned b =
        static_cast<unsigned>(std::upper_bound(splits.begin(), splits.end(), v) - splits.begin());
    exact += skc::bucket_representative(l, b) == value ? 1 : 0;
    ++total;
  });
  return s == Status::kOk && total > 0 ? static_cast<double>(exact) / static_cast<double>(total) : kNull;
}

// cs: the fraction of the true top-k (k = nnz decoded) among the decoded (non-zero) coordinates.
double topk_recall(const float* x, size_t n, const std::vector<float>& decoded, size_t k) {
  if (k == 0 || k > n) return kNull;
  std::vector<float> mags(n);
  for (size_t i = 0; i < n; ++i) mags[i] = fabsf(x[i]);
  std::nth_element(mags.begin(), mags.begin() + static_cast<ptrdiff_t>(n - k), mags.end());
  const float kth = mags[n - k];
  size_t above = 0, hits_above = 0, hits_tied = 0, tied = 0;
  for (size_t i = 0; i < n; ++i) {
    const float a = fabsf(x[i]);
    if (a > kth) {
      ++above;
      hits_above += decoded[i] != 0.0f ? 1 : 0;
    } else if (a == kth) {
      ++tied;
      hits_tied += decoded[i] != 0.0f ? 1 : 0;
    }
  }
  // Ties at the k-th magnitude: any of them counts toward the k - above slots left.
  const size_t slots = k - above;
  return static_cast<double>(hits_above + std::min(hits_tied, std::min(slots, tied))) /
         static_cast<double>(k);
}

double sum_squares(const float* x, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

// The number of coordinates the sparsifier of `spec` is asked to keep on x.
double k_target(const CodecSpec& spec, const float* x, size_t n) {
  switch (spec.sparsifier) {
    case SparsifierKind::kTopK:
    case SparsifierKind::kTopKApprox:
    case SparsifierKind::kRandomK:
      if (spec.k != 0) return static_cast<double>(std::min<size_t>(spec.k, n));
      return static_cast<double>(k_for_density(spec.density, n));
    case SparsifierKind::kThreshold: {
      size_t count = 0;
      for (size_t i = 0; i < n; ++i) count += fabsf(x[i]) >= spec.threshold ? 1 : 0;
      return static_cast<double>(count);
    }
    case SparsifierKind::kNone: break;
  }
  return kNull;
}

std::string fmt(double v, const char* format) {
  if (isnan(v)) return "-";
  char buf[64];
  snprintf(buf, sizeof buf, format, v);
  return buf;
}

}  // namespace

std::vector<float> make_bench1m(size_t n, uint64_t seed) {
  std::vector<float> x(n);
  NormalGenerator normal(seed);
  for (size_t block = 0; block < n; block += kBench1MBlock) {
    const double scale = exp(normal.next()) * 1e-3;
    const size_t end = std::min(n, block + kBench1MBlock);
    for (size_t i = block; i < end; ++i) x[i] = static_cast<float>(normal.next() * scale);
  }
  return x;
}

std::vector<float> make_sparse_gaussian(double density, size_t n, uint64_t seed) {
  std::vector<float> x(n, 0.0f);
  const size_t k = std::min(n, static_cast<size_t>(density * static_cast<double>(n) + 0.5));
  // A partial Fisher-Yates shuffle picks k distinct positions uniformly.
  std::vector<uint32_t> positions(n);
  for (size_t i = 0; i < n; ++i) positions[i] = static_cast<uint32_t>(i);
  SplitMix64 g(seed);
  NormalGenerator normal(seed ^ 0x5350415253450000ull);
  for (size_t j = 0; j < k; ++j) {
    const size_t pick = j + g.below(static_cast<uint32_t>(n - j));
    std::swap(positions[j], positions[pick]);
    float v = 0.0f;
    while (v == 0.0f) v = static_cast<float>(normal.next() * 1e-3);
    x[positions[j]] = v;
  }
  return x;
}

namespace {

// The kernel table's hot loops (quantisation, fp16/bf16, thresholds), timed for the scalar
// reference and for the ISA table this CPU uses, in the same run: rows "kernel:<fn>[ref]" and
// "kernel:<fn>[avx2|neon|neon-v7]". GB/s of fp32 input. Outputs are compared, so a row whose
// table disagrees with the reference carries an error.
std::vector<BenchResult> bench_kernel_tables(const std::string& dataset, const float* x, size_t n, int reps) {
  std::vector<BenchResult> rows;
  const int runs = std::max(reps, 5);
  const uint32_t count = static_cast<uint32_t>(std::min<size_t>(n, UINT32_MAX / 8));
  const Kernels* tables[2] = {&kernels_ref(), &kernels()};
  const int table_count = &kernels() == &kernels_ref() ? 1 : 2;
  float lo = 0, hi = 0;
  kernels_ref().min_max(x, count, &lo, &hi);
  const float range = hi > lo ? hi - lo : 1.0f;
  const float peak = std::max(fabsf(lo), fabsf(hi));
  const float limit_scale = peak > 0 ? 7.0f / peak : 1.0f;  // quantize_shared: codes -7..7
  // Each kernel writes its output (or a summary) to `out`; the rows compare it across tables.
  struct Case {
    const char* name;
    void (*run)(const Kernels&, const float*, uint32_t, float, float, float, std::vector<uint8_t>*);
  };
  const Case cases[] = {
      {"max_abs_bits",
       [](const Kernels& k, const float* v, uint32_t m, float, float, float, std::vector<uint8_t>* out) {
         const uint32_t r = k.max_abs_bits(v, m);
         out->assign(reinterpret_cast<const uint8_t*>(&r), reinterpret_cast<const uint8_t*>(&r) + 4);
       }},
      {"min_max",
       [](const Kernels& k, const float* v, uint32_t m, float, float, float, std::vector<uint8_t>* out) {
         float r[2];
         k.min_max(v, m, &r[0], &r[1]);
         out->assign(reinterpret_cast<const uint8_t*>(r), reinterpret_cast<const uint8_t*>(r) + 8);
       }},
      {"to_bf16",
       [](const Kernels& k, const float* v, uint32_t m, float, float, float, std::vector<uint8_t>* out) {
         out->resize(size_t(m) * 2);
         k.to_bf16(v, m, out->data());
       }},
      {"to_fp16",
       [](const Kernels& k, const float* v, uint32_t m, float, float, float, std::vector<uint8_t>* out) {
         out->resize(size_t(m) * 2);
         k.to_fp16(v, m, out->data());
       }},
      {"quantize_uniform_q4",
       [](const Kernels& k, const float* v, uint32_t m, float lo_, float range_, float,
          std::vector<uint8_t>* out) {
         out->resize((size_t(m) * 4 + 7) / 8);
         k.quantize_uniform(v, m, lo_, 15.0f / range_, 4, true, 17, 0, out->data());
       }},
      {"quantize_shared_q4",
       [](const Kernels& k, const float* v, uint32_t m, float, float, float scale,
          std::vector<uint8_t>* out) {
         out->resize((size_t(m) * 4 + 7) / 8);
         k.quantize_shared(v, m, scale, 7, 4, true, 19, 0, out->data());
       }},
      {"count_abs_at_least",
       [](const Kernels& k, const float* v, uint32_t m, float, float, float, std::vector<uint8_t>* out) {
         const uint64_t r = k.count_abs_at_least(v, m, 0x3A800000u);  // |x| >= 2^-10
         out->assign(reinterpret_cast<const uint8_t*>(&r), reinterpret_cast<const uint8_t*>(&r) + 8);
       }},
  };
  for (const Case& c : cases) {
    std::vector<uint8_t> reference_output;
    for (int t = 0; t < table_count; ++t) {
      const std::string name = std::string("kernel:") + c.name + "[" + tables[t]->name + "]";
      BenchResult r = failed_result(dataset, name, name, n, reps, "");
      std::vector<uint8_t> out;
      std::vector<double> times;
      for (int run = 0; run < runs; ++run) {
        const Clock::time_point start = Clock::now();
        c.run(*tables[t], x, count, lo, range, limit_scale, &out);
        times.push_back(seconds_since(start));
      }
      if (t == 0) reference_output = out;
      r.error = out == reference_output ? "" : "differs from the scalar reference";
      r.encode_gbps = gbps(count, median(times));
      rows.push_back(r);
    }
  }
  return rows;
}

}  // namespace

// Kernel throughputs, reported as rows of their own (encode_gbps = the kernel's GB/s).
// skc bucketing: bytes of fp32 input per second through the lookup table + fix-up.
// huffman decode: decoded symbols (bytes) per second, a skewed 32-symbol alphabet.
// rans encode / decode: symbols (bytes) per second through the encoder and the bulk decoder,
// 4-bit skewed codes, 4 and 32 lanes.
std::vector<BenchResult> bench_kernels(const std::string& dataset, const float* x, size_t n, int reps) {
  std::vector<BenchResult> rows;
  const int runs = std::max(reps, 5);
  {
    BenchResult r = failed_result(dataset, "kernel:skc_bucketing", "kernel:skc_bucketing", n, reps, "");
    skc::Params p;
    std::vector<uint8_t> ws(skc::encode_workspace_bytes(p, n) + 64);
    uint8_t* base =
        reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(ws.data()) + 63) & ~uintptr_t(63));
    skc::Encoder* enc = new (base) skc::Encoder(p, n, 1, base);
    for (size_t i = 0; i < n; ++i) enc->observe(x[i]);
    enc->plan();
    std::vector<double> times;
    uint64_t checksum = 0;
    for (int run = 0; run < runs; ++run) {
      const Clock::time_point start = Clock::now();
      uint64_t sum = 0;
      for (size_t i = 0; i < n; ++i) sum += enc->bucket(x[i]);
      times.push_back(seconds_since(start));
      checksum += sum;
    }
    r.encode_gbps = gbps(n, median(times));
    r.error = checksum == 0 && n > 0 ? "bucketing returned only bucket 0" : "";
    rows.push_back(r);
  }
  {
    BenchResult r = failed_result(dataset, "kernel:huffman_decode", "kernel:huffman_decode", n, reps, "");
    // Symbols with a geometric distribution over 32 values (like the MinMaxSketch tables).
    std::vector<uint8_t> symbols(n);
    SplitMix64 g(3);
    uint32_t freq[32] = {};
    for (size_t i = 0; i < n; ++i) {
      unsigned s = 0;
      while (s < 31 && g.below(100) < 60) ++s;
      symbols[i] = static_cast<uint8_t>(s);
      freq[s]++;
    }
    uint8_t lengths[32];
    entropy::huffman_lengths(freq, 32, lengths);
    entropy::HuffmanEncoder henc(lengths, 32);
    std::vector<uint8_t> stream(n * 2 + 64);
    BitWriter w(stream.data(), stream.size());
    henc.write_table(&w);
    for (size_t i = 0; i < n; ++i) henc.put(&w, symbols[i]);
    const size_t bytes = w.finish();
    std::vector<uint32_t> table(entropy::huffman_table_entries());
    std::vector<uint8_t> decoded(n);
    std::vector<double> times;
    bool ok = true;
    for (int run = 0; run < runs; ++run) {
      const Clock::time_point start = Clock::now();
      BitReader rd(stream.data(), bytes);
      entropy::HuffmanDecoder dec(table.data());
      ok = ok && dec.read_table(&rd, 32) == Status::kOk;
      size_t bit = rd.bit_position();
      ok = ok && dec.decode(stream.data(), bytes, &bit, decoded.data(), n) == Status::kOk;
      times.push_back(seconds_since(start));
    }
    if (!ok || decoded != symbols) r.error = "huffman round trip failed";
    // GB/s of symbols: one byte per decoded symbol (gbps() counts 4 bytes per element).
    r.encode_gbps = gbps(n, median(times)) / 4.0;
    r.bits_per_coord = 8.0 * static_cast<double>(bytes) / static_cast<double>(n);
    rows.push_back(r);
  }
  {
    // 4-bit codes with a skewed (binomial-like) distribution, as q4 codes of top-k values; the
    // encoder and the bulk decoder with 4 lanes (the first format) and 32 (streams from
    // entropy::kRansWideMinSymbols symbols on).
    std::vector<uint8_t> symbols(n);
    SplitMix64 g(5);
    uint32_t counts[16] = {};
    for (size_t i = 0; i < n; ++i) {
      unsigned s = 0;
      for (int j = 0; j < 15; ++j) s += g.below(100) < 30 ? 1 : 0;
      symbols[i] = static_cast<uint8_t>(s);
      counts[s]++;
    }
    uint16_t freq[16];
    entropy::rans_frequencies(counts, 16, freq);
    std::vector<uint8_t> table_bytes(entropy::rans_table_bytes(freq, 16));
    BitWriter tw(table_bytes.data(), table_bytes.size());
    entropy::rans_write_table(freq, 16, &tw);
    tw.finish();
    for (const unsigned lanes : {entropy::kRansLanes, entropy::kRansWideLanes}) {
      const std::string suffix = "[" + std::to_string(lanes) + " lanes]";
      BenchResult enc =
          failed_result(dataset, "kernel:rans_encode" + suffix, "kernel:rans_encode" + suffix, n, reps, "");
      BenchResult r =
          failed_result(dataset, "kernel:rans_decode" + suffix, "kernel:rans_decode" + suffix, n, reps, "");
      std::vector<uint8_t> stream(n + 64);
      std::vector<double> encode_times;
      size_t bytes = 0;
      for (int run = 0; run < runs; ++run) {
        const Clock::time_point start = Clock::now();
        bytes = entropy::rans_encode(symbols.data(), n, freq, 16, lanes, stream.data(), stream.size());
        encode_times.push_back(seconds_since(start));
      }
      std::vector<uint8_t> decoded(n);
      std::vector<double> times;
      bool ok = bytes > 0;
      for (int run = 0; run < runs && ok; ++run) {
        const Clock::time_point start = Clock::now();
        entropy::RansDecoder dec;
        BitReader tr(table_bytes.data(), table_bytes.size());
        ok = dec.read_table(&tr, 16) == Status::kOk && dec.begin(stream.data(), bytes, lanes) == Status::kOk;
        ok = ok && dec.decode(decoded.data(), n) == Status::kOk && dec.finish() == Status::kOk;
        times.push_back(seconds_since(start));
      }
      if (!ok || decoded != symbols) r.error = enc.error = "rANS round trip failed";
      // GB/s of symbols: one byte per symbol (gbps() counts 4 bytes per element).
      enc.encode_gbps = gbps(n, median(encode_times)) / 4.0;
      r.encode_gbps = gbps(n, median(times)) / 4.0;
      enc.bits_per_coord = r.bits_per_coord = 8.0 * static_cast<double>(bytes) / static_cast<double>(n);
      rows.push_back(enc);
      rows.push_back(r);
    }
  }
  {
    // CRC32C over the fp32 bytes of the update: the slicing-by-8 reference and the path in use
    // (three interleaved lanes of the SSE4.2 or ARMv8 CRC instructions when the CPU has them).
    // GB/s of bytes checked.
    const uint8_t* bytes = reinterpret_cast<const uint8_t*>(x);
    const size_t size = n * sizeof(float);
    uint32_t reference = 0;
    for (int path = 0; path < 2; ++path) {
      const char* name = path == 0 ? "kernel:crc32c[ref]" : "kernel:crc32c[in use]";
      BenchResult r = failed_result(dataset, name, name, n, reps, "");
      std::vector<double> times;
      uint32_t crc = 0;
      for (int run = 0; run < runs; ++run) {
        const Clock::time_point start = Clock::now();
        crc = path == 0 ? crc32c_update_ref(0, bytes, size) : crc32c_update(0, bytes, size);
        times.push_back(seconds_since(start));
      }
      if (path == 0) reference = crc;
      r.error = crc == reference ? "" : "differs from the scalar reference";
      r.encode_gbps = gbps(n, median(times));
      rows.push_back(r);
    }
  }
  for (BenchResult& r : bench_kernel_tables(dataset, x, n, reps)) rows.push_back(r);
  return rows;
}

std::vector<std::string> split_codec_list(const std::string& list) {
  std::vector<std::string> specs;
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(';', start);
    if (end == std::string::npos) end = list.size();
    size_t b = start, e = end;
    while (b < e && (list[b] == ' ' || list[b] == '\t' || list[b] == '\n')) ++b;
    while (e > b && (list[e - 1] == ' ' || list[e - 1] == '\t' || list[e - 1] == '\n')) --e;
    if (e > b) specs.push_back(list.substr(b, e - b));
    start = end + 1;
  }
  return specs;
}

bool resolve_auto_spec(const std::string& spec, const float* x, size_t n, std::string* resolved,
                       std::string* error) {
  static const std::string kAuto = "<auto>";
  std::string s = spec;
  const std::string shared_key = "shared=" + kAuto;
  size_t pos = s.find(shared_key);
  if (pos != std::string::npos) {
    // The value stage is the text after the last '+' (or the whole spec): "q<bits>...".
    const size_t plus = s.rfind('+', pos);
    const size_t stage = plus == std::string::npos ? 0 : plus + 1;
    if (stage >= s.size() || s[stage] != 'q' || stage + 1 >= s.size() || s[stage + 1] < '1' ||
        s[stage + 1] > '9') {
      *error = "shared=<auto> needs a uniform value stage 'q<bits>' in '" + spec + "'";
      return false;
    }
    int bits = 0;
    size_t i = stage + 1;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9' && bits < 64) bits = bits * 10 + (s[i++] - '0');
    if (bits < 2 || bits > 31) {
      *error = "shared=<auto> needs 2..31 bits (a signed code), '" + spec + "' has " + std::to_string(bits);
      return false;
    }
    float max_abs = 0.0f;
    for (size_t j = 0; j < n; ++j) max_abs = std::max(max_abs, fabsf(x[j]));
    if (!(max_abs > 0.0f) || !isfinite(max_abs)) {
      *error = "shared=<auto>: the input's max |x| is " + format_float9(max_abs) + ", no step can be derived";
      return false;
    }
    const float max_code = static_cast<float>((1u << (bits - 1)) - 1u);
    float step = max_abs / max_code;
    while (max_abs / step > max_code) step = nextafterf(step, std::numeric_limits<float>::infinity());
    s.replace(pos + 7, kAuto.size(), format_float9(step));
  }
  const std::string thresh_key = "thresh:" + kAuto;
  pos = s.find(thresh_key);
  if (pos != std::string::npos) {
    if (n == 0) {
      *error = "thresh:<auto>: the input is empty";
      return false;
    }
    std::vector<float> mags(n);
    for (size_t j = 0; j < n; ++j) mags[j] = fabsf(x[j]);
    const size_t k = k_for_density(kAutoThresholdDensity, n);
    std::nth_element(mags.begin(), mags.begin() + static_cast<ptrdiff_t>(n - k), mags.end());
    const float threshold = mags[n - k];
    if (!(threshold > 0.0f) || !isfinite(threshold)) {
      *error = "thresh:<auto>: the top-1% threshold of |x| is " + format_float9(threshold);
      return false;
    }
    s.replace(pos + 7, kAuto.size(), format_float9(threshold));
  }
  if (s.find(kAuto) != std::string::npos) {
    *error = "'" + spec + "': <auto> is only understood as shared=<auto> and thresh:<auto>";
    return false;
  }
  *resolved = s;
  return true;
}

BenchResult bench_memcpy(const std::string& dataset, const float* x, size_t n, int reps) {
  BenchResult r = failed_result(dataset, "memcpy", "memcpy", n, std::max(reps, kMinBaselineReps), "");
  std::vector<float> dst(n);
  std::vector<double> times;
  if (n > 0) memcpy(dst.data(), x, n * sizeof(float));  // warm up (and fault the pages in)
  for (int rep = 0; rep < r.reps; ++rep) {
    const Clock::time_point start = Clock::now();
    if (n > 0) memcpy(dst.data(), x, n * sizeof(float));
    times.push_back(seconds_since(start));
    // Keep the copy observable so that it is not optimized away.
    if (n > 0 && memcmp(&dst[n / 2], &x[n / 2], sizeof(float)) != 0) r.error = "memcpy mismatch";
  }
  r.nnz = static_cast<double>(n);
  r.encoded_bytes = 4.0 * static_cast<double>(n);
  r.bits_per_coord = 32.0;
  r.vnmse = r.bias = r.shrink = 0.0;
  r.encode_gbps = gbps(n, median(times));
  r.workspace_bytes = 0.0;
  r.workspace_ratio = 0.0;
  r.ratio_to_memcpy = 1.0;
  return r;
}

BenchResult bench_nth_element(const std::string& dataset, const float* x, size_t n, double density,
                              int reps) {
  char name[64];
  snprintf(name, sizeof name, "nth_element:%g", density);
  BenchResult r = failed_result(dataset, name, name, n, reps, "");
  r.sparse = true;
  if (n == 0) {
    r.error = "empty input";
    return r;
  }
  const size_t k = k_for_density(density, n);
  std::vector<float> mags(n);
  std::vector<uint32_t> indices(k);
  std::vector<double> times;
  for (int rep = 0; rep <= reps; ++rep) {  // rep 0 warms up
    const Clock::time_point start = Clock::now();
    for (size_t i = 0; i < n; ++i) mags[i] = fabsf(x[i]);
    std::nth_element(mags.begin(), mags.begin() + static_cast<ptrdiff_t>(n - k), mags.end());
    const float kth = mags[n - k];
    size_t above = 0;
    for (size_t i = 0; i < n; ++i) above += fabsf(x[i]) > kth ? 1 : 0;
    size_t ties_left = k - above, count = 0;
    for (size_t i = 0; i < n && count < k; ++i) {
      const float a = fabsf(x[i]);
      if (a > kth || (a == kth && ties_left > 0)) {
        if (a == kth) --ties_left;
        indices[count++] = static_cast<uint32_t>(i);
      }
    }
    const double t = seconds_since(start);
    if (rep > 0) times.push_back(t);
    if (count != k)
      r.error = "nth_element selection kept " + std::to_string(count) + " of " + std::to_string(k);
  }
  // Keeping the k values exactly: the error is the energy of the dropped coordinates.
  double kept = 0;
  for (size_t j = 0; j < k; ++j) kept += static_cast<double>(x[indices[j]]) * x[indices[j]];
  const double total = sum_squares(x, n);
  r.nnz = static_cast<double>(k);
  r.vnmse = total > 0 ? (total - kept) / total : kNull;
  r.bias = r.vnmse;
  r.shrink = total > 0 ? -(total - kept) / total : kNull;
  r.encode_gbps = gbps(n, median(times));
  r.workspace_bytes = 4.0 * static_cast<double>(n);
  r.workspace_ratio = 1.0;
  r.count_error = 0.0;
  return r;
}

namespace {

// The buffers of bench_codec(), sized once as the API asks.
struct CodecBuffers {
  CodecBuffers(const CodecSpec& spec, size_t n)
      : ws_bytes(workspace_size(spec, n)),
        cap(encoded_bound(spec, n)),
        workspace(std::max<size_t>(ws_bytes, 1)),
        encoded(std::max<size_t>(cap, 1)),
        decoded(n),
        accumulator(n),
        copy(n) {}
  size_t ws_bytes, cap;
  std::vector<uint8_t> workspace, encoded;
  std::vector<float> decoded, accumulator, copy;
  std::vector<uint8_t> decode_workspace;
};

// One timed encode, decode and decode_add of x. Real callers reuse their buffers: the bytes must
// not depend on what the output and the workspace held before, so both start from `fill` and a
// first, untimed encode writes over them. The timed encode then runs as the memcpy baseline does,
// back to back with its buffers in cache, and must give the same bytes. "" or what went wrong.
struct CodecPass {
  size_t written = 0;
  EncodedInfo info;
  double t_memcpy = 0, t_encode = 0, t_decode = 0, t_decode_add = 0;
};

std::string codec_pass(const CodecSpec& spec, const float* x, size_t n, uint64_t seed, uint8_t fill,
                       CodecBuffers* b, CodecPass* pass) {
  pass->t_memcpy = paired_memcpy_seconds(x, n, b->copy.data());
  std::fill(b->encoded.begin(), b->encoded.end(), fill);
  std::fill(b->workspace.begin(), b->workspace.end(), static_cast<uint8_t>(~fill));
  size_t first_written = 0;
  Status s = encode(spec, {x, n}, seed, {b->workspace.data(), b->ws_bytes}, {b->encoded.data(), b->cap},
                    &first_written);
  if (s != Status::kOk) return "encode: " + status_text(s);
  const uint32_t first_crc = crc32c_update(0, b->encoded.data(), first_written);
  Clock::time_point start = Clock::now();
  s = encode(spec, {x, n}, seed, {b->workspace.data(), b->ws_bytes}, {b->encoded.data(), b->cap},
             &pass->written);
  pass->t_encode = seconds_since(start);
  if (s != Status::kOk) return "encode: " + status_text(s);
  if (pass->written != first_written || crc32c_update(0, b->encoded.data(), pass->written) != first_crc) {
    return "encoding the same update twice gave different bytes";
  }
  if (pass->written > b->cap) {
    return "encode wrote " + std::to_string(pass->written) + " bytes, more than encoded_bound " +
           std::to_string(b->cap);
  }
  const Span<const uint8_t> bytes(b->encoded.data(), pass->written);
  s = inspect(bytes, &pass->info);
  if (s != Status::kOk) return "inspect of a fresh encoding: " + status_text(s);
  if (pass->info.total_bytes != pass->written || pass->info.n != n) {
    return "inspect disagrees with encode: total_bytes " + std::to_string(pass->info.total_bytes) + " vs " +
           std::to_string(pass->written) + ", n " + std::to_string(pass->info.n) + " vs " + std::to_string(n);
  }
  b->decode_workspace.resize(std::max<size_t>(decode_fast_workspace_size(pass->info), 1));
  const Span<uint8_t> dws(b->decode_workspace.data(), b->decode_workspace.size());
  start = Clock::now();
  s = decode(bytes, {b->decoded.data(), n}, dws);
  pass->t_decode = seconds_since(start);
  if (s != Status::kOk) return "decode: " + status_text(s);
  std::fill(b->accumulator.begin(), b->accumulator.end(), 0.0f);
  start = Clock::now();
  s = decode_add(bytes, 1.0f, {b->accumulator.data(), n}, dws);
  pass->t_decode_add = seconds_since(start);
  if (s != Status::kOk) return "decode_add: " + status_text(s);
  return "";
}

// What the timed passes add up to.
struct CodecTally {
  explicit CodecTally(size_t n) : mean_decoded(n, 0.0) {}
  std::vector<double> mean_decoded;
  std::vector<double> memcpy_times, encode_times, decode_times, decode_add_times;
  std::vector<uint8_t> probe_workspace;
  double vnmse_sum = 0, shrink_sum = 0, nnz_sum = 0, bytes_sum = 0, max_abs_diff = 0;
  double bucket_rate_sum = 0, recall_sum = 0;

  void add(const float* x, size_t n, double x_energy, const CodecPass& pass, const CodecBuffers& b,
           BenchResult* r) {
    memcpy_times.push_back(pass.t_memcpy);
    encode_times.push_back(pass.t_encode);
    decode_times.push_back(pass.t_decode);
    decode_add_times.push_back(pass.t_decode_add);
    nnz_sum += pass.info.nnz;
    bytes_sum += static_cast<double>(pass.written);
    const Span<const uint8_t> bytes(b.encoded.data(), pass.written);
    if (pass.info.values == ValueCoderKind::kSkCompress) {
      bucket_rate_sum += skc_exact_bucket_rate(bytes, pass.info, x, &probe_workspace);
    }
    if (pass.info.values == ValueCoderKind::kCountSketch)
      recall_sum += topk_recall(x, n, b.decoded, pass.info.nnz);
    double err = 0, dot = 0, scale = 0;
    for (size_t i = 0; i < n; ++i) {
      const double xi = x[i], yi = b.decoded[i];
      err += (yi - xi) * (yi - xi);
      dot += (yi - xi) * xi;
      mean_decoded[i] += yi;
      scale = std::max(scale, fabs(yi));
      if (!isfinite(yi)) r->error = "decode produced a non-finite value at index " + std::to_string(i);
    }
    for (size_t i = 0; i < n; ++i) {
      max_abs_diff = std::max(max_abs_diff, fabs(static_cast<double>(b.accumulator[i]) - b.decoded[i]));
    }
    if (max_abs_diff > 1e-5 * scale) r->decode_add_consistent = false;
    vnmse_sum += x_energy > 0 ? err / x_energy : kNull;
    shrink_sum += x_energy > 0 ? dot / x_energy : kNull;
  }

  void finish(const CodecSpec& spec, const float* x, size_t n, double x_energy, int reps, size_t ws_bytes,
              BenchResult* r) const {
    double bias_err = 0;
    for (size_t i = 0; i < n; ++i) {
      const double d = mean_decoded[i] / reps - x[i];
      bias_err += d * d;
    }
    r->nnz = nnz_sum / reps;
    r->encoded_bytes = bytes_sum / reps;
    r->bits_per_coord = n > 0 ? r->encoded_bytes * 8.0 / static_cast<double>(n) : kNull;
    r->bits_per_nnz = r->sparse && r->nnz > 0 ? r->encoded_bytes * 8.0 / r->nnz : kNull;
    r->vnmse = vnmse_sum / reps;
    r->gaussian_rd_bits = r->vnmse > 0 ? std::max(0.0, 0.5 * std::log2(1.0 / r->vnmse)) : kNull;
    r->rd_gap_bits = r->bits_per_coord - r->gaussian_rd_bits;
    r->shrink = shrink_sum / reps;
    r->bias = x_energy > 0 ? bias_err / x_energy : kNull;
    r->memcpy_paired_gbps = gbps(n, median(memcpy_times));
    r->encode_gbps = gbps(n, median(encode_times));
    r->decode_gbps = gbps(n, median(decode_times));
    r->decode_add_gbps = gbps(n, median(decode_add_times));
    if (r->sparse && r->nnz > 0) r->decode_add_mnnz = r->nnz / median(decode_add_times) / 1e6;
    r->workspace_bytes = static_cast<double>(ws_bytes);
    r->workspace_ratio = n > 0 ? static_cast<double>(ws_bytes) / (4.0 * static_cast<double>(n)) : kNull;
    if (r->sparse) {
      const double target = k_target(spec, x, n);
      r->count_error = target > 0 ? r->nnz / target - 1.0 : kNull;
    }
    r->decode_add_max_abs_diff = max_abs_diff;
    if (spec.values == ValueCoderKind::kSkCompress) {
      r->exact_bucket_rate = bucket_rate_sum / reps;
      r->sparse = true;
      r->bits_per_nnz = r->nnz > 0 ? r->encoded_bytes * 8.0 / r->nnz : kNull;
    }
    if (spec.values == ValueCoderKind::kCountSketch) r->topk_recall = recall_sum / reps;
  }
};

}  // namespace

BenchResult bench_codec(const std::string& dataset, const float* x, size_t n, const std::string& spec_text,
                        int reps) {
  BenchResult r = failed_result(dataset, spec_text, spec_text, n, reps, "");
  CodecSpec spec;
  const Status s = parse_codec_spec(spec_text.c_str(), &spec);
  if (s != Status::kOk) {
    r.error = "invalid spec: " + status_text(s);
    return r;
  }
  r.codec = canonical_spec(spec);
  r.sparse = spec.sparsifier != SparsifierKind::kNone;
  if (reps < 1) {
    r.error = "reps must be at least 1";
    return r;
  }
  CodecBuffers buffers(spec, n);
  CodecTally tally(n);
  std::vector<uint8_t> first_encoding;
  const double x_energy = sum_squares(x, n);
  for (int rep = 0; rep <= reps; ++rep) {  // rep 0 warms up with seed 1 (and checks determinism)
    const uint64_t seed = rep == 0 ? 1 : static_cast<uint64_t>(rep);
    const uint8_t fill = rep == 0 ? 0x00 : static_cast<uint8_t>(0xA5 ^ rep);
    CodecPass pass;
    r.error = codec_pass(spec, x, n, seed, fill, &buffers, &pass);
    if (!r.error.empty()) return r;
    if (rep == 0) {
      first_encoding.assign(buffers.encoded.data(), buffers.encoded.data() + pass.written);
      continue;
    }
    if (rep == 1) {
      r.deterministic =
          first_encoding.size() == pass.written &&
          (pass.written == 0 || memcmp(first_encoding.data(), buffers.encoded.data(), pass.written) == 0);
    }
    tally.add(x, n, x_energy, pass, buffers, &r);
  }
  if (!r.error.empty()) return r;
  tally.finish(spec, x, n, x_energy, reps, buffers.ws_bytes, &r);
  return r;
}

std::string bench_result_json(const BenchResult& r) {
  JsonObjectWriter w;
  w.add_string("dataset", r.dataset).add_string("codec", r.codec);
  if (r.requested != r.codec) w.add_string("requested", r.requested);
  w.add_uint("n", r.n);
  if (!r.error.empty()) {
    w.add_string("error", r.error).add_uint("reps", static_cast<uint64_t>(r.reps));
    return w.str();
  }
  w.add_number("nnz", r.nnz, 12)
      .add_number("encoded_bytes", r.encoded_bytes, 15)
      .add_number("bits_per_coord", r.bits_per_coord, 7)
      .add_number("bits_per_nnz", r.bits_per_nnz, 7)
      .add_number("vnmse", r.vnmse, 6)
      .add_number("gaussian_rd_bits", r.gaussian_rd_bits, 5)
      .add_number("rd_gap_bits", r.rd_gap_bits, 5)
      .add_number("bias", r.bias, 6)
      .add_number("shrink", r.shrink, 6)
      .add_number("encode_gbps", r.encode_gbps, 5)
      .add_number("decode_gbps", r.decode_gbps, 5)
      .add_number("decode_add_gbps", r.decode_add_gbps, 5)
      .add_number("decode_add_mnnz_per_s", r.decode_add_mnnz, 5)
      .add_number("memcpy_paired_gbps", r.memcpy_paired_gbps, 4)
      .add_number("ratio_to_memcpy", r.ratio_to_memcpy, 5)
      .add_number("workspace_bytes", r.workspace_bytes, 15)
      .add_number("workspace_ratio", r.workspace_ratio, 6)
      .add_number("count_error", r.count_error, 6)
      .add_uint("reps", static_cast<uint64_t>(r.reps));
  if (!isnan(r.exact_bucket_rate)) w.add_number("exact_bucket_rate", r.exact_bucket_rate, 5);
  if (!isnan(r.topk_recall)) w.add_number("topk_recall", r.topk_recall, 5);
  if (r.codec != "memcpy" && r.codec.compare(0, 11, "nth_element") != 0) {
    w.add_bool("deterministic", r.deterministic).add_bool("decode_add_consistent", r.decode_add_consistent);
  }
  return w.str();
}

void print_bench_table(const std::vector<BenchResult>& results, std::ostream& out) {
  size_t codec_width = 5;
  for (const BenchResult& r : results) codec_width = std::max(codec_width, r.codec.size());
  struct Column {
    const char* title;
    int width;
  };
  static const Column kColumns[] = {{"bits/coord", 10}, {"bits/nnz", 9}, {"vNMSE", 10},
                                    {"R(D) gap", 8},    {"bias", 10},    {"shrink", 10},
                                    {"enc GB/s", 9},    {"dec GB/s", 9}, {"dec+add GB/s", 12},
                                    {"add Mnnz/s", 10}, {"ws ratio", 9}, {"x memcpy", 9}};
  char buf[128];
  snprintf(buf, sizeof buf, "%-*s", static_cast<int>(codec_width), "codec");
  std::string line = buf;
  for (const Column& c : kColumns) {
    snprintf(buf, sizeof buf, "  %*s", c.width, c.title);
    line += buf;
  }
  out << line << "\n" << std::string(line.size(), '-') << "\n";
  for (const BenchResult& r : results) {
    snprintf(buf, sizeof buf, "%-*s", static_cast<int>(codec_width), r.codec.c_str());
    line = buf;
    if (!r.error.empty()) {
      out << line << "  FAILED: " << r.error << "\n";
      continue;
    }
    const std::string cells[] = {fmt(r.bits_per_coord, "%.3f"),
                                 fmt(r.bits_per_nnz, "%.2f"),
                                 fmt(r.vnmse, "%.3e"),
                                 fmt(r.rd_gap_bits, "%+.2f"),
                                 fmt(r.bias, "%.3e"),
                                 fmt(r.shrink, "%+.2e"),
                                 fmt(r.encode_gbps, "%.3f"),
                                 fmt(r.decode_gbps, "%.3f"),
                                 fmt(r.decode_add_gbps, "%.3f"),
                                 fmt(r.decode_add_mnnz, "%.1f"),
                                 fmt(r.workspace_ratio, "%.3f"),
                                 fmt(r.ratio_to_memcpy, "%.3f")};
    for (size_t i = 0; i < sizeof kColumns / sizeof kColumns[0]; ++i) {
      snprintf(buf, sizeof buf, "  %*s", kColumns[i].width, cells[i].c_str());
      line += buf;
    }
    if (!isnan(r.exact_bucket_rate)) line += "  exact_bucket " + fmt(r.exact_bucket_rate, "%.3f");
    if (!isnan(r.topk_recall)) line += "  topk_recall " + fmt(r.topk_recall, "%.3f");
    if (!r.deterministic) line += "  [bytes depend on buffer contents]";
    if (!r.decode_add_consistent) line += "  [decode_add != decode]";
    out << line << "\n";
  }
}

int run_bench(const BenchOptions& options, std::ostream& out, std::ostream& err) {
  const int reps = options.reps > 0 ? options.reps : (options.quick ? kBenchQuickReps : kBenchDefaultReps);
  const std::vector<std::string> specs =
      split_codec_list(options.codecs.empty() ? std::string(kDefaultBenchCodecs) : options.codecs);
  if (specs.empty()) {
    err << "edgefl bench: --codecs lists no codec\n";
    return 2;
  }
  if (!options.bench1m && options.inputs.empty()) {
    err << "edgefl bench: --no-bench1m needs at least one --input\n";
    return 2;
  }

  struct Dataset {
    std::string name;
    std::vector<float> values;
  };
  std::vector<Dataset> datasets;
  if (options.bench1m) datasets.push_back({"Bench-1M", make_bench1m()});
  if (options.sparse) {
    datasets.push_back({"Sparse-1M@1%", make_sparse_gaussian(0.01)});
    datasets.push_back({"Sparse-1M@10%", make_sparse_gaussian(0.10)});
  }
  if (options.real_update) {
    // A real update: the first client's update in round 5 of bf16 FedAvg of the CNN on
    // Fashion-MNIST in the README's end-to-end setting (about 10 s to train).
    std::vector<float> update;
    std::string error;
    if (make_real_update("cnn", 5, &update, &error)) {
      datasets.push_back({"fmnist-cnn-update", std::move(update)});
    } else {
      err << "edgefl bench: no real update (" << error << "); use --no-real to skip it\n";
      return 1;
    }
  }
  for (const std::string& path : options.inputs) {
    NpyArray array;
    std::string error;
    if (!read_npy_file(path, &array, &error)) {
      err << "edgefl bench: " << error << "\n";
      return 1;
    }
    datasets.push_back({path_basename(path), std::move(array.values)});
  }

  std::ofstream json;
  if (!options.json_path.empty()) {
    json.open(options.json_path, std::ios::out | std::ios::trunc);
    if (!json) {
      err << "edgefl bench: " << options.json_path << ": cannot create\n";
      return 1;
    }
  }

  bool any_failed = false;
  for (const Dataset& d : datasets) {
    const float* x = d.values.data();
    const size_t n = d.values.size();
    size_t zeros = 0;
    for (size_t i = 0; i < n; ++i) zeros += x[i] == 0.0f ? 1 : 0;
    char zero_text[32];
    snprintf(zero_text, sizeof zero_text, "%.1f%%", n ? 100.0 * double(zeros) / double(n) : 0.0);
    out << "dataset " << d.name << ": n=" << n << ", zeros=" << zero_text << ", reps=" << reps
        << ", kernels=" << kernels().name << "\n";
    std::vector<BenchResult> results;
    results.push_back(bench_memcpy(d.name, x, n, reps));
    const double memcpy_gbps = results.back().encode_gbps;
    results.push_back(bench_nth_element(d.name, x, n, 0.01, reps));
    if (options.peers) {
      for (BenchResult& p : bench_byteps_peers(d.name, x, n, reps)) results.push_back(p);
    }
    if (options.kernels && &d == &datasets.front()) {
      for (BenchResult& k : bench_kernels(d.name, x, n, reps)) results.push_back(k);
    }
    for (const std::string& spec : specs) {
      std::string resolved, error;
      if (!resolve_auto_spec(spec, x, n, &resolved, &error)) {
        results.push_back(failed_result(d.name, spec, spec, n, reps, error));
      } else {
        results.push_back(bench_codec(d.name, x, n, resolved, reps));
        results.back().requested = spec;
      }
    }
    for (BenchResult& r : results) {
      if (r.error.empty()) {
        const double baseline = r.memcpy_paired_gbps > 0 ? r.memcpy_paired_gbps : memcpy_gbps;
        r.ratio_to_memcpy = baseline > 0 ? r.encode_gbps / baseline : kNull;
        if (!r.deterministic || !r.decode_add_consistent) any_failed = true;
        if (!r.deterministic) {
          err << "edgefl bench: warning: " << d.name << " / " << r.codec
              << ": seed 1 gave different bytes into a zeroed and a pre-filled output buffer\n";
        }
        if (!r.decode_add_consistent) {
          err << "edgefl bench: warning: " << d.name << " / " << r.codec
              << ": decode_add into zeros differs from decode by up to " << r.decode_add_max_abs_diff << "\n";
        }
      } else {
        any_failed = true;
        err << "edgefl bench: " << d.name << " / " << r.codec << ": " << r.error << "\n";
      }
      if (json.is_open()) json << bench_result_json(r) << "\n";
    }
    print_bench_table(results, out);
    out << "\n";
    out.flush();
  }
  if (json.is_open()) {
    json.flush();
    if (!json) {
      err << "edgefl bench: " << options.json_path << ": write failed\n";
      return 1;
    }
  }
  return any_failed ? 1 : 0;
}

}  // namespace cli
}  // namespace edgefl
