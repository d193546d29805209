// StreamingAggregator: FedAvg as a stream of decode_add() calls into a binary64 sum held in
// caller memory, plus merge and a checksummed checkpoint (layout in edgefl/aggregate.h).
// Freestanding: no heap, no exceptions, libc only for memcpy/memset.
#include <stdint.h>
#include <string.h>

#include "aggregate/bytes.h"
#include "edgefl/aggregate.h"
#include "edgefl/codec.h"
#include "edgefl/config.h"

namespace edgefl {

namespace {

constexpr uint8_t kMagic[4] = {'E', 'F', 'A', 'G'};
constexpr uint16_t kVersion = 1;

// Header field offsets (edgefl/aggregate.h).
constexpr size_t kOffMagic = 0;
constexpr size_t kOffVersion = 4;
constexpr size_t kOffHeaderBytes = 6;
constexpr size_t kOffN = 8;
constexpr size_t kOffFlags = 12;
constexpr size_t kOffCount = 16;
constexpr size_t kOffWeight = 24;
constexpr size_t kOffChecksum = 32;
constexpr size_t kOffReserved = 36;
static_assert(kOffReserved + 4 == kAggregateStateHeaderBytes, "header layout");

bool weight_ok(double w) {
  return w > 0.0 && w <= kMaxUpdateWeight;  // false for NaN
}

// CRC32C of the checkpoint: header bytes [0, 32) then the payload.
uint32_t checkpoint_checksum(const uint8_t* bytes, size_t payload_bytes) {
  uint32_t crc = crc32c_update(0, bytes, kOffChecksum);
  return crc32c_update(crc, bytes + kAggregateStateHeaderBytes, payload_bytes);
}

}  // namespace

size_t StreamingAggregator::storage_bytes(size_t n) {
  if (n > size_t(EDGEFL_MAX_DIMENSION)) return 0;
  return n == 0 ? 0 : n * sizeof(double) + (alignof(double) - 1);
}

size_t StreamingAggregator::export_bytes(size_t n) {
  if (n > size_t(EDGEFL_MAX_DIMENSION)) return 0;
  return kAggregateStateHeaderBytes + n * 8;
}

Status StreamingAggregator::init(Span<uint8_t> storage, size_t n) {
  sum_ = nullptr;
  n_ = 0;
  bound_ = false;
  count_ = 0;
  total_weight_ = 0.0;
  if (n > size_t(EDGEFL_MAX_DIMENSION)) return Status::kDimensionTooLarge;
  const size_t need = storage_bytes(n);
  if (storage.size() < need || (need > 0 && storage.data() == nullptr)) return Status::kInvalidArgument;
  if (n > 0) {
    const uintptr_t at = reinterpret_cast<uintptr_t>(storage.data());
    const uintptr_t aligned = (at + (alignof(double) - 1)) & ~uintptr_t(alignof(double) - 1);
    sum_ = reinterpret_cast<double*>(storage.data() + (aligned - at));
  }
  n_ = n;
  bound_ = true;
  reset();
  return Status::kOk;
}

void StreamingAggregator::reset() {
  // All-zero bytes are +0.0 in IEEE binary64.
  if (sum_ != nullptr) memset(static_cast<void*>(sum_), 0, n_ * sizeof(double));
  count_ = 0;
  total_weight_ = 0.0;
}

Status StreamingAggregator::add_encoded(Span<const uint8_t> encoded, double weight) {
  return add_encoded(encoded, weight, Span<uint8_t>());
}

Status StreamingAggregator::add_encoded(Span<const uint8_t> encoded, double weight,
                                        Span<uint8_t> decode_workspace) {
  if (!bound_ || !weight_ok(weight)) return Status::kInvalidArgument;
  if (count_ == UINT64_MAX) return Status::kOverflow;
  // decode_add validates the whole encoding (header, checksum, payload) before it touches the
  // accumulator, so a rejected update leaves the sum bit-identical.
  EDGEFL_RETURN_IF_ERROR(decode_add(encoded, weight, Span<double>(sum_, n_), decode_workspace));
  ++count_;
  total_weight_ += weight;
  return Status::kOk;
}

Status StreamingAggregator::add_dense(Span<const float> update, double weight) {
  if (!bound_ || !weight_ok(weight)) return Status::kInvalidArgument;
  if (update.size() != n_) return Status::kDimensionMismatch;
  if (n_ > 0 && update.data() == nullptr) return Status::kInvalidArgument;
  if (count_ == UINT64_MAX) return Status::kOverflow;
  const float* x = update.data();
  for (size_t i = 0; i < n_; ++i) {
    if (aggregate_internal::is_nonfinite(x[i])) return Status::kNonFiniteInput;
  }
  // The same arithmetic as decode_add(double): acc += w * double(x), so a dense fp32 encoding
  // and add_dense() of the same floats give the same bits.
  for (size_t i = 0; i < n_; ++i) sum_[i] += weight * double(x[i]);
  ++count_;
  total_weight_ += weight;
  return Status::kOk;
}

Status StreamingAggregator::mean(Span<float> out) const {
  if (!bound_ || count_ == 0 || !(total_weight_ > 0.0)) return Status::kInvalidArgument;
  if (out.size() != n_) return Status::kDimensionMismatch;
  if (n_ > 0 && out.data() == nullptr) return Status::kInvalidArgument;
  constexpr double kFloatMax = 3.4028234663852886e38;  // FLT_MAX
  // Check first, so that `out` is untouched on failure.
  for (size_t i = 0; i < n_; ++i) {
    const double m = sum_[i] / total_weight_;
    if (!(m >= -kFloatMax && m <= kFloatMax)) return Status::kValueOutOfRange;
  }
  for (size_t i = 0; i < n_; ++i) out[i] = float(sum_[i] / total_weight_);
  return Status::kOk;
}

Status StreamingAggregator::merge(const StreamingAggregator& other) {
  if (!bound_ || !other.bound_ || &other == this) return Status::kInvalidArgument;
  if (other.n_ != n_) return Status::kDimensionMismatch;
  if (other.count_ > UINT64_MAX - count_) return Status::kOverflow;
  for (size_t i = 0; i < n_; ++i) sum_[i] += other.sum_[i];
  count_ += other.count_;
  total_weight_ += other.total_weight_;
  return Status::kOk;
}

Status StreamingAggregator::export_state(Span<uint8_t> out, size_t* written) const {
  if (written == nullptr) return Status::kInvalidArgument;
  *written = 0;
  if (!bound_) return Status::kInvalidArgument;
  const size_t total = export_bytes(n_);
  if (out.size() < total || out.data() == nullptr) return Status::kBufferTooSmall;
  using namespace aggregate_internal;
  uint8_t* p = out.data();
  memcpy(p + kOffMagic, kMagic, 4);
  store_le16(p + kOffVersion, kVersion);
  store_le16(p + kOffHeaderBytes, uint16_t(kAggregateStateHeaderBytes));
  store_le32(p + kOffN, uint32_t(n_));
  store_le32(p + kOffFlags, 0);
  store_le64(p + kOffCount, count_);
  store_f64(p + kOffWeight, total_weight_);
  store_le32(p + kOffReserved, 0);
  for (size_t i = 0; i < n_; ++i) store_f64(p + kAggregateStateHeaderBytes + 8 * i, sum_[i]);
  store_le32(p + kOffChecksum, checkpoint_checksum(p, 8 * n_));
  *written = total;
  return Status::kOk;
}

Status StreamingAggregator::import_state(Span<const uint8_t> bytes) {
  if (!bound_) return Status::kInvalidArgument;
  if (bytes.size() > 0 && bytes.data() == nullptr) return Status::kInvalidArgument;
  if (bytes.size() < kAggregateStateHeaderBytes) return Status::kTruncated;
  using namespace aggregate_internal;
  const uint8_t* p = bytes.data();
  if (memcmp(p + kOffMagic, kMagic, 4) != 0) return Status::kBadMagic;
  if (load_le16(p + kOffVersion) != kVersion) return Status::kUnsupportedVersion;
  if (load_le16(p + kOffHeaderBytes) != kAggregateStateHeaderBytes || load_le32(p + kOffFlags) != 0 ||
      load_le32(p + kOffReserved) != 0) {
    return Status::kBadParameters;
  }
  const uint32_t n = load_le32(p + kOffN);
  if (size_t(n) != n_) return Status::kDimensionMismatch;
  const size_t payload = 8 * size_t(n);
  if (bytes.size() < kAggregateStateHeaderBytes + payload) return Status::kTruncated;
  if (bytes.size() > kAggregateStateHeaderBytes + payload) return Status::kSizeMismatch;
  if (load_le32(p + kOffChecksum) != checkpoint_checksum(p, payload)) return Status::kChecksumMismatch;

  const uint64_t count = load_le64(p + kOffCount);
  const double weight = load_f64(p + kOffWeight);
  // A consistent aggregate: empty means all zero; otherwise each update weighed (0, max].
  if (is_nonfinite(weight) || weight < 0.0) return Status::kCorruptPayload;
  if (count == 0 && weight != 0.0) return Status::kCorruptPayload;
  if (count > 0 && !(weight > 0.0 && weight <= double(count) * kMaxUpdateWeight)) {
    return Status::kCorruptPayload;
  }
  const uint8_t* values = p + kAggregateStateHeaderBytes;
  for (size_t i = 0; i < n_; ++i) {
    const double v = load_f64(values + 8 * i);
    if (is_nonfinite(v) || (count == 0 && v != 0.0)) return Status::kCorruptPayload;
  }
  // Verified: now replace the state.
  for (size_t i = 0; i < n_; ++i) sum_[i] = load_f64(values + 8 * i);
  count_ = count;
  total_weight_ = weight;
  return Status::kOk;
}

}  // namespace edgefl
