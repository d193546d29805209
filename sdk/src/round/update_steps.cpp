#include "round/update_steps.h"

#include <math.h>

namespace edgefl {

Status encode_update(const CodecSpec& codec, ErrorFeedback* feedback, Span<float> delta, uint64_t codec_seed,
                     Span<uint8_t> workspace, Span<uint8_t> out, size_t* written) {
  if (feedback != nullptr) return feedback->encode(codec, delta, codec_seed, workspace, out, written);
  return encode(codec, Span<const float>(delta.data(), delta.size()), codec_seed, workspace, out, written);
}

Status verify_update(Span<const uint8_t> encoded, size_t n, uint64_t codec_seed, Span<uint8_t> workspace) {
  EncodedInfo info;
  EDGEFL_RETURN_IF_ERROR(verify(encoded, workspace, &info));
  if (info.n != n) return Status::kDimensionMismatch;
  if (info.seed != codec_seed) return Status::kInvalidArgument;
  return Status::kOk;
}

UpdateCheck check_update(Span<const uint8_t> encoded, const uint64_t* codec_seed, Span<const float> model,
                         double norm_bound, Span<float> decoded, Span<uint8_t> decode_workspace) {
  UpdateCheck c;
  const size_t n = model.size();
  // The header alone first (no pass over the payload): dimension, seed, workspace.
  c.status = read_header(encoded, &c.info);
  if (c.status == Status::kOk && c.info.n != n) c.status = Status::kDimensionMismatch;
  if (c.status == Status::kOk && decoded.size() != n) c.status = Status::kInvalidArgument;
  if (c.status == Status::kOk && codec_seed != nullptr && c.info.seed != *codec_seed) {
    c.status = Status::kInvalidArgument;
  }
  if (c.status != Status::kOk) return c;
  // One pass: checksum, every index and value region, and the values.
  c.status = decode(encoded, decoded, decode_workspace);
  if (c.status != Status::kOk) return c;
  // Bounded influence: finite, model + update finite (so that a weighted mean of accepted
  // updates added to the model stays finite too), and the L2 norm within the bound.
  double norm2 = 0;
  for (size_t i = 0; i < n; ++i) {
    const float v = decoded[i];
    if (!isfinite(v)) {
      c.verdict = UpdateVerdict::kNonFinite;
      c.coordinate = i;
      return c;
    }
    norm2 += double(v) * double(v);
    if (!isfinite(model[i] + v)) {
      c.verdict = UpdateVerdict::kModelOverflow;
      c.coordinate = i;
      return c;
    }
  }
  c.norm = sqrt(norm2);
  c.verdict = c.norm <= norm_bound ? UpdateVerdict::kAccepted : UpdateVerdict::kNormTooLarge;
  return c;
}

const char* update_verdict_name(UpdateVerdict verdict) {
  switch (verdict) {
    case UpdateVerdict::kAccepted: return "accepted";
    case UpdateVerdict::kInvalidEncoding: return "invalid_encoding";
    case UpdateVerdict::kNonFinite: return "non_finite";
    case UpdateVerdict::kModelOverflow: return "model_overflow";
    case UpdateVerdict::kNormTooLarge: return "norm_too_large";
  }
  return "unknown";
}

}  // namespace edgefl
