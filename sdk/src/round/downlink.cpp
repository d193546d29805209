#include "round/downlink.h"

#include "core/half.h"

namespace edgefl {

Status round_to_bf16_grid(Span<float> model) {
  for (size_t i = 0; i < model.size(); ++i) {
    const uint32_t bits = float_bits(model[i]);
    if (is_nonfinite_bits(bits) || (bits & 0x7FFFFFFFu) >= kBf16OverflowBits) return Status::kNonFiniteInput;
    model[i] = bf16_to_float(float_to_bf16(model[i]));
  }
  return Status::kOk;
}

Status make_patch(const CodecSpec& spec, Span<const float> server_model, Span<const float> public_model,
                  uint64_t seed, Span<float> difference, Span<uint8_t> workspace, Span<uint8_t> out,
                  size_t* written) {
  const size_t n = server_model.size();
  if (public_model.size() != n || difference.size() != n) return Status::kInvalidArgument;
  for (size_t i = 0; i < n; ++i) difference[i] = server_model[i] - public_model[i];
  return encode(spec, Span<const float>(difference.data(), n), seed, workspace, out, written);
}

Status apply_patch(Span<const uint8_t> patch, Span<float> public_model, Span<float> decoded,
                   Span<uint8_t> decode_workspace) {
  const size_t n = public_model.size();
  if (decoded.size() != n) return Status::kInvalidArgument;
  EncodedInfo info;
  EDGEFL_RETURN_IF_ERROR(read_header(patch, &info));
  if (info.n != n) return Status::kDimensionMismatch;
  EDGEFL_RETURN_IF_ERROR(decode(patch, decoded, decode_workspace));
  for (size_t i = 0; i < n; ++i) {
    // One float32 addition, then bf16 rounding: the same bits on every platform (no FMA here).
    const float sum = public_model[i] + decoded[i];
    const uint32_t bits = float_bits(sum);
    if (is_nonfinite_bits(bits) || (bits & 0x7FFFFFFFu) >= kBf16OverflowBits) return Status::kNonFiniteInput;
    public_model[i] = bf16_to_float(float_to_bf16(sum));
  }
  return Status::kOk;
}

Status apply_whole_model(Span<const uint8_t> whole, Span<float> public_model) {
  EncodedInfo info;
  EDGEFL_RETURN_IF_ERROR(read_header(whole, &info));
  if (info.n != public_model.size()) return Status::kDimensionMismatch;
  if (info.sparsifier != SparsifierKind::kNone || info.values != ValueCoderKind::kBf16) {
    return Status::kBadParameters;  // a whole model travels as dense bf16 only
  }
  return decode(whole, public_model);
}

Status stream_append(Span<const uint8_t> encoding, Span<uint8_t> out, size_t* used) {
  if (used == nullptr || *used > out.size() || encoding.size() == 0 || encoding.size() > UINT32_MAX) {
    return Status::kInvalidArgument;
  }
  if (out.size() - *used < kStreamPrefixBytes + encoding.size()) return Status::kBufferTooSmall;
  uint8_t* p = out.data() + *used;
  const uint32_t length = uint32_t(encoding.size());
  for (size_t i = 0; i < kStreamPrefixBytes; ++i) p[i] = uint8_t(length >> (8 * i));
  for (size_t i = 0; i < encoding.size(); ++i) p[kStreamPrefixBytes + i] = encoding[i];
  *used += kStreamPrefixBytes + encoding.size();
  return Status::kOk;
}

Status stream_next(Span<const uint8_t> stream, size_t* offset, Span<const uint8_t>* encoding) {
  if (offset == nullptr || encoding == nullptr || *offset > stream.size()) return Status::kInvalidArgument;
  const size_t left = stream.size() - *offset;
  if (left < kStreamPrefixBytes) return Status::kTruncated;
  const uint8_t* p = stream.data() + *offset;
  uint32_t length = 0;
  for (size_t i = 0; i < kStreamPrefixBytes; ++i) length |= uint32_t(p[i]) << (8 * i);
  if (length == 0) return Status::kCorruptPayload;
  if (left - kStreamPrefixBytes < length) return Status::kTruncated;
  *encoding = Span<const uint8_t>(p + kStreamPrefixBytes, length);
  *offset += kStreamPrefixBytes + length;
  return Status::kOk;
}

size_t stream_decode_workspace(Span<const uint8_t> encoding) {
  EncodedInfo info;
  return read_header(encoding, &info) == Status::kOk ? decode_workspace_size(info) : 0;
}

size_t download_decode_workspace(Span<const uint8_t> stream) {
  size_t offset = 0, largest = 0;
  Span<const uint8_t> encoding;
  while (offset < stream.size()) {
    if (stream_next(stream, &offset, &encoding) != Status::kOk) return 0;
    const size_t ws = stream_decode_workspace(encoding);
    if (ws > largest) largest = ws;
  }
  return largest;
}

Status apply_download(Span<const uint8_t> stream, bool whole, Span<float> model, Span<float> decoded,
                      Span<uint8_t> workspace, uint64_t* patches) {
  if (patches == nullptr) return Status::kInvalidArgument;
  *patches = 0;
  size_t offset = 0;
  Span<const uint8_t> encoding;
  while (offset < stream.size()) {
    EDGEFL_RETURN_IF_ERROR(stream_next(stream, &offset, &encoding));
    if (whole) {
      if (offset != stream.size()) return Status::kCorruptPayload;
      return apply_whole_model(encoding, model);
    }
    EDGEFL_RETURN_IF_ERROR(apply_patch(encoding, model, decoded, workspace));
    ++*patches;
  }
  return whole ? Status::kTruncated : Status::kOk;  // a whole download with nothing in it
}

}  // namespace edgefl
