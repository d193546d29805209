// edgefl/codec.h: compression of model updates under caller-owned memory.
//
// Ask, then give (the shape of ZSTD_compressBound / ZSTD_estimateCCtxSize):
//
//   edgefl::CodecSpec spec;
//   if (edgefl::parse_codec_spec("topk:0.01+q4", &spec) != edgefl::Status::kOk) { ... }
//   size_t ws  = edgefl::workspace_size(spec, n);    // scratch the encoder may use
//   size_t cap = edgefl::encoded_bound(spec, n);     // largest encoding of n coordinates
//   size_t written = 0;
//   edgefl::Status s = edgefl::encode(spec, {update, n}, seed, {ws_buf, ws}, {out_buf, cap}, &written);
//   ...
//   s = edgefl::decode_add({bytes, len}, weight, {accumulator, n});   // server: sum += weight * x
//
// No function here allocates, throws, or keeps a pointer to its arguments after it returns. All
// functions are thread-safe for distinct buffers.
//
// Spec grammar (README "Codec specs" documents it with examples):
//
//   spec       := [ sparsifier '+' ] values  |  sparsifier
//   (k > n keeps all n; numbers are decimal, e.g. 0.01, 1e-3; hq block is a power of two <= 1024)
//   sparsifier := 'topk' ':' (FRACTION | 'k=' COUNT) { ',' ('approx' | 'sample=' FRACTION | 'idx=' IDX) }
//              |  'thresh' ':' ABSVALUE { ',' 'idx=' IDX }
//              |  'randk' ':' (FRACTION | 'k=' COUNT) { ',' 'unscaled' }
//   IDX        := 'ef' | 'rice' | 'auto'
//   values     := 'fp32' | 'fp16' | 'bf16'
//              |  'q' BITS { ':' | ',' } ('block=' N | 'det' | 'shared=' STEP | 'clip' | 'ans' | 'sm')  BITS
//              in {1,2,4,8} |  'hq' BITS [ ':' 'block=' N ]                                    BITS in
//              {1,2,3,4} |  'qsgd' [ ':' ('s=' LEVELS | 'bucket=' N) {',' ...} ] |  'tern' [ ':' 'block=' N ]
//              |  'sign' [ ':' 'block=' N ]
//              |  'skc' [ ':' ('bins=' B | 'groups=' G | 'rows=' R | 'cols=' RATIO | 'k=' K) {',' ...} ]
//   sketch     := 'cs' [ ':' (CELLS | 'cells=' FRACTION | 'cols=' C | 'rows=' R | 'top=' FRACTION
//                            | 'k=' COUNT | 'step=' STEP) {',' ...} ]          (no sparsifier)
//   alias      := 'sparq' ':' FRACTION   = topk:FRACTION,approx,idx=auto+q4:sm,ans (edgefl's sparse codec)
//
// A sparsifier alone keeps its values in fp32. skc without a sparsifier carries the non-zero
// coordinates of the update.
#ifndef EDGEFL_CODEC_H_
#define EDGEFL_CODEC_H_

#include <stddef.h>
#include <stdint.h>

#include "edgefl/config.h"
#include "edgefl/span.h"
#include "edgefl/status.h"

namespace edgefl {

// Which coordinates are sent. Ids are part of the wire format: never renumber.
enum class SparsifierKind : uint8_t {
  kNone = 0,        // dense: every coordinate
  kTopK = 1,        // exactly k largest |x| (ties broken by lower index), radix select
  kTopKApprox = 2,  // |x| >= a threshold estimated from a seeded sample; count near k
  kThreshold = 3,   // |x| >= a fixed threshold
  kRandomK = 4,     // k coordinates drawn from the shared seed; no index bytes on the wire
};

// How the sent values are coded. Ids are part of the wire format: never renumber.
enum class ValueCoderKind : uint8_t {
  kFp32 = 1,
  kFp16 = 2,          // IEEE binary16, round to nearest even
  kBf16 = 3,          // bfloat16, round to nearest even
  kUniform = 4,       // b-bit uniform per block (min/max) or with a shared step; stochastic by default
  kQsgd = 5,          // QSGD: s levels of |x| / ||bucket||_2, stochastic (Alistarh et al., NeurIPS 2017)
  kTernGrad = 6,      // {-1,0,+1} x max|block|, stochastic (Wen et al., NeurIPS 2017)
  kScaledSign = 7,    // sign x mean|block| (1 bit; biased: pair it with error feedback)
  kHadamard = 8,      // randomized Hadamard rotation + Lloyd-Max levels + unbiasing scale (EDEN)
  kSkCompress = 9,    // SKCompress as published: quantile buckets, MinMaxSketch, Huffman, delta keys
  kCountSketch = 10,  // Count Sketch of the whole update, integer cells (FetchSGD); summable
};

// How the indices of a sparse update are coded. Ids are part of the wire format.
enum class IndexCoding : uint8_t {
  kNone = 0,       // dense, or random-k (indices regenerated from the seed)
  kEliasFano = 1,  // 2 + ceil(log2(n/k)) bits per index at most
  kRice = 2,       // adaptive Golomb-Rice of the gaps: below Elias-Fano on clustered sets
  kBlockRice = 3,  // Rice with each block of 16 gaps' own best parameter (format version 2):
                   // smaller than kRice on top-k's clustered sets, and decoded a word at a time
  kAuto = 255,     // spec only: the cheaper of Elias-Fano and block Rice for each update (one
                   // extra pass)
};

// A parsed codec spec. Build it with parse_codec_spec(); the fields are public so that tools can
// display them, but encode() re-validates them.
struct CodecSpec {
  SparsifierKind sparsifier = SparsifierKind::kNone;
  double density = 0.0;          // fraction of coordinates kept, in (0, 1]; used when k == 0
  uint32_t k = 0;                // absolute count kept (topk/randk), overrides density
  float threshold = 0.0f;        // kThreshold: keep |x| >= threshold (> 0)
  double sample_fraction = 0.0;  // kTopKApprox: fraction sampled (at most 1/40); 0 = from k
  bool randk_unscaled = false;   // kRandomK: send x (true) or x * n / k (false: unbiased)
  IndexCoding index_coding = IndexCoding::kEliasFano;

  ValueCoderKind values = ValueCoderKind::kFp32;
  uint8_t bits = 32;           // code width: 32/16 for floats, 1/2/4/8 uniform, 1..4 hadamard
  uint32_t block = 0;          // coordinates per scale (uniform, tern, sign, hadamard) / bucket (qsgd)
  bool stochastic = true;      // kUniform: stochastic (unbiased) or nearest rounding
  float shared_step = 0.0f;    // kUniform: > 0 selects shared-scale mode (code = round(x / step))
  bool clip = false;           // shared-scale: saturate codes at +-(2^(bits-1)-1) instead of failing
  bool entropy_coded = false;  // kUniform blocked: rANS-code the codes when that is smaller ('ans')
  // kUniform blocked, bits >= 2 ('sm'): a sign bit and bits-1 stochastic levels of |x| between the
  // block's smallest and largest |x| (top-k values sit far from zero: no levels are wasted there).
  bool sign_magnitude = false;
  uint16_t levels = 0;  // kQsgd: s, the number of positive levels (1..32767)

  // kSkCompress (defaults are the published ones).
  uint16_t skc_bins = 256;    // equi-depth buckets, 2..256
  uint8_t skc_groups = 8;     // bucket groups, 2..16
  float skc_cols = 0.3f;      // MinMaxSketch columns per key of a group, (0, 4]
  uint16_t quantile_k = 128;  // quantile sketch parameter k, even, 16..1024
  // kSkCompress rows (1..4, default 2) and kCountSketch rows (1..15, default 5).
  uint8_t sketch_rows = 0;
  // kCountSketch: cells = sketch_cells x n (when sketch_cols == 0) split over the rows; the
  // top `k` (or density x n) estimates are decoded; cells count shared_step units.
  double sketch_cells = 0.0;
  uint32_t sketch_cols = 0;
};

// Parses `text` (NUL-terminated). Fails with kInvalidSpec (and leaves *spec unchanged) on any
// unknown stage, key, or value out of range.
[[nodiscard]] Status parse_codec_spec(const char* text, CodecSpec* spec);

// Writes the canonical spelling of `spec` into `buf` (NUL-terminated, truncated to cap).
// Returns the length the full spelling needs, excluding the NUL.
size_t format_codec_spec(const CodecSpec& spec, char* buf, size_t cap);

// kOk if `spec` is a valid combination of parameters, kInvalidSpec otherwise.
[[nodiscard]] Status validate_codec_spec(const CodecSpec& spec);

// True for codecs whose error does not average out (top-k, threshold, unscaled random-k, scaled
// sign, nearest or clipped rounding): they need error feedback (edgefl/error_feedback.h) to
// converge (Karimireddy et al., ICML 2019; Stich et al., NeurIPS 2018).
bool needs_error_feedback(const CodecSpec& spec);

// Scratch bytes encode() needs for n coordinates (0 is possible). 0 also for an invalid spec:
// encode() then fails with kInvalidSpec. For skc and cs it also covers decode_workspace_size()
// of the encodings it produces, so one buffer serves encode and the decode error feedback does.
size_t workspace_size(const CodecSpec& spec, size_t n);

// The largest encoding of n coordinates under `spec`, in bytes, header included. 0 for an invalid
// spec or n > EDGEFL_MAX_DIMENSION (encode() then fails with kInvalidSpec or kDimensionTooLarge).
size_t encoded_bound(const CodecSpec& spec, size_t n);

// Encodes `update` into `out`; `*written` receives its size (0 on failure).
//  - `seed` drives stochastic rounding, random-k selection, the Hadamard signs and top-k
//    sampling; the same (spec, update, seed) gives the same bytes on every platform.
//  - `workspace` must hold workspace_size(spec, n) bytes (any alignment); it is scratch only.
// Fails: kInvalidSpec; kDimensionTooLarge if n > EDGEFL_MAX_DIMENSION; kNonFiniteInput if any
// coordinate is NaN or Inf (random-k without a shared scale reads only the k coordinates it
// carries, in O(k): NaN or Inf elsewhere is not seen; ErrorFeedback::encode checks them all);
// kValueOutOfRange if a value overflows fp16/bf16, if random-k's n / k scale takes a carried
// value past 3e38, or (shared-scale without `clip`) if some |x| / step exceeds 2^(bits-1)-1;
// kWorkspaceTooSmall; kBufferTooSmall if out.size() < encoded_bound.
[[nodiscard]] Status encode(const CodecSpec& spec, Span<const float> update, uint64_t seed,
                            Span<uint8_t> workspace, Span<uint8_t> out, size_t* written);

// What an encoding's header says, after the header and the checksum have been verified.
struct EncodedInfo {
  uint8_t version = 0;
  SparsifierKind sparsifier = SparsifierKind::kNone;
  ValueCoderKind values = ValueCoderKind::kFp32;
  IndexCoding index_coding = IndexCoding::kNone;
  uint32_t n = 0;    // dimension
  uint32_t nnz = 0;  // coordinates carried (n when dense)
  uint8_t bits = 0;  // code width in bits
  uint32_t block = 0;
  uint16_t levels = 0;
  bool stochastic = false;
  bool shared_scale = false;
  bool randk_unscaled = false;
  bool randk_permuted = false;  // random-k indices in seeded-permutation order (every encoder
                                // since this flag); false: ascending (Algorithm S), older encoders
  bool entropy_coded = false;   // the value region is rANS-coded (uniform blocked codes)
  bool rans_wide = false;       // ... with 8 interleaved rANS states (false: 4, older encoders)
  bool sign_magnitude = false;  // uniform codes are sign + magnitude levels
  float param = 0.0f;           // shared step (kUniform shared) or threshold (kThreshold)
  uint64_t seed = 0;
  uint32_t contributions = 0;  // encodings summed into this one (1 for a fresh encoding)
  size_t header_bytes = 0;
  size_t index_bytes = 0;
  size_t value_bytes = 0;
  size_t total_bytes = 0;  // header + index + value bytes
  uint32_t checksum = 0;   // CRC32C stored in the header
};

// Size of the fixed header at the front of every encoding, in bytes.
constexpr size_t kEncodedHeaderBytes = 52;

// Verifies the header (magic, version, ids, parameter ranges, sizes) and the checksum of
// `bytes`, and fills `*info`. Does not decode the payload. Never reads outside `bytes`.
[[nodiscard]] Status inspect(Span<const uint8_t> bytes, EncodedInfo* info);

// Decodes `bytes` into `out` (out.size() must equal the encoded dimension n).
// Fails on any malformed input with the specific status; `out` is then unchanged.
[[nodiscard]] Status decode(Span<const uint8_t> bytes, Span<float> out);

// accumulator[i] += weight * decoded[i] for every coordinate the encoding carries, without a
// dense copy. The whole encoding is validated before the accumulator is touched: on any error
// the accumulator is unchanged. Fails: as decode(); kInvalidArgument if weight is not finite.
// n = 0 with a null accumulator is fine.
[[nodiscard]] Status decode_add(Span<const uint8_t> bytes, float weight, Span<float> accumulator);

// The same into a double accumulator (servers: sums of many updates keep their precision, and
// partial sums merged in any order agree to ~1e-16 relative).
[[nodiscard]] Status decode_add(Span<const uint8_t> bytes, double weight, Span<double> accumulator);

// True when two encodings of this kind can be added without decoding (shared-scale integer
// codes, dense or random-k with a shared seed; fp32 values, dense or random-k; Count Sketches).
bool is_summable(const EncodedInfo& info);

// Largest encoding add_encoded() can produce from `a` and `b`.
size_t add_encoded_bound(const EncodedInfo& a, const EncodedInfo& b);

// Writes the encoding of decode(a) + decode(b) into `out` without decoding to floats where the
// codes are integers (the sum is then exact). Fails: the statuses of inspect(); kNotSummable;
// kIncompatible if dimension, sparsifier, seed, k, step or codec differ; kOverflow if a summed
// code would exceed 31 bits; kBufferTooSmall.
[[nodiscard]] Status add_encoded(Span<const uint8_t> a, Span<const uint8_t> b, Span<uint8_t> out,
                                 size_t* written);

// How many integer codes read_integer_codes() gives for an encoding: nnz for shared-scale codes,
// rows x cols for a Count Sketch, 0 for an encoding without integer codes.
size_t integer_code_count(const EncodedInfo& info);

// The integer codes of a summable integer encoding, in the order the encoding carries them, so
// that two such encodings of one round have their codes at the same positions: for q<b>:shared=STEP
// (dense or after random-k with a shared seed) codes[j] of the j-th carried coordinate; for a
// Count Sketch (cs) its rows x cols cells, row-major. Secure aggregation masks exactly these
// integers and sums them modulo 2^m. Fails: the statuses of inspect(); kNotSummable for any other
// encoding (fp32, entropy-coded, sparsified by top-k or threshold); kBufferTooSmall if
// codes.size() < integer_code_count(). Writes integer_code_count() codes.
[[nodiscard]] Status read_integer_codes(Span<const uint8_t> bytes, Span<int32_t> codes);

// The encoding that carries `codes` in place of the codes of `like` (an EncodedInfo that
// read_integer_codes() accepted), e.g. the unmasked sum of `contributions` devices' codes: the
// same dimension, sparsifier, seed and step, a code width wide enough for the largest |code|,
// and `contributions` recorded; decode() of it gives the sum of the devices' decoded updates.
// A Count Sketch's codes are its cells (decode() unsketches the sum's heavy hitters). Fails:
// kNotSummable (like is not such an encoding), kSizeMismatch (codes.size() !=
// integer_code_count(like)), kOverflow (|code| > 2^31 - 1 or contributions == 0),
// kBufferTooSmall (out smaller than kEncodedHeaderBytes + 4 x integer_code_count(like)).
[[nodiscard]] Status write_integer_codes(const EncodedInfo& like, Span<const int32_t> codes,
                                         uint32_t contributions, Span<uint8_t> out, size_t* written);

// Scratch bytes decode() and decode_add() need for this encoding: 0 for every codec but skc
// (its sketch tables) and cs (one float per coordinate while unsketching). The overloads
// without a workspace fail with kWorkspaceTooSmall when this is not 0.
size_t decode_workspace_size(const EncodedInfo& info);

// Scratch bytes with which decode(), decode_add() and verify() run fastest: for top-k and
// threshold encodings (coded indices) decode_workspace_size() plus 4 bytes per carried coordinate
// (at any alignment), so that the indices are read once, not once to check and once to apply
// (about 1.8x the kept coordinates per second), and 4 more when the values are rANS-coded (`ans`,
// `sparq`), so that their stream too is decoded once; otherwise decode_workspace_size(). Any workspace
// of at least decode_workspace_size() bytes gives the same result. Builds for size
// (__OPTIMIZE_SIZE__) have no such path and return decode_workspace_size().
size_t decode_fast_workspace_size(const EncodedInfo& info);

[[nodiscard]] Status decode(Span<const uint8_t> bytes, Span<float> out, Span<uint8_t> workspace);
[[nodiscard]] Status decode_add(Span<const uint8_t> bytes, float weight, Span<float> accumulator,
                                Span<uint8_t> workspace);

// The header's fields, checked for consistency (magic, version, ids, parameter ranges, sizes
// against bytes.size()) but neither the checksum nor the payload: enough to size the workspace
// and to refuse an encoding of the wrong dimension or seed before any pass over the payload.
// decode(), decode_add() and verify() check everything again. Never reads outside `bytes`.
[[nodiscard]] Status read_header(Span<const uint8_t> bytes, EncodedInfo* info);

// Everything decode() checks (header, checksum, every index in range and sorted, every value
// region well formed, sketch tables consistent), without writing any output: no n-float
// buffer. verify() succeeds exactly when decode() with the same workspace would. `workspace`
// must hold decode_workspace_size() bytes; `*info` (optional) receives the header's fields.
[[nodiscard]] Status verify(Span<const uint8_t> bytes, Span<uint8_t> workspace, EncodedInfo* info);
[[nodiscard]] Status decode_add(Span<const uint8_t> bytes, double weight, Span<double> accumulator,
                                Span<uint8_t> workspace);

// Short names for the enums ("topk", "q", "elias_fano", ...). Never null.
const char* sparsifier_name(SparsifierKind kind);
const char* value_coder_name(ValueCoderKind kind);
const char* index_coding_name(IndexCoding coding);

}  // namespace edgefl

#endif  // EDGEFL_CODEC_H_
