// edgefl/error_feedback.h: the per-client residual of error feedback (EF-SGD).
//
// Error feedback (Seide et al. 2014; Stich et al., NeurIPS 2018; Karimireddy et al., ICML 2019)
// keeps what a lossy codec dropped and adds it to the next round's update, so that biased codecs
// (top-k, scaled sign) converge at the rate of SGD. The residual lives in caller memory, in fp32 or
// bf16 (half the memory, at the cost of bf16 rounding of the carried error).
#ifndef EDGEFL_ERROR_FEEDBACK_H_
#define EDGEFL_ERROR_FEEDBACK_H_

#include <stddef.h>
#include <stdint.h>

#include "edgefl/codec.h"
#include "edgefl/span.h"
#include "edgefl/status.h"

namespace edgefl {

enum class ResidualPrecision : uint8_t { kFp32 = 0, kBf16 = 1 };

class ErrorFeedback {
 public:
  // Bytes of storage a residual of n coordinates needs.
  static size_t storage_bytes(size_t n, ResidualPrecision precision);

  // Binds the residual to caller-owned `storage` (storage_bytes(n, precision) bytes, any
  // alignment) and zeroes it. The storage must outlive this object; it is never freed here.
  // Fails: kInvalidArgument if storage is too small; kDimensionTooLarge.
  [[nodiscard]] Status init(Span<uint8_t> storage, size_t n, ResidualPrecision precision);

  // Encodes update + residual with `spec`, and sets residual := (update + residual) - decoded.
  // `update` is scratch: its contents are unspecified afterwards. On failure the residual is
  // unchanged. Same failures as edgefl::encode(), plus kDimensionMismatch.
  [[nodiscard]] Status encode(const CodecSpec& spec, Span<float> update, uint64_t seed,
                              Span<uint8_t> workspace, Span<uint8_t> out, size_t* written);

  // Adds back an encoding that encode() produced and the model never counted (residual +=
  // decoded), so the next update carries it. `scratch`: size() floats, contents unspecified
  // afterwards; `workspace` as for decode_add(). On failure the residual is unchanged. Fails:
  // kDimensionMismatch; kNonFiniteInput; decode_add()'s failures.
  [[nodiscard]] Status restore(Span<const uint8_t> encoded, Span<float> scratch, Span<uint8_t> workspace);

  // Sets the residual to zero (e.g. when the model is replaced).
  void reset();

  size_t size() const { return n_; }
  ResidualPrecision precision() const { return precision_; }
  float residual(size_t i) const;  // i < size()
  // Sum of squares of the residual (for monitoring).
  double residual_sq_norm() const;

 private:
  void store(const float* x);  // residual := x (size() floats), rounded to the precision
  uint8_t* storage_ = nullptr;
  size_t n_ = 0;
  ResidualPrecision precision_ = ResidualPrecision::kFp32;
};

}  // namespace edgefl

#endif  // EDGEFL_ERROR_FEEDBACK_H_
