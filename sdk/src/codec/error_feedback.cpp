#include "edgefl/error_feedback.h"

#include <string.h>

#include "core/half.h"

namespace edgefl {

size_t ErrorFeedback::storage_bytes(size_t n, ResidualPrecision precision) {
  return n * (precision == ResidualPrecision::kBf16 ? 2 : 4);
}

Status ErrorFeedback::init(Span<uint8_t> storage, size_t n, ResidualPrecision precision) {
  if (n > EDGEFL_MAX_DIMENSION) return Status::kDimensionTooLarge;
  if (precision != ResidualPrecision::kFp32 && precision != ResidualPrecision::kBf16) {
    return Status::kInvalidArgument;
  }
  const size_t need = storage_bytes(n, precision);
  if (storage.size() < need || (need > 0 && storage.data() == nullptr)) return Status::kInvalidArgument;
  storage_ = storage.data();
  n_ = n;
  precision_ = precision;
  reset();
  return Status::kOk;
}

void ErrorFeedback::reset() {
  if (storage_ != nullptr) memset(storage_, 0, storage_bytes(n_, precision_));
}

float ErrorFeedback::residual(size_t i) const {
  if (precision_ == ResidualPrecision::kBf16) {
    uint16_t h;
    memcpy(&h, storage_ + 2 * i, 2);
    return bf16_to_float(h);
  }
  float f;
  memcpy(&f, storage_ + 4 * i, 4);
  return f;
}

double ErrorFeedback::residual_sq_norm() const {
  double sum = 0.0;
  for (size_t i = 0; i < n_; ++i) {
    const double r = residual(i);
    sum += r * r;
  }
  return sum;
}

void ErrorFeedback::store(const float* x) {
  if (precision_ == ResidualPrecision::kBf16) {
    for (size_t i = 0; i < n_; ++i) {
      const uint16_t h = float_to_bf16(x[i]);
      memcpy(storage_ + 2 * i, &h, 2);
    }
  } else {
    memcpy(storage_, x, n_ * 4);
  }
}

Status ErrorFeedback::restore(Span<const uint8_t> encoded, Span<float> scratch, Span<uint8_t> workspace) {
  if (scratch.size() != n_) return Status::kDimensionMismatch;
  float* x = scratch.data();
  for (size_t i = 0; i < n_; ++i) x[i] = residual(i);
  EDGEFL_RETURN_IF_ERROR(decode_add(encoded, 1.0f, scratch, workspace));
  bool finite = true;
  for (size_t i = 0; i < n_; ++i) finite &= !is_nonfinite_bits(float_bits(x[i]));
  if (!finite) return Status::kNonFiniteInput;
  store(x);
  return Status::kOk;
}

Status ErrorFeedback::encode(const CodecSpec& spec, Span<float> update, uint64_t seed,
                             Span<uint8_t> workspace, Span<uint8_t> out, size_t* written) {
  if (written == nullptr) return Status::kInvalidArgument;
  *written = 0;
  if (update.size() != n_) return Status::kDimensionMismatch;
  float* x = update.data();
  // Compensate: x := update + residual. Every coordinate is checked here, whatever the codec
  // reads (random-k reads only the ones it carries): a NaN or Inf must not reach the residual.
  bool finite = true;
  for (size_t i = 0; i < n_; ++i) {
    x[i] += residual(i);
    finite &= !is_nonfinite_bits(float_bits(x[i]));
  }
  if (!finite) return Status::kNonFiniteInput;
  size_t bytes = 0;
  EDGEFL_RETURN_IF_ERROR(edgefl::encode(spec, Span<const float>(x, n_), seed, workspace, out, &bytes));
  // residual := compensated - decoded, computed in place in x (decode_add with weight -1), so
  // no dense copy of the decoded update is needed. The encoding was just produced: it verifies.
  // The encoder is done with its workspace: it is the decode scratch of the sketch codecs
  // (workspace_size() covers decode_workspace_size() for them).
  const Status s = decode_add(Span<const uint8_t>(out.data(), bytes), -1.0f, update, workspace);
  if (s != Status::kOk) return s;
  store(x);
  *written = bytes;
  return Status::kOk;
}

}  // namespace edgefl
