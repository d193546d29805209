// edgefl/aggregate.h: streaming federated averaging and server optimizers, in caller memory.
//
// The server (and the simulator) fold each client's encoded update into a running weighted sum as
// it arrives, so that memory is O(model) however many clients report:
//
//   size_t bytes = edgefl::StreamingAggregator::storage_bytes(n);      // ask ...
//   edgefl::StreamingAggregator agg;
//   if (agg.init({buf, bytes}, n) != edgefl::Status::kOk) { ... }      // ... then give
//   for (each update)  s = agg.add_encoded({bytes, len}, double(samples));  // rejected: no change
//   s = agg.mean({mean_delta, n});                                     // sum / total weight
//   s = opt.apply({global, n}, {mean_delta, n});                       // FedAvg / FedAvgM / FedAdam
//
// Tiered servers aggregate partially and merge(); a server checkpoints an open round with
// export_state() / import_state(). Nothing here allocates, throws, or keeps a pointer to its
// arguments other than the storage given to init(). Objects are not thread-safe: one aggregator
// per thread, merged at the end.
//
// Checkpoint layout (export_state, version 1; every field little-endian):
//
//   offset  size  field
//        0     4  magic "EFAG" (45 46 41 47)
//        4     2  version = 1
//        6     2  header bytes = 40
//        8     4  n, the dimension
//       12     4  flags = 0 (reserved; readers reject non-zero)
//       16     8  count, the number of updates added (uint64)
//       24     8  total weight (IEEE binary64)
//       32     4  CRC32C (Castagnoli) of bytes [0, 32) followed by bytes [40, 40 + 8n)
//       36     4  reserved = 0
//       40    8n  the weighted sum, n IEEE binary64 values
#ifndef EDGEFL_AGGREGATE_H_
#define EDGEFL_AGGREGATE_H_

#include <stddef.h>
#include <stdint.h>

#include "edgefl/span.h"
#include "edgefl/status.h"

namespace edgefl {

// The largest weight one update may carry (weights are sample counts, typically). The bound keeps
// every partial sum finite: |decoded value| < 3.5e38 and weight <= 1e12 give terms < 3.5e50, and
// 2^64 of them stay far below the binary64 maximum of 1.8e308.
constexpr double kMaxUpdateWeight = 1e12;

// Size of the fixed header of an exported aggregate, in bytes.
constexpr size_t kAggregateStateHeaderBytes = 40;

// FedAvg's weighted mean (McMahan et al., AISTATS 2017), computed as a stream: a binary64 sum of
// weight * update and the total weight. Memory: 8 bytes per coordinate, whatever the number of
// updates. Sums are binary64, so adding K updates in different orders, or as merged partial
// aggregates, agrees to within about K * 2^-53 of the sum of |weight * value| per coordinate.
class StreamingAggregator {
 public:
  // Bytes of storage an aggregate of n coordinates needs (any alignment: it includes the slack to
  // align the binary64 sum to 8 bytes). 0 if n > EDGEFL_MAX_DIMENSION.
  static size_t storage_bytes(size_t n);

  // Bytes export_state() writes for n coordinates: kAggregateStateHeaderBytes + 8 n.
  static size_t export_bytes(size_t n);

  // Binds the aggregate to caller-owned `storage` (at least storage_bytes(n) bytes) and empties
  // it. The storage must outlive this object and is never freed here. n == 0 is allowed.
  // Fails: kDimensionTooLarge if n > EDGEFL_MAX_DIMENSION; kInvalidArgument if storage is too
  // small or null. On failure the object is left unbound (every other call then fails with
  // kInvalidArgument, or reports 0).
  [[nodiscard]] Status init(Span<uint8_t> storage, size_t n);

  // Empties the aggregate (sum, count and total weight to zero); keeps the storage.
  void reset();

  // Decodes an encoding (edgefl/codec.h) and adds weight * update to the sum, without a dense
  // copy. The whole encoding is validated first: on any error nothing changes.
  // Fails: kInvalidArgument if unbound or weight is not in (0, kMaxUpdateWeight]; the decode
  // statuses (kTruncated, kBadMagic, kChecksumMismatch, ...; kDimensionMismatch if the encoded
  // dimension differs from size()).
  [[nodiscard]] Status add_encoded(Span<const uint8_t> encoded, double weight);
  // The same for encodings whose decoding needs scratch (skc, cs): `decode_workspace` holds at
  // least decode_workspace_size() of the encoding's header (edgefl/codec.h); with
  // decode_fast_workspace_size(), top-k and threshold encodings are added about 1.8x faster.
  [[nodiscard]] Status add_encoded(Span<const uint8_t> encoded, double weight,
                                   Span<uint8_t> decode_workspace);

  // Adds weight * update for a dense float update. On any error nothing changes.
  // Fails: kInvalidArgument (unbound, bad weight); kDimensionMismatch if update.size() != size();
  // kNonFiniteInput if any coordinate is NaN or Inf.
  [[nodiscard]] Status add_dense(Span<const float> update, double weight);

  // out[i] = sum[i] / total_weight(), rounded to float.
  // Fails: kInvalidArgument if unbound or empty (count() == 0); kDimensionMismatch if
  // out.size() != size(); kValueOutOfRange if a mean exceeds the float range (only possible after
  // import_state() of a crafted checkpoint). `out` is unchanged on failure.
  [[nodiscard]] Status mean(Span<float> out) const;

  // Adds `other`'s sum, count and total weight to this aggregate (tiered aggregation: merging
  // partial aggregates equals one aggregate over all their updates, up to binary64 rounding).
  // Fails: kInvalidArgument if either is unbound or &other == this; kDimensionMismatch.
  [[nodiscard]] Status merge(const StreamingAggregator& other);

  // Writes the checkpoint (layout above) into `out`; *written receives export_bytes(size()),
  // or 0 on failure. Fails: kInvalidArgument (unbound, null written); kBufferTooSmall.
  [[nodiscard]] Status export_state(Span<uint8_t> out, size_t* written) const;

  // Replaces this aggregate's state with a checkpoint written by export_state(). The checkpoint
  // is untrusted: everything is verified before anything changes.
  // Fails: kInvalidArgument if unbound; kTruncated (shorter than the header or than 40 + 8n);
  // kBadMagic; kUnsupportedVersion; kBadParameters (header bytes, flags, reserved);
  // kDimensionMismatch (its n differs from size()); kSizeMismatch (longer than 40 + 8n);
  // kChecksumMismatch; kCorruptPayload (a non-finite or inconsistent sum, count or weight).
  [[nodiscard]] Status import_state(Span<const uint8_t> bytes);

  size_t size() const { return n_; }
  bool bound() const { return bound_; }      // init() succeeded
  uint64_t count() const { return count_; }  // updates added (merged counts included)
  double total_weight() const { return total_weight_; }
  // The running weighted sum (size() values); valid until the next mutating call.
  Span<const double> sum() const { return Span<const double>(sum_, n_); }

 private:
  double* sum_ = nullptr;  // 8-byte aligned inside the caller's storage; null when n_ == 0
  size_t n_ = 0;
  bool bound_ = false;
  uint64_t count_ = 0;
  double total_weight_ = 0.0;
};

// Robust aggregation for rounds without secure aggregation (Yin, Chen, Ramchandran, Bartlett,
// ICML 2018, "Byzantine-Robust Distributed Learning"): per coordinate, the median or the
// beta-trimmed mean of K dense updates, unweighted (a weight is a device's own claim). Unlike the
// streaming mean they need every update at once: K x n floats, update-major (rows[k * n + i]).
//
//   kMean         the plain mean of the K rows (the reference the others are compared with)
//   kMedian       the coordinate-wise median (the mean of the two middle values when K is even):
//                 with f < K/2 crafted rows, each coordinate stays between the honest values
//                 ranked K/2 - f and K/2 + f
//   kTrimmedMean  drop the floor(beta K) smallest and largest values of each coordinate, average
//                 the rest: with f <= floor(beta K) crafted rows, each coordinate stays within the
//                 honest values' range
enum class RobustRule : uint8_t { kMean = 0, kMedian = 1, kTrimmedMean = 2 };

struct RobustSpec {
  RobustRule rule = RobustRule::kMean;
  double trim_fraction = 0.2;  // beta, kTrimmedMean only: 0 <= beta < 0.5
};

// Parses "mean" | "median" | "trimmed-mean" [ ':' 'beta=' NUM ] (beta in [0, 0.5); default
// 0.2, Flower's FedTrimmedAvg). kInvalidSpec on anything else; kInvalidArgument on nulls.
[[nodiscard]] Status parse_robust_spec(const char* text, RobustSpec* spec);
// "mean", "median", "trimmed-mean". Never null.
const char* robust_rule_name(RobustRule rule);

// Bytes of workspace robust_combine() needs for K rows: 4 K (one coordinate's values).
size_t robust_workspace_bytes(size_t count);

// out[i] = the rule applied to rows[k * n + i], k = 0 .. count - 1. Fails: kInvalidArgument
// (count == 0, rows.size() != count * n, a trim that leaves no value, workspace too small or
// misaligned for float), kDimensionMismatch (out.size() != n), kNonFiniteInput (a NaN or Inf
// in rows). `out` is unchanged on failure.
[[nodiscard]] Status robust_combine(const RobustSpec& spec, Span<const float> rows, size_t count,
                                    Span<float> out, Span<uint8_t> workspace);

// Server optimizers of the FedOpt family (Reddi et al., ICLR 2021, "Adaptive Federated
// Optimization", Algorithm 2). Ids are stable (they may appear in checkpoints and logs).
enum class ServerOptimizerKind : uint8_t {
  kFedAvg = 0,   // global += lr * delta
  kFedAvgM = 1,  // v = momentum * v + delta; global += lr * v (Hsu et al. 2019, arXiv:1909.06335)
  kFedAdam = 2,  // m = b1 m + (1-b1) delta; v = b2 v + (1-b2) delta^2; global += lr m/(sqrt(v)+tau)
};

// A parsed server optimizer spec. Build it with parse_server_optimizer_spec().
//
//   spec := 'fedavg'  [ ':' 'lr=' NUM ]
//        |  'fedavgm' [ ':' kv { ',' kv } ]   kv in lr=NUM, momentum=NUM
//        |  'fedadam' [ ':' kv { ',' kv } ]   kv in lr=NUM, b1=NUM, b2=NUM, tau=NUM
//   NUM  := decimal, e.g. 1, 0.9, 1e-3 (no sign, no inf/nan); each key at most once.
//
// Defaults: fedavg lr=1; fedavgm lr=1, momentum=0.9; fedadam lr=0.01, b1=0.9, b2=0.99, tau=1e-3
// (Reddi et al.'s b1, b2 and tau). Ranges: 0 < lr <= 1e6; 0 <= momentum, b1, b2 < 1;
// 0 < tau <= 1e6.
struct ServerOptimizerSpec {
  ServerOptimizerKind kind = ServerOptimizerKind::kFedAvg;
  float lr = 1.0f;
  float momentum = 0.9f;  // kFedAvgM
  float b1 = 0.9f;        // kFedAdam
  float b2 = 0.99f;       // kFedAdam
  float tau = 1e-3f;      // kFedAdam: adaptivity; also v's initial value is tau^2 (Algorithm 2)
};

// Parses `text` (NUL-terminated). Fails with kInvalidSpec (leaving *spec unchanged) on an
// unknown optimizer or key, a repeated key, a malformed number or a value out of range;
// kInvalidArgument on null pointers.
[[nodiscard]] Status parse_server_optimizer_spec(const char* text, ServerOptimizerSpec* spec);

// kOk if `spec` holds a known kind and values in range, kInvalidSpec otherwise.
[[nodiscard]] Status validate_server_optimizer_spec(const ServerOptimizerSpec& spec);

// Short name of a kind ("fedavg", "fedavgm", "fedadam"). Never null.
const char* server_optimizer_name(ServerOptimizerKind kind);

// Applies a round's mean update to the global model, keeping the optimizer state (momentum,
// moments) in caller memory. State is float32, like the model.
class ServerOptimizer {
 public:
  // Bytes of state for n coordinates (any alignment): 0 for FedAvg, 4 n for FedAvgM, 8 n for
  // FedAdam. 0 also for an unknown kind or n > EDGEFL_MAX_DIMENSION (init() then fails).
  static size_t state_bytes(ServerOptimizerKind kind, size_t n);

  // Binds to `state` (at least state_bytes(spec.kind, n) bytes; may be empty for FedAvg) and sets
  // the initial state: momentum 0; FedAdam m = 0, v = tau^2. The state must outlive this object.
  // Fails: kInvalidSpec; kDimensionTooLarge; kInvalidArgument if state is too small or null.
  [[nodiscard]] Status init(const ServerOptimizerSpec& spec, Span<uint8_t> state, size_t n);

  // Returns the state to its initial values and steps() to 0.
  void reset();

  // One server step: global += the optimizer's step for `mean_delta` (the weighted mean of
  // client deltas, local - global, e.g. StreamingAggregator::mean()). All arithmetic is float32
  // in a fixed order, so results are the same on every IEEE platform.
  // Fails, changing neither `global` nor the state: kInvalidArgument if not initialized;
  // kDimensionMismatch; kNonFiniteInput if mean_delta holds NaN/Inf; kValueOutOfRange if a new
  // global value or state value would not be finite.
  [[nodiscard]] Status apply(Span<float> global, Span<const float> mean_delta);

  const ServerOptimizerSpec& spec() const { return spec_; }
  size_t size() const { return n_; }
  uint64_t steps() const { return steps_; }  // successful apply() calls since init/reset
  float momentum(size_t i) const;            // kFedAvgM: v[i]; kFedAdam: m[i]; else 0
  float second_moment(size_t i) const;       // kFedAdam: v[i]; else 0

 private:
  ServerOptimizerSpec spec_;
  uint8_t* state_ = nullptr;
  size_t n_ = 0;
  bool ready_ = false;
  uint64_t steps_ = 0;
};

}  // namespace edgefl

#endif  // EDGEFL_AGGREGATE_H_
